/* libhpdcalls.so: hpd's in-process call counter, preloaded by `hpctl record --calls -- CMD`. Counts
 * caller->callee edges and times each call (its return address is replaced by a trampoline, the
 * original kept on a per-thread shadow stack) into the shared table hpd reads (preload_abi.h).
 * Built with -mgeneral-regs-only (see hooks.S) and without instrumentation of its own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hpd/calls/preload_abi.h"

#define HIDDEN __attribute__((visibility("hidden")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

extern void hpd_calls_return_trampoline(void) HIDDEN;
void hpd_calls_exit(uint64_t* after_slot) HIDDEN;
void hpd_calls_enter(uint64_t* parent_slot, uint64_t selfpc, int fentry) HIDDEN;

/* A timed call in progress: where its return address lives and what it was (preload_abi.h spells
 * the same layout for hpd's unwinder). */
struct shadow_frame {
  uint64_t* slot;
  uint64_t original;
  uint64_t start;
  uint32_t func;     /* HPD_CALLS_NO_FUNC: only the return address is kept (e.g. after fork) */
  uint32_t restored; /* the original return address was put back (an exception unwinds through it) */
};
_Static_assert(sizeof(struct shadow_frame) == sizeof(struct hpd_calls_shadow_frame), "shadow frame layout");
_Static_assert(offsetof(struct shadow_frame, original) == offsetof(struct hpd_calls_shadow_frame, original),
               "shadow frame layout");
_Static_assert(offsetof(struct shadow_frame, restored) == offsetof(struct hpd_calls_shadow_frame, restored),
               "shadow frame layout");

/* 64 Ki frames (2 MiB of address space, touched only as deep as the program goes). */
#define SHADOW_CAPACITY 65536u
/* Frames deeper on the same stack lie below the slot, at most this far (a thread's stack). */
#define SAME_STACK_SPAN (64ull << 20)

struct thread_state {
  struct hpd_calls_thread* slot;
  struct hpd_calls_edge* edges;
  struct hpd_calls_func* funcs;
  struct shadow_frame* shadow;
  uint32_t depth;
  uint32_t in_hook;
};
_Static_assert(offsetof(struct thread_state, shadow) == HPD_CALLS_STATE_SHADOW_OFFSET, "thread state layout");
_Static_assert(offsetof(struct thread_state, depth) == HPD_CALLS_STATE_DEPTH_OFFSET, "thread state layout");

static struct hpd_calls_header* g_table;
static int g_state; /* 0: not initialized, 1: counting, 2: off (no table) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_thread_key;
static __thread struct thread_state* t_state __attribute__((tls_model("initial-exec")));
static __thread int t_off __attribute__((tls_model("initial-exec")));

static inline uint64_t ticks(void) {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return ((uint64_t)hi << 32) | lo;
}

/* Relaxed atomic stores: the reader may look at any moment; aligned 64-bit stores never tear. */
static inline void put64(uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline void put32(uint32_t* p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static void write_err(const char* s) {
  ssize_t r = write(2, s, strlen(s));
  (void)r;
}

/* ---- NOP sites (-mnop-mcount -mrecord-mcount, -fpatchable-function-entry=5) ---- */

/* A page near a module holding absolute jumps to __fentry__ and mcount, so that a 5-byte call with a
 * 32-bit displacement reaches them from its code. */
struct stub_page {
  uint8_t* fentry;
  uint8_t* mcount;
};

extern void __fentry__(void);
extern void mcount(void);

static void put_jump(uint8_t* at, void (*target)(void)) {
  /* jmp *0(%rip); .quad target */
  at[0] = 0xff;
  at[1] = 0x25;
  memset(at + 2, 0, 4);
  const uint64_t t = (uint64_t)target;
  memcpy(at + 6, &t, 8);
}

static int near_stub_page(uint64_t low, uint64_t high, struct stub_page* out) {
  const uint64_t page = 4096;
  /* Try below the module, then above it, stepping 1 MiB away, within 1.5 GiB of both ends. */
  for (uint64_t step = 1; step < 1536; ++step) {
    for (int side = 0; side < 2; ++side) {
      uint64_t hint;
      if (side == 0) {
        if (low < step * (1ull << 20) + page) continue;
        hint = (low - step * (1ull << 20)) & ~(page - 1);
      } else {
        hint = ((high + step * (1ull << 20)) + page - 1) & ~(page - 1);
      }
      void* p = mmap((void*)hint, page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p == MAP_FAILED) continue;
      const uint64_t a = (uint64_t)p;
      const uint64_t far = a > low ? a + page - low : high - a;
      if (far >= (1ull << 31) - page) {
        munmap(p, page);
        continue;
      }
      uint8_t* bytes = (uint8_t*)p;
      put_jump(bytes, __fentry__);
      put_jump(bytes + 16, mcount);
      if (mprotect(p, page, PROT_READ | PROT_EXEC) != 0) {
        munmap(p, page);
        return 0;
      }
      out->fentry = bytes;
      out->mcount = bytes + 16;
      return 1;
    }
  }
  return 0;
}

static const uint8_t kNop5[] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
static const uint8_t kNop5Clang[] = {0x0f, 0x1f, 0x44, 0x00, 0x08};
static const uint8_t kNop1x5[] = {0x90, 0x90, 0x90, 0x90, 0x90};
static const uint8_t kFramePrologue[] = {0x55, 0x48, 0x89, 0xe5}; /* push rbp; mov rsp,rbp */

static int is_nop_site(const uint8_t* p) {
  return memcmp(p, kNop5, 5) == 0 || memcmp(p, kNop5Clang, 5) == 0 || memcmp(p, kNop1x5, 5) == 0;
}

/* The start addresses (link-time) of the functions of an ELF file, from .symtab (else .dynsym),
 * sorted, in an anonymous mapping the caller unmaps; NULL when the file has none. */
struct func_starts {
  uint64_t* at;
  size_t n;
  size_t bytes;
};

static int by_address(const void* a, const void* b) {
  const uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

static struct func_starts read_func_starts(const uint8_t* file, size_t size, const Elf64_Shdr* sh,
                                           unsigned shnum) {
  struct func_starts out = {NULL, 0, 0};
  for (uint32_t want = SHT_SYMTAB; out.at == NULL; want = SHT_DYNSYM) {
    for (unsigned i = 0; i < shnum; ++i) {
      if (sh[i].sh_type != want || sh[i].sh_entsize != sizeof(Elf64_Sym) ||
          sh[i].sh_offset + sh[i].sh_size > size)
        continue;
      const Elf64_Sym* syms = (const Elf64_Sym*)(file + sh[i].sh_offset);
      const size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
      out.bytes = (count * 8 + 4095) & ~(size_t)4095;
      if (out.bytes == 0) continue;
      void* mem = mmap(NULL, out.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED) return out;
      out.at = (uint64_t*)mem;
      for (size_t k = 0; k < count; ++k)
        if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC && syms[k].st_shndx != SHN_UNDEF &&
            syms[k].st_value != 0)
          out.at[out.n++] = syms[k].st_value;
      qsort(out.at, out.n, 8, by_address);
      break;
    }
    if (want == SHT_DYNSYM) break;
  }
  return out;
}

static int is_function_start(const struct func_starts* f, uint64_t vaddr) {
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (f->at[mid] < vaddr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < f->n && f->at[lo] == vaddr;
}

static const uint8_t kEndbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
static const uint8_t kPushR10[] = {0x41, 0x52};

/* Whether the NOP site `p` (link-time address `link`, `room` bytes into the text) is at its function's
 * entry: the function's first instruction, possibly after endbr64, and after `push %r10` in a gcc
 * nested function (which saves its static chain around the hook). */
static int is_entry_site(const struct func_starts* funcs, const uint8_t* p, uint64_t link, uint64_t room) {
  uint64_t back = 0;
  if (room >= 2 && memcmp(p - 2, kPushR10, 2) == 0) back = 2;
  if (is_function_start(funcs, link - back)) return 1;
  return room >= back + 4 && memcmp(p - back - 4, kEndbr64, 4) == 0 &&
         is_function_start(funcs, link - back - 4);
}

/* Reads the site tables of the ELF file `path` loaded at `bias` and turns each NOP site into a call
 * of __fentry__ (at a function's entry, -mfentry, -fpatchable-function-entry) or of mcount (after the
 * prologue: -mnop-mcount without -mfentry). Which one comes from the symbols: a site at a function's
 * start (or right after its endbr64) is an entry. Without symbols, a module where some site follows
 * `push rbp; mov rsp,rbp` is taken as mcount-style throughout (no function ends that way). */
static void patch_module(const char* path, uint64_t bias, const ElfW(Phdr) * phdr, int phnum) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
    close(fd);
    return;
  }
  const uint8_t* file = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (file == MAP_FAILED) return;
  const size_t size = (size_t)st.st_size;
  const Elf64_Ehdr* eh = (const Elf64_Ehdr*)file;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shoff == 0 ||
      eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size || eh->e_shstrndx >= eh->e_shnum) {
    munmap((void*)file, size);
    return;
  }
  const Elf64_Shdr* sh = (const Elf64_Shdr*)(file + eh->e_shoff);
  const Elf64_Shdr* names = &sh[eh->e_shstrndx];
  /* The executable range of the module, for the stub page and the protections. */
  uint64_t text_low = UINT64_MAX, text_high = 0;
  for (int i = 0; i < phnum; ++i) {
    if (phdr[i].p_type != PT_LOAD || !(phdr[i].p_flags & PF_X)) continue;
    const uint64_t lo = bias + phdr[i].p_vaddr, hi = lo + phdr[i].p_memsz;
    if (lo < text_low) text_low = lo;
    if (hi > text_high) text_high = hi;
  }
  struct func_starts funcs = read_func_starts(file, size, sh, eh->e_shnum);
  int mcount_module = 0; /* without symbols: decided below */
  struct stub_page stubs = {0, 0};
  int have_stubs = 0;
  for (unsigned i = 0; i < eh->e_shnum && text_high != 0; ++i) {
    if (names->sh_offset + sh[i].sh_name >= size) continue;
    const char* name = (const char*)file + names->sh_offset + sh[i].sh_name;
    if (strcmp(name, "__mcount_loc") != 0 && strcmp(name, "__patchable_function_entries") != 0) continue;
    if (!(sh[i].sh_flags & SHF_ALLOC) || sh[i].sh_type == SHT_NOBITS) continue;
    /* The table in memory holds run-time addresses once the loader has relocated it (PIC), or
     * link-time ones (non-PIE executable, where the bias is 0). */
    const uint64_t* sites = (const uint64_t*)(bias + sh[i].sh_addr);
    const size_t n = sh[i].sh_size / 8;
    if (n == 0) continue;
    if (!have_stubs) {
      if (!near_stub_page(text_low, text_high, &stubs)) {
        __atomic_fetch_add(&g_table->sites_unpatched, n, __ATOMIC_RELAXED);
        continue;
      }
      have_stubs = 1;
    }
    const uint64_t page = 4096;
    const uint64_t lo = text_low & ~(page - 1), hi = (text_high + page - 1) & ~(page - 1);
    if (mprotect((void*)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
      __atomic_fetch_add(&g_table->sites_unpatched, n, __ATOMIC_RELAXED);
      continue;
    }
    uint64_t patched = 0, skipped = 0;
    if (funcs.n == 0) {
      for (size_t k = 0; k < n && !mcount_module; ++k) {
        uint64_t site = sites[k];
        if (site != 0 && site < text_low) site += bias;
        if (site >= text_low + 4 && site + 5 <= text_high &&
            memcmp((const uint8_t*)site - 4, kFramePrologue, 4) == 0)
          mcount_module = 1;
      }
    }
    for (size_t k = 0; k < n; ++k) {
      uint64_t site = sites[k];
      if (site != 0 && site < text_low) site += bias; /* an unrelocated link-time address */
      if (site < text_low || site + 5 > text_high) {
        ++skipped;
        continue;
      }
      uint8_t* p = (uint8_t*)site;
      if (!is_nop_site(p)) continue; /* already a call (-mrecord-mcount without -mnop-mcount) */
      int after_prologue = mcount_module;
      if (funcs.n != 0) after_prologue = !is_entry_site(&funcs, p, site - bias, site - text_low);
      const uint8_t* target = after_prologue ? stubs.mcount : stubs.fentry;
      const int32_t rel = (int32_t)((int64_t)target - (int64_t)(site + 5));
      uint8_t call[5] = {0xe8};
      memcpy(call + 1, &rel, 4);
      memcpy(p, call, 5);
      ++patched;
    }
    mprotect((void*)lo, hi - lo, PROT_READ | PROT_EXEC);
    __atomic_fetch_add(&g_table->sites_patched, patched, __ATOMIC_RELAXED);
    if (skipped != 0) __atomic_fetch_add(&g_table->sites_unpatched, skipped, __ATOMIC_RELAXED);
  }
  if (funcs.at != NULL) munmap(funcs.at, funcs.bytes);
  munmap((void*)file, size);
}

/* Modules already patched, by load address (a module unloaded and loaded again is patched again). */
#define MAX_MODULES 1024
static uint64_t g_patched[MAX_MODULES];
static unsigned g_patched_count;
static unsigned long long g_patched_subs;
static pthread_mutex_t g_patch_lock = PTHREAD_MUTEX_INITIALIZER;

static int patch_one(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  if (info->dlpi_subs != g_patched_subs) {
    g_patched_subs = info->dlpi_subs;
    g_patched_count = 0;
  }
  const uint64_t base = info->dlpi_addr;
  const char* name = info->dlpi_name;
  const int is_main = name == NULL || name[0] == '\0';
  if (!is_main && strstr(name, "linux-vdso") != NULL) return 0;
  for (unsigned i = 0; i < g_patched_count; ++i)
    if (g_patched[i] == base + (is_main ? 1 : 0)) return 0;
  if (g_patched_count < MAX_MODULES) g_patched[g_patched_count++] = base + (is_main ? 1 : 0);
  patch_module(is_main ? "/proc/self/exe" : name, base, info->dlpi_phdr, info->dlpi_phnum);
  return 0;
}

static void patch_loaded_modules(void) {
  pthread_mutex_lock(&g_patch_lock);
  dl_iterate_phdr(patch_one, NULL);
  pthread_mutex_unlock(&g_patch_lock);
}

/* Libraries loaded later get their NOP sites patched when dlopen returns. */
void* dlopen(const char* file, int mode) {
  static void* (*real)(const char*, int);
  if (real == NULL) real = (void* (*)(const char*, int))dlsym(RTLD_NEXT, "dlopen");
  if (real == NULL) return NULL;
  void* handle = real(file, mode);
  if (handle != NULL && g_state == 1) patch_loaded_modules();
  return handle;
}

/* ---- threads ---- */

static void release_thread(void* arg);

static struct hpd_calls_thread* slot_at(uint32_t i) {
  return (struct hpd_calls_thread*)((char*)g_table + hpd_calls_threads_offset()) + i;
}

/* A slot for the calling thread: a new one, else one a finished thread of this process left. */
static int claim_slot(int32_t pid, uint32_t* out) {
  uint32_t i = __atomic_fetch_add(&g_table->threads_used, 1, __ATOMIC_RELAXED);
  if (i < HPD_CALLS_MAX_THREADS) {
    *out = i;
    return 1;
  }
  __atomic_store_n(&g_table->threads_used, HPD_CALLS_MAX_THREADS, __ATOMIC_RELAXED);
  for (i = 0; i < HPD_CALLS_MAX_THREADS; ++i) {
    struct hpd_calls_thread* s = slot_at(i);
    uint32_t released = 2;
    if (__atomic_load_n(&s->pid, __ATOMIC_RELAXED) == pid &&
        __atomic_compare_exchange_n(&s->state, &released, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
      *out = i;
      return 1;
    }
  }
  return 0;
}

static struct thread_state* attach_thread(struct thread_state* keep_shadow) {
  const int32_t pid = getpid();
  uint32_t index;
  if (!claim_slot(pid, &index)) {
    __atomic_fetch_add(&g_table->threads_refused, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  struct thread_state* t = keep_shadow;
  if (t == NULL) {
    void* mem = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void* shadow = mmap(NULL, SHADOW_CAPACITY * sizeof(struct shadow_frame), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED || shadow == MAP_FAILED) return NULL;
    t = (struct thread_state*)mem;
    t->shadow = (struct shadow_frame*)shadow;
    t->depth = 0;
  }
  struct hpd_calls_thread* s = slot_at(index);
  s->pid = pid;
  s->tid = (int32_t)syscall(SYS_gettid);
  __atomic_store_n(&s->state, 1, __ATOMIC_RELEASE);
  t->slot = s;
  t->edges = (struct hpd_calls_edge*)((char*)g_table + hpd_calls_edges_offset(index));
  t->funcs = (struct hpd_calls_func*)((char*)g_table + hpd_calls_funcs_offset(index));
  pthread_setspecific(g_thread_key, t);
  return t;
}

/* At thread exit (after its start routine returned): the slot may serve another thread. */
static void release_thread(void* arg) {
  struct thread_state* t = (struct thread_state*)arg;
  if (t == NULL || t != t_state) return;
  t_off = 1;
  t_state = NULL;
  __atomic_store_n(&t->slot->state, 2, __ATOMIC_RELEASE);
  munmap(t->shadow, SHADOW_CAPACITY * sizeof(struct shadow_frame));
  munmap(t, sizeof *t);
}

/* hpd's eBPF programs take a uprobe here (preload_abi.h): what they need to unwind through this
 * process's hooked frames arrives in the argument registers. Does nothing itself. */
__attribute__((noinline, used, visibility("default"))) void hpd_calls_announce(uint64_t trampoline,
                                                                               int64_t tls_state_offset) {
  __asm__ volatile("" : : "r"(trampoline), "r"(tls_state_offset) : "memory");
}

static void announce(void) {
  uintptr_t thread_pointer;
  __asm__("mov %%fs:0, %0" : "=r"(thread_pointer));
  hpd_calls_announce((uint64_t)(uintptr_t)&hpd_calls_return_trampoline,
                     (int64_t)((uintptr_t)&t_state - thread_pointer));
}

/* In a forked child: its thread gets a slot of its own (the parent's stays the parent's); the frames
 * inherited on the shadow stack keep only their return addresses. */
static void after_fork_in_child(void) {
  struct thread_state* t = t_state;
  if (t == NULL || g_state != 1) return;
  for (uint32_t i = 0; i < t->depth; ++i) t->shadow[i].func = HPD_CALLS_NO_FUNC;
  if (attach_thread(t) == NULL) {
    /* No slot: keep returning through the frames already hooked, count nothing new. */
    t->slot = NULL;
    t_off = 1;
  }
  __atomic_fetch_add(&g_table->processes, 1, __ATOMIC_RELAXED);
  announce(); /* a new process: its frames inherited on the shadow stack still return through the hook */
}

static void init_once(void) {
  const char* path = getenv(HPD_CALLS_ENV_TABLE);
  g_state = 2;
  if (path == NULL || path[0] == '\0') return;
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    write_err("hpd calls runtime: cannot open the call table named by " HPD_CALLS_ENV_TABLE
              "; calls are not counted\n");
    return;
  }
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= hpd_calls_file_size())
    p = mmap(NULL, hpd_calls_file_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return;
  struct hpd_calls_header* h = (struct hpd_calls_header*)p;
  if (h->magic != HPD_CALLS_MAGIC || h->version != HPD_CALLS_VERSION) {
    write_err("hpd calls runtime: the call table is of another hpd version; calls are not counted\n");
    munmap(p, hpd_calls_file_size());
    return;
  }
  if (pthread_key_create(&g_thread_key, release_thread) != 0) return;
  pthread_atfork(NULL, NULL, after_fork_in_child);
  g_table = h;
  __atomic_fetch_add(&h->processes, 1, __ATOMIC_RELAXED);
  g_state = 1;
  announce();
  patch_loaded_modules();
}

__attribute__((constructor)) static void hpd_calls_constructor(void) {
  pthread_once(&g_once, init_once);
}

static struct thread_state* thread_state_slow(void) {
  if (t_off) return NULL;
  if (g_state == 0) {
    t_off = 1; /* calls made while initializing are not hooked */
    pthread_once(&g_once, init_once);
    t_off = 0;
  }
  if (g_state != 1) {
    t_off = 1;
    return NULL;
  }
  struct thread_state* t = attach_thread(NULL);
  if (t == NULL) t_off = 1;
  t_state = t;
  return t;
}

/* ---- the hot path ---- */

static inline uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

static uint32_t find_func(struct thread_state* t, uint64_t callee) {
  const uint32_t mask = HPD_CALLS_FUNCS_PER_THREAD - 1;
  uint32_t i = (uint32_t)mix(callee, 0) & mask;
  for (uint32_t n = 0; n < 64; ++n, i = (i + 1) & mask) {
    struct hpd_calls_func* f = &t->funcs[i];
    if (f->callee == callee) return i;
    if (f->callee == 0) {
      f->hist = HPD_CALLS_NO_HIST;
      __atomic_store_n(&f->callee, callee, __ATOMIC_RELEASE);
      return i;
    }
  }
  return HPD_CALLS_NO_FUNC;
}

static struct hpd_calls_edge* find_edge(struct thread_state* t, uint64_t caller, uint64_t callee) {
  const uint32_t mask = HPD_CALLS_EDGES_PER_THREAD - 1;
  uint32_t i = (uint32_t)mix(callee, caller) & mask;
  for (uint32_t n = 0; n < 64; ++n, i = (i + 1) & mask) {
    struct hpd_calls_edge* e = &t->edges[i];
    if (e->callee == callee && e->caller == caller) return e;
    if (e->callee == 0) {
      e->caller = caller;
      e->func = find_func(t, callee);
      __atomic_store_n(&e->callee, callee, __ATOMIC_RELEASE);
      return e;
    }
  }
  return NULL;
}

/* Frames whose return never came through the trampoline (longjmp, an exception, a thread that went
 * on elsewhere): dropped untimed. */
static void abandon_top(struct thread_state* t) {
  struct shadow_frame* f = &t->shadow[--t->depth];
  if (f->func != HPD_CALLS_NO_FUNC && t->slot != NULL) {
    struct hpd_calls_func* fn = &t->funcs[f->func];
    if (fn->active != 0) fn->active--;
    put64(&t->slot->frames_abandoned, t->slot->frames_abandoned + 1);
  }
}

/* gcc saves the static chain of a nested function around its entry hook (`push %r10; call
 * __fentry__; pop %r10`): the caller's return address is then one word further up. The bytes are
 * read only within selfpc's page (a function starting right at a page boundary is taken as plain). */
static inline uint64_t* fentry_parent_slot(uint64_t* slot, uint64_t selfpc) {
  if (((selfpc - 8) >> 12) != ((selfpc - 1) >> 12)) return slot;
  const uint8_t* p = (const uint8_t*)selfpc;
  if ((p[-6] == 0xff && p[-5] == 0x15 && p[-8] == 0x41 && p[-7] == 0x52) ||
      (p[-5] == 0xe8 && p[-7] == 0x41 && p[-6] == 0x52))
    return slot + 1;
  return slot;
}

void hpd_calls_enter(uint64_t* parent_slot, uint64_t selfpc, int fentry) {
  if (fentry) parent_slot = fentry_parent_slot(parent_slot, selfpc);
  struct thread_state* t = t_state;
  if (UNLIKELY(t == NULL || t->slot == NULL)) {
    if (t != NULL) return; /* a forked child that found no slot */
    t = thread_state_slow();
    if (t == NULL) return;
  }
  if (UNLIKELY(t->in_hook)) {
    put64(&t->slot->calls_lost, t->slot->calls_lost + 1);
    return;
  }
  t->in_hook = 1;
  uint64_t caller = *parent_slot;
  const int tail_call = caller == (uint64_t)hpd_calls_return_trampoline;
  if (UNLIKELY(tail_call)) {
    /* A hooked function jumped to this one: the caller is the one its frame returns to. */
    caller = 0;
    for (uint32_t i = t->depth; i-- > 0;) {
      if (t->shadow[i].slot == parent_slot && !t->shadow[i].restored) {
        caller = t->shadow[i].original;
        break;
      }
    }
  }
  struct hpd_calls_edge* e = find_edge(t, caller, selfpc);
  if (UNLIKELY(e == NULL)) {
    put64(&t->slot->calls_lost, t->slot->calls_lost + 1);
    t->in_hook = 0;
    return;
  }
  put64(&e->count, e->count + 1);
  /* Frames at or below this slot on the same stack are gone (longjmp went past them). */
  while (t->depth != 0) {
    const struct shadow_frame* top = &t->shadow[t->depth - 1];
    const uint64_t s = (uint64_t)top->slot, p = (uint64_t)parent_slot;
    if (s > p || p - s > SAME_STACK_SPAN || (s == p && tail_call)) break;
    abandon_top(t);
  }
  if (UNLIKELY(tail_call || e->func == HPD_CALLS_NO_FUNC || t->depth == SHADOW_CAPACITY)) {
    put64(&t->slot->calls_untimed, t->slot->calls_untimed + 1);
    t->in_hook = 0;
    return;
  }
  struct hpd_calls_func* fn = &t->funcs[e->func];
  fn->active++;
  struct shadow_frame* f = &t->shadow[t->depth++];
  f->slot = parent_slot;
  f->original = *parent_slot;
  f->func = e->func;
  f->restored = 0;
  *parent_slot = (uint64_t)hpd_calls_return_trampoline;
  t->in_hook = 0;
  f->start = ticks();
}

static void record_latency(struct thread_state* t, uint32_t func, uint64_t d) {
  struct hpd_calls_func* fn = &t->funcs[func];
  put64(&fn->timed, fn->timed + 1);
  put64(&fn->sum_ticks, fn->sum_ticks + d);
  if (fn->active != 0) fn->active--;
  if (fn->active == 0) put64(&fn->outer_ticks, fn->outer_ticks + d);
  if (d > fn->max_ticks) put64(&fn->max_ticks, d);
  uint32_t h = fn->hist;
  if (UNLIKELY(h == HPD_CALLS_NO_HIST)) {
    h = __atomic_fetch_add(&g_table->hist_used, 1, __ATOMIC_RELAXED);
    if (h >= HPD_CALLS_HIST_BLOCKS) h = HPD_CALLS_HIST_BLOCKS; /* none left: avg and max only */
    put32(&fn->hist, h);
  }
  if (LIKELY(h < HPD_CALLS_HIST_BLOCKS)) {
    uint64_t* buckets = (uint64_t*)((char*)g_table + hpd_calls_hist_offset(h));
    uint64_t* b = &buckets[hpd_calls_hist_bucket(d)];
    put64(b, *b + 1);
  }
}

/* The trampoline's (hooks.S): a hooked call returned. Its latency is recorded and the original
 * return address written back into the slot the trampoline returns through. */
void hpd_calls_exit(uint64_t* after_slot) {
  const uint64_t now = ticks();
  struct thread_state* t = t_state;
  uint64_t* slot = after_slot - 1;
  if (t != NULL) {
    const uint32_t saved_in_hook = t->in_hook;
    t->in_hook = 1;
    while (t->depth != 0) {
      struct shadow_frame* f = &t->shadow[t->depth - 1];
      if (f->slot == slot && !f->restored) {
        /* The trampoline's frame returns through the slot (hooks.S): give it the original before the
         * shadow frame goes, so that a sample in between finds one or the other (a compiler barrier
         * is enough: the sampling interrupt runs on this thread's CPU, between its instructions). */
        *slot = f->original;
        __asm__ volatile("" ::: "memory");
        t->depth--;
        if (f->func != HPD_CALLS_NO_FUNC && t->slot != NULL) record_latency(t, f->func, now - f->start);
        t->in_hook = saved_in_hook;
        return;
      }
      /* A frame above the one returning now never returned itself (longjmp). */
      abandon_top(t);
    }
  }
  write_err(
      "hpd calls runtime: a function returned through hpd's hook but its return address is lost "
      "(stack switched?); aborting\n");
  abort();
}

/* ---- exceptions ---- */

/* The unwinder cannot step through the trampoline: before an exception (or pthread_exit's forced
 * unwind) walks the stack, every hooked frame gets its return address back. The frames the exception
 * leaves stay counted but are not timed; a C++ catch hooks the surviving ones again. */
static void restore_return_addresses(void) {
  struct thread_state* t = t_state;
  if (t == NULL) return;
  for (uint32_t i = 0; i < t->depth; ++i) {
    struct shadow_frame* f = &t->shadow[i];
    if (f->restored) continue;
    if (*f->slot == (uint64_t)hpd_calls_return_trampoline) *f->slot = f->original;
    f->restored = 1;
  }
}

/* In a catch block (the catching frame called __cxa_begin_catch): the frames the exception went
 * through are gone (their slots lie at or below the slot of this call's return address), the others
 * get their return hook back, so that they are timed when they return. */
static void rehook_live_frames(uint64_t* catch_slot) {
  struct thread_state* t = t_state;
  if (t == NULL) return;
  while (t->depth != 0) {
    const struct shadow_frame* top = &t->shadow[t->depth - 1];
    const uint64_t s = (uint64_t)top->slot, c = (uint64_t)catch_slot;
    if (s > c || c - s > SAME_STACK_SPAN) break;
    abandon_top(t);
  }
  for (uint32_t i = 0; i < t->depth; ++i) {
    struct shadow_frame* f = &t->shadow[i];
    if (!f->restored || (uint64_t)f->slot - (uint64_t)catch_slot > SAME_STACK_SPAN) continue;
    if (*f->slot != f->original) continue; /* not the frame it was: leave it */
    *f->slot = (uint64_t)hpd_calls_return_trampoline;
    f->restored = 0;
  }
}

typedef void* (*begin_catch_fn)(void*);
__attribute__((noinline)) void* __cxa_begin_catch(void* exception) {
  static begin_catch_fn real;
  if (real == NULL) real = (begin_catch_fn)dlsym(RTLD_NEXT, "__cxa_begin_catch");
  /* This function's own return-address slot: the catching frame's stack pointer minus 8. */
  rehook_live_frames((uint64_t*)__builtin_frame_address(0) + 1);
  return real(exception);
}

typedef int (*raise_fn)(void*);
int _Unwind_RaiseException(void* exception) {
  static raise_fn real;
  if (real == NULL) real = (raise_fn)dlsym(RTLD_NEXT, "_Unwind_RaiseException");
  restore_return_addresses();
  return real(exception);
}

/* A rethrow (`throw;`) unwinds again from the catch block. */
int _Unwind_Resume_or_Rethrow(void* exception) {
  static raise_fn real;
  if (real == NULL) real = (raise_fn)dlsym(RTLD_NEXT, "_Unwind_Resume_or_Rethrow");
  restore_return_addresses();
  return real(exception);
}

typedef int (*forced_fn)(void*, void*, void*);
int _Unwind_ForcedUnwind(void* exception, void* stop, void* arg) {
  static forced_fn real;
  if (real == NULL) real = (forced_fn)dlsym(RTLD_NEXT, "_Unwind_ForcedUnwind");
  restore_return_addresses();
  return real(exception, stop, arg);
}

typedef int (*backtrace_fn)(void*, void*);
int _Unwind_Backtrace(void* trace, void* arg) {
  static backtrace_fn real;
  if (real == NULL) real = (backtrace_fn)dlsym(RTLD_NEXT, "_Unwind_Backtrace");
  restore_return_addresses();
  return real(trace, arg);
}
