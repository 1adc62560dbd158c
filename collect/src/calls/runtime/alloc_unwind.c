/* The allocation runtime's unwinder (alloc_unwind.h). libgcc's _Unwind_Backtrace finds each frame's
 * FDE and interprets its CFI program afresh, for every frame of every sample: 58% of a sample's cost in
 * bench/alloc_bench.sh. Here the rule a return address needs (where the CFA is, where the return
 * address and rbp are) is worked out once, from the same CFI, and kept in a table of 64-bit words that
 * any thread reads and writes with plain atomic loads and stores (no lock, no allocation: this runs
 * inside malloc). A frame that the rule cannot express (a CFA expression, a signal frame, rbp or the
 * return address kept elsewhere, no FDE in a loaded module, a stack read outside the thread's stack)
 * makes the whole sample libgcc's.
 *
 * libgcc's frames, which these must equal: the first is the return address of the frame that called
 * _Unwind_Backtrace; each next one is the return address read from the frame below, whose FDE is found
 * at that address - 1 and whose CFI program runs while its location is below that address; the walk
 * stops after a frame whose return address is undefined, or at a return address of 0. */
#define _GNU_SOURCE
#include "alloc_unwind.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define HAVE_FAST_UNWIND 1
#else
#define HAVE_FAST_UNWIND 0
#endif

#if HAVE_FAST_UNWIND

/* x86-64's DWARF register numbers. */
#define REG_RBP 6u
#define REG_RSP 7u
#define REG_RA 16u

/* ---- the cache: one 64-bit word per slot, the tag of the address above its rule ----
 * The address (below 2^48) times an odd constant modulo 2^48 is a bijection: its top CACHE_BITS pick
 * the slot, the other 34 bits are kept as the tag, so a slot's word names its address exactly. */
#define CACHE_BITS 14u
#define CACHE_SLOTS (1u << CACHE_BITS)
#define TAG_BITS (48u - CACHE_BITS)
#define RULE_BITS 30u
#define MIX 0x9e3779b97f4bull /* odd */

/* A rule in its 30 bits: bit 0 set (a word of 0 is an empty slot); bits 1-2 the kind; bit 3 the CFA
 * from rbp (else rsp); bit 4 rbp saved; bits 5-10 rbp's slot from the CFA in 8-byte words + 32;
 * bits 11-29 the CFA's offset from its register (0 .. 2^19 - 1). */
#define KIND_FRAME 0u
#define KIND_END 1u      /* the return address is undefined: the outermost frame */
#define KIND_FALLBACK 2u /* not expressible: libgcc's */

static uint64_t* g_cache;
static uintptr_t g_self_low, g_self_high;
static uintptr_t g_first_stack_high; /* the top of the stack the constructor ran on (the main thread's) */
/* dlcloses under way, and done: a walk that overlaps one is not trusted. */
static unsigned long g_unloading, g_unloaded;

static __thread uintptr_t t_stack_top __attribute__((tls_model("initial-exec"))); /* 0: not known yet */

struct rule {
  unsigned kind, cfa_rbp, rbp_saved;
  int64_t cfa_off, rbp_off;
};

static uint32_t pack(const struct rule* r) {
  if (r->kind != KIND_FRAME) return 1u | (r->kind << 1); /* nothing more: the word's tag stays whole */
  const int ok = r->cfa_off >= 0 && r->cfa_off < (1 << 19) &&
                 (!r->rbp_saved || (r->rbp_off % 8 == 0 && r->rbp_off >= -256 && r->rbp_off < 256));
  if (!ok) return 1u | (KIND_FALLBACK << 1);
  return 1u | (r->kind << 1) | (r->cfa_rbp << 3) | (r->rbp_saved << 4) |
         ((uint32_t)(r->rbp_saved ? r->rbp_off / 8 + 32 : 0) << 5) | ((uint32_t)r->cfa_off << 11);
}

static void unpack(uint32_t w, struct rule* r) {
  r->kind = (w >> 1) & 3u;
  r->cfa_rbp = (w >> 3) & 1u;
  r->rbp_saved = (w >> 4) & 1u;
  r->rbp_off = (int64_t)((w >> 5) & 63u) * 8 - 256;
  r->cfa_off = (int64_t)(w >> 11);
}

/* ---- reading the CFI ---- */

struct cursor {
  const uint8_t* p;
  const uint8_t* end;
  int bad;
};

static uint64_t get_uleb(struct cursor* c) {
  uint64_t v = 0;
  unsigned shift = 0;
  for (;;) {
    if (c->p >= c->end || shift > 63) {
      c->bad = 1;
      return 0;
    }
    const uint8_t b = *c->p++;
    v |= (uint64_t)(b & 0x7fu) << shift;
    shift += 7;
    if (!(b & 0x80u)) return v;
  }
}

static int64_t get_sleb(struct cursor* c) {
  int64_t v = 0;
  unsigned shift = 0;
  uint8_t b;
  do {
    if (c->p >= c->end || shift > 63) {
      c->bad = 1;
      return 0;
    }
    b = *c->p++;
    v |= (int64_t)((uint64_t)(b & 0x7fu) << shift);
    shift += 7;
  } while (b & 0x80u);
  if (shift < 64 && (b & 0x40u)) v |= -(int64_t)((uint64_t)1 << shift);
  return v;
}

static uint64_t get_fixed(struct cursor* c, unsigned n) {
  if ((size_t)(c->end - c->p) < n) {
    c->bad = 1;
    return 0;
  }
  uint64_t v = 0;
  memcpy(&v, c->p, n); /* little-endian */
  c->p += n;
  return v;
}

/* A pointer in DW_EH_PE encoding `enc`: absolute or relative to where it is (pcrel); other bases and
 * indirection are not used by the compilers for the values read here, and fail. */
static uint64_t get_encoded(struct cursor* c, uint8_t enc) {
  const uint8_t* at = c->p;
  uint64_t v;
  switch (enc & 0x0fu) {
    case 0x00: v = get_fixed(c, 8); break;
    case 0x01: v = get_uleb(c); break;
    case 0x02: v = get_fixed(c, 2); break;
    case 0x03: v = get_fixed(c, 4); break;
    case 0x04: v = get_fixed(c, 8); break;
    case 0x09: v = (uint64_t)get_sleb(c); break;
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)get_fixed(c, 2); break;
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)get_fixed(c, 4); break;
    case 0x0c: v = get_fixed(c, 8); break;
    default: c->bad = 1; return 0;
  }
  switch (enc & 0x70u) {
    case 0x00: return v;
    case 0x10: return v + (uint64_t)(uintptr_t)at;
    default: c->bad = 1; return 0;
  }
}

/* Skips a pointer of encoding `enc` whose value is not needed (the personality routine's). */
static void skip_encoded(struct cursor* c, uint8_t enc) {
  switch (enc & 0x0fu) {
    case 0x00:
    case 0x04:
    case 0x0c: c->p += 8; break;
    case 0x02:
    case 0x0a: c->p += 2; break;
    case 0x03:
    case 0x0b: c->p += 4; break;
    case 0x01: (void)get_uleb(c); break;
    case 0x09: (void)get_sleb(c); break;
    default: c->bad = 1;
  }
  if (c->p > c->end) c->bad = 1;
}

/* How a register is recovered: kept in the callee (unchanged), at CFA + off, undefined, or otherwise. */
enum how { SAME = 0, AT_OFFSET, UNDEFINED, OTHER };

struct reg_rule {
  uint8_t how;
  int64_t off;
};

struct cfa_state {
  uint64_t cfa_reg;
  int64_t cfa_off;
  int cfa_expr;
  struct reg_rule rbp, ra;
};

struct cie {
  const uint8_t* insns;
  const uint8_t* end;
  uint64_t code_align;
  int64_t data_align;
  uint8_t fde_enc;
  int has_z;
};

/* The CIE at `p`: 0 when it is one this unwinder reads (no signal frame, the return address in r16). */
static int read_cie(const uint8_t* p, struct cie* out) {
  struct cursor c = {p, p + 12, 0};
  uint64_t len = get_fixed(&c, 4);
  if (len == 0xffffffffull) len = get_fixed(&c, 8);
  if (c.bad || len == 0 || len > (1u << 20)) return -1;
  c.end = c.p + len;
  if (get_fixed(&c, 4) != 0) return -1; /* a CIE's id in .eh_frame */
  const uint8_t version = (uint8_t)get_fixed(&c, 1);
  if (version != 1 && version != 3) return -1;
  const char* aug = (const char*)c.p;
  const size_t aug_len = strnlen(aug, (size_t)(c.end - c.p));
  c.p += aug_len + 1;
  out->code_align = get_uleb(&c);
  out->data_align = get_sleb(&c);
  const uint64_t ra = version == 1 ? get_fixed(&c, 1) : get_uleb(&c);
  if (c.bad || ra != REG_RA) return -1;
  out->fde_enc = 0;
  out->has_z = 0;
  if (aug[0] == 'z') {
    out->has_z = 1;
    const uint64_t n = get_uleb(&c);
    const uint8_t* data_end = c.p + n;
    if (c.bad || data_end > c.end) return -1;
    for (size_t i = 1; i < aug_len; ++i) {
      switch (aug[i]) {
        case 'R': out->fde_enc = (uint8_t)get_fixed(&c, 1); break;
        case 'L': (void)get_fixed(&c, 1); break;
        case 'P': skip_encoded(&c, (uint8_t)get_fixed(&c, 1)); break;
        default: return -1; /* 'S' (a signal frame) and what is not known: libgcc's */
      }
    }
    if (c.bad) return -1;
    c.p = data_end;
  } else if (aug_len != 0) {
    return -1;
  }
  out->insns = c.p;
  out->end = c.end;
  return 0;
}

static void set_reg(struct cfa_state* s, uint64_t reg, uint8_t how, int64_t off) {
  struct reg_rule r = {how, off};
  if (reg == REG_RBP)
    s->rbp = r;
  else if (reg == REG_RA)
    s->ra = r;
}

/* DW_CFA_restore: the register's rule as the CIE left it (none inside the CIE itself). */
static int restore_reg(struct cfa_state* s, uint64_t reg, const struct cfa_state* initial) {
  if (initial == NULL) return -1;
  if (reg == REG_RBP)
    s->rbp = initial->rbp;
  else if (reg == REG_RA)
    s->ra = initial->ra;
  return 0;
}

#define STATE_STACK 8

/* Runs the CFA program [p, end) from location `loc` while the location is below `until` (every
 * instruction when `until` is 0: a CIE's initial program). Returns -1 on what it does not read. */
static int run_cfa(const struct cie* cie, const uint8_t* p, const uint8_t* end, uint64_t loc, uint64_t until,
                   struct cfa_state* s, const struct cfa_state* initial) {
  struct cursor c = {p, end, 0};
  struct cfa_state stack[STATE_STACK];
  unsigned depth = 0;
  while (c.p < c.end && (until == 0 || loc < until)) {
    const uint8_t op = *c.p++;
    const uint8_t low = op & 0x3fu;
    uint64_t reg;
    switch (op >> 6) {
      case 1: loc += low * cie->code_align; continue; /* DW_CFA_advance_loc */
      case 2: set_reg(s, low, AT_OFFSET, (int64_t)get_uleb(&c) * cie->data_align); continue; /* offset */
      case 3: /* DW_CFA_restore */
        if (restore_reg(s, low, initial) != 0) return -1;
        continue;
      default: break;
    }
    switch (op) {
      case 0x00: break;                                            /* nop */
      case 0x01: loc = get_encoded(&c, cie->fde_enc); break;       /* set_loc */
      case 0x02: loc += get_fixed(&c, 1) * cie->code_align; break; /* advance_loc1 */
      case 0x03: loc += get_fixed(&c, 2) * cie->code_align; break; /* advance_loc2 */
      case 0x04: loc += get_fixed(&c, 4) * cie->code_align; break; /* advance_loc4 */
      case 0x05:                                                   /* offset_extended */
        reg = get_uleb(&c);
        set_reg(s, reg, AT_OFFSET, (int64_t)get_uleb(&c) * cie->data_align);
        break;
      case 0x06: /* restore_extended */
        if (restore_reg(s, get_uleb(&c), initial) != 0) return -1;
        break;
      case 0x07: set_reg(s, get_uleb(&c), UNDEFINED, 0); break; /* undefined */
      case 0x08: set_reg(s, get_uleb(&c), SAME, 0); break;      /* same_value */
      case 0x09:                                                /* register */
      case 0x14:                                                /* val_offset */
        reg = get_uleb(&c);
        (void)get_uleb(&c);
        set_reg(s, reg, OTHER, 0);
        break;
      case 0x0a: /* remember_state */
        if (depth == STATE_STACK) return -1;
        stack[depth++] = *s;
        break;
      case 0x0b: /* restore_state: the CFA too, as libgcc does */
        if (depth == 0) return -1;
        *s = stack[--depth];
        break;
      case 0x0c: /* def_cfa */
        s->cfa_reg = get_uleb(&c);
        s->cfa_off = (int64_t)get_uleb(&c);
        s->cfa_expr = 0;
        break;
      case 0x0d: /* def_cfa_register */
        s->cfa_reg = get_uleb(&c);
        s->cfa_expr = 0;
        break;
      case 0x0e: s->cfa_off = (int64_t)get_uleb(&c); break; /* def_cfa_offset */
      case 0x0f: {                                          /* def_cfa_expression */
        const uint64_t n = get_uleb(&c);
        c.p += n;
        s->cfa_expr = 1;
        break;
      }
      case 0x10:   /* expression */
      case 0x16: { /* val_expression */
        reg = get_uleb(&c);
        const uint64_t n = get_uleb(&c);
        c.p += n;
        set_reg(s, reg, OTHER, 0);
        break;
      }
      case 0x11: /* offset_extended_sf */
        reg = get_uleb(&c);
        set_reg(s, reg, AT_OFFSET, get_sleb(&c) * cie->data_align);
        break;
      case 0x12: /* def_cfa_sf */
        s->cfa_reg = get_uleb(&c);
        s->cfa_off = get_sleb(&c) * cie->data_align;
        s->cfa_expr = 0;
        break;
      case 0x13: s->cfa_off = get_sleb(&c) * cie->data_align; break; /* def_cfa_offset_sf */
      case 0x15:                                                     /* val_offset_sf */
        reg = get_uleb(&c);
        (void)get_sleb(&c);
        set_reg(s, reg, OTHER, 0);
        break;
      case 0x2e: (void)get_uleb(&c); break; /* GNU_args_size */
      case 0x2f:                            /* GNU_negative_offset_extended */
        reg = get_uleb(&c);
        set_reg(s, reg, AT_OFFSET, -(int64_t)get_uleb(&c) * cie->data_align);
        break;
      default: return -1;
    }
    if (c.bad || c.p > c.end) return -1;
  }
  return 0;
}

/* The rule for the frame whose return address (or, for the first, current pc) is `ra`. */
static uint32_t compute_rule(uint64_t ra) {
  const uint32_t fallback = 1u | (KIND_FALLBACK << 1);
  const uint64_t a = ra - 1;
  struct dl_find_object found;
  if (_dl_find_object((void*)(uintptr_t)a, &found) != 0 || found.dlfo_eh_frame == NULL) return fallback;
  /* .eh_frame_hdr: version 1, then the encodings of the .eh_frame pointer, of the count and of the
   * table, which must be the sorted pairs (start, FDE) of 4-byte offsets from the header. */
  const uint8_t* hdr = (const uint8_t*)found.dlfo_eh_frame;
  if (hdr[0] != 1 || hdr[3] != 0x3b) return fallback;
  struct cursor c = {hdr + 4, hdr + 4 + 16, 0};
  skip_encoded(&c, hdr[1]);
  uint64_t count;
  if (hdr[2] == 0x03)
    count = get_fixed(&c, 4);
  else if (hdr[2] == 0x0b)
    count = (uint64_t)(int64_t)(int32_t)get_fixed(&c, 4);
  else
    return fallback;
  if (c.bad || count == 0 || count > (1u << 26)) return fallback;
  const int32_t* table = (const int32_t*)(const void*)c.p;
  uint64_t lo = 0, hi = count; /* the last entry whose start is <= a */
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if ((uint64_t)(uintptr_t)hdr + (uint64_t)(int64_t)table[2 * mid] <= a)
      lo = mid;
    else
      hi = mid;
  }
  if ((uint64_t)(uintptr_t)hdr + (uint64_t)(int64_t)table[2 * lo] > a) return fallback;
  const uint8_t* fde = hdr + table[2 * lo + 1];

  struct cursor f = {fde, fde + 12, 0};
  uint64_t len = get_fixed(&f, 4);
  if (len == 0xffffffffull) len = get_fixed(&f, 8);
  if (f.bad || len == 0 || len > (1u << 20)) return fallback;
  f.end = f.p + len;
  const uint8_t* id_at = f.p;
  const uint32_t cie_off = (uint32_t)get_fixed(&f, 4);
  if (f.bad || cie_off == 0) return fallback;
  struct cie cie;
  if (read_cie(id_at - cie_off, &cie) != 0) return fallback;
  const uint64_t begin = get_encoded(&f, cie.fde_enc);
  const uint64_t range = get_encoded(&f, cie.fde_enc & 0x0fu);
  if (f.bad || a < begin || a - begin >= range) return fallback;
  if (cie.has_z) {
    const uint64_t n = get_uleb(&f);
    f.p += n;
    if (f.bad || f.p > f.end) return fallback;
  }

  struct cfa_state s = {REG_RSP, 8, 0, {SAME, 0}, {SAME, 0}};
  if (run_cfa(&cie, cie.insns, cie.end, begin, 0, &s, NULL) != 0) return fallback;
  const struct cfa_state initial = s;
  if (run_cfa(&cie, f.p, f.end, begin, ra, &s, &initial) != 0) return fallback;

  struct rule r = {KIND_FRAME, 0, 0, s.cfa_off, 0};
  if (s.cfa_expr || (s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP)) return fallback;
  r.cfa_rbp = s.cfa_reg == REG_RBP;
  if (s.rbp.how == AT_OFFSET) {
    r.rbp_saved = 1;
    r.rbp_off = s.rbp.off;
  } else if (s.rbp.how != SAME) {
    return fallback;
  }
  if (s.ra.how == UNDEFINED)
    r.kind = KIND_END;
  else if (s.ra.how != AT_OFFSET || s.ra.off != -8)
    return fallback;
  return pack(&r);
}

static uint32_t rule_of(uint64_t ra) {
  if (ra >= (1ull << 48)) return compute_rule(ra);
  const uint64_t h = (ra * MIX) & ((1ull << 48) - 1u);
  uint64_t* slot = &g_cache[h >> TAG_BITS];
  const uint64_t tag = h & ((1ull << TAG_BITS) - 1u);
  const uint64_t w = __atomic_load_n(slot, __ATOMIC_RELAXED);
  if (w != 0 && (w >> RULE_BITS) == tag) return (uint32_t)(w & ((1u << RULE_BITS) - 1u));
  const uint32_t rule = compute_rule(ra);
  __atomic_store_n(slot, (tag << RULE_BITS) | rule, __ATOMIC_RELAXED);
  return rule;
}

/* The top of the thread's stack (exclusive), 0 when not known: a thread of glibc's has its descriptor
 * just above its stack (one it was given too); the stack the constructor ran on is the main thread's. */
static uintptr_t stack_top(uintptr_t sp) {
  if (t_stack_top != 0) return t_stack_top;
  const uintptr_t self = (uintptr_t)pthread_self();
  uintptr_t top = 0;
  if (self > sp && self - sp <= (1ul << 30))
    top = self;
  else if (g_first_stack_high > sp && g_first_stack_high - sp <= (1ul << 30))
    top = g_first_stack_high;
  t_stack_top = top;
  return top;
}

int alloc_unwind_init(void* cache, uintptr_t self_low, uintptr_t self_high) {
  g_self_low = self_low;
  g_self_high = self_high;
  pthread_attr_t attr;
  void* low;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  const int got = pthread_attr_getstack(&attr, &low, &size);
  pthread_attr_destroy(&attr);
  if (got != 0) return 0;
  g_first_stack_high = (uintptr_t)low + size;
  __atomic_store_n(&g_cache, (uint64_t*)cache, __ATOMIC_RELEASE);
  return 1;
}

void alloc_unwind_forget_all(void) {
  uint64_t* cache = __atomic_load_n(&g_cache, __ATOMIC_ACQUIRE);
  if (cache == NULL) return;
  for (uint32_t i = 0; i < CACHE_SLOTS; ++i) __atomic_store_n(&cache[i], 0, __ATOMIC_RELAXED);
}

int alloc_unwind(uint64_t pc, uint64_t sp, uint64_t fp, uint64_t* frames, uint32_t max) {
  if (__atomic_load_n(&g_cache, __ATOMIC_ACQUIRE) == NULL) return -1;
  const unsigned long unloaded = __atomic_load_n(&g_unloaded, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&g_unloading, __ATOMIC_ACQUIRE) != 0) return -1;
  const uintptr_t top = stack_top(sp);
  if (top == 0 || sp >= top) return -1;
  uint32_t n = 0;
  for (;;) {
    if (pc == 0) break;
    if (pc >= g_self_low && pc < g_self_high) {
      /* The runtime's frames are at the top. Below the first reported frame, an address of the runtime
       * is the return trampoline of `--calls` in a slot it replaced: libgcc's walk, which the runtime
       * interposes, puts the original addresses back first. */
      if (n != 0) return -1;
    } else {
      if (n == max) break;
      frames[n++] = pc;
    }
    struct rule r;
    unpack(rule_of(pc), &r);
    if (r.kind == KIND_FALLBACK) return -1;
    if (r.kind == KIND_END) break;
    /* The CFA is above the frame's stack pointer (the return address at CFA-8 at or above it) and
     * within the stack: each frame's reads are in [sp, top), and sp grows strictly. */
    const uint64_t cfa = (r.cfa_rbp ? fp : sp) + (uint64_t)r.cfa_off;
    if (cfa < sp + 8 || cfa > top) return -1;
    uint64_t next_fp = fp;
    if (r.rbp_saved) {
      const uint64_t at = cfa + (uint64_t)r.rbp_off;
      if (at < sp || at + 8 > top) return -1;
      memcpy(&next_fp, (const void*)(uintptr_t)at, 8);
    }
    memcpy(&pc, (const void*)(uintptr_t)(cfa - 8), 8);
    sp = cfa;
    fp = next_fp;
  }
  if (__atomic_load_n(&g_unloading, __ATOMIC_ACQUIRE) != 0 ||
      __atomic_load_n(&g_unloaded, __ATOMIC_ACQUIRE) != unloaded)
    return -1;
  return (int)n;
}

/* dlclose: the rules of a module it unmaps must not outlive it (another may be mapped where it was).
 * A walk that overlaps a dlclose is not trusted; the cache is emptied before the dlclose counts as
 * done. dlclose does not depend on its caller, so it can be interposed (dlopen could not). */
typedef int (*dlclose_fn)(void*);

int dlclose(void* handle) {
  static dlclose_fn real_dlclose;
  dlclose_fn real = __atomic_load_n(&real_dlclose, __ATOMIC_ACQUIRE);
  if (real == NULL) {
    real = (dlclose_fn)dlsym(RTLD_NEXT, "dlclose");
    if (real == NULL) return -1;
    __atomic_store_n(&real_dlclose, real, __ATOMIC_RELEASE);
  }
  __atomic_fetch_add(&g_unloading, 1, __ATOMIC_SEQ_CST);
  const int r = real(handle);
  alloc_unwind_forget_all();
  __atomic_fetch_add(&g_unloaded, 1, __ATOMIC_SEQ_CST);
  __atomic_fetch_sub(&g_unloading, 1, __ATOMIC_SEQ_CST);
  return r;
}

#else /* no fast unwind: every sample is libgcc's */

int alloc_unwind_init(void* cache, uintptr_t self_low, uintptr_t self_high) {
  (void)cache;
  (void)self_low;
  (void)self_high;
  return 0;
}

void alloc_unwind_forget_all(void) {}

int alloc_unwind(uint64_t pc, uint64_t sp, uint64_t fp, uint64_t* frames, uint32_t max) {
  (void)pc;
  (void)sp;
  (void)fp;
  (void)frames;
  (void)max;
  return -1;
}

#endif
