// Test helper: runs a command under a seccomp filter that kills the process on any of the system
// calls named in a file (one name per line, as `systemd-analyze syscall-filter` prints them; '#' and
// '@' lines ignored), as systemd's SystemCallFilter=~... would refuse them. Names are turned into
// numbers from the kernel's header (asm/unistd_64.h); names this architecture lacks are skipped.
// Usage: seccomp_deny NAMES_FILE -- COMMAND [ARGS...]
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_DENIED 512

// The number of system call `name` in the header's text (its "#define __NR_name N" lines), or -1.
static int lookup(const char* header_text, const char* name) {
  char want[320];
  snprintf(want, sizeof want, "#define __NR_%s ", name);
  const size_t n = strlen(want);
  for (const char* line = header_text; line != NULL && *line != '\0';) {
    if (strncmp(line, want, n) == 0) return atoi(line + n);
    line = strchr(line, '\n');
    if (line != NULL) ++line;
  }
  return -1;
}

// The whole file, NUL-terminated, or NULL.
static char* read_all(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return NULL;
  size_t size = 0, capacity = 1 << 16;
  char* text = malloc(capacity);
  for (size_t got; text != NULL && (got = fread(text + size, 1, capacity - size - 1, f)) > 0;) {
    size += got;
    if (capacity - size - 1 == 0) text = realloc(text, capacity *= 2);
  }
  fclose(f);
  if (text != NULL) text[size] = '\0';
  return text;
}

int main(int argc, char** argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) {
    fprintf(stderr, "usage: seccomp_deny NAMES_FILE -- COMMAND [ARGS...]\n");
    return 2;
  }
  const char* header = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h";
  char* header_text = read_all(header);
  if (header_text == NULL) {
    perror(header);
    return 2;
  }
  FILE* names = fopen(argv[1], "r");
  if (names == NULL) {
    perror(argv[1]);
    return 2;
  }
  int denied[MAX_DENIED];
  int n = 0;
  char line[256];
  while (fgets(line, sizeof line, names) != NULL && n < MAX_DENIED) {
    char* name = line;
    while (*name == ' ' || *name == '\t') ++name;
    name[strcspn(name, " \t\r\n")] = '\0';
    if (*name == '\0' || *name == '#' || *name == '@') continue;
    const int nr = lookup(header_text, name);
    if (nr >= 0) denied[n++] = nr;
  }
  fclose(names);
  free(header_text);
  if (n == 0) {
    fprintf(stderr, "seccomp_deny: no system call of %s is known here\n", argv[1]);
    return 2;
  }
  // Another architecture's calls: allowed (the unit's SystemCallArchitectures=native refuses them).
  struct sock_filter filter[4 + 2 * MAX_DENIED + 1];
  size_t k = 0;
  filter[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  filter[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
  filter[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  filter[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  for (int i = 0; i < n; ++i) {
    filter[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied[i], 0, 1);
    filter[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  }
  filter[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  struct sock_fprog prog = {(unsigned short)k, filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    perror("seccomp_deny: installing the filter");
    return 2;
  }
  fprintf(stderr, "seccomp_deny: %d system calls refused\n", n);
  execvp(argv[3], argv + 3);
  perror(argv[3]);
  return 127;
}
