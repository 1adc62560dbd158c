// Shared by the fixtures recorded with `--calls --pid` or `--alloc --pid`: a fixture watches the first
// bytes of its own probed functions (the kernel writes an int3 there while a uprobe is in) to know when
// hpd's probes are in and out again, and writes its truth files with put_file(). The includer defines
// PROBE_WATCH_N, the number of functions it watches, and fills watched[] and original[].
#pragma once

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static const unsigned char* watched[PROBE_WATCH_N];
static unsigned char original[PROBE_WATCH_N][8];

// Every watched function's first bytes differ from what they were: all probes are in.
static int probes_in(void) {
  for (int i = 0; i < PROBE_WATCH_N; ++i)
    if (memcmp(watched[i], original[i], sizeof original[i]) == 0) return 0;
  return 1;
}

// Every watched function's first bytes are back: all probes are out.
static int probes_out(void) {
  for (int i = 0; i < PROBE_WATCH_N; ++i)
    if (memcmp(watched[i], original[i], sizeof original[i]) != 0) return 0;
  return 1;
}

// Looks every 10 ms for up to 300 s (a condition, not a deadline: the test's timeout bounds it).
static int wait_for(int (*cond)(void)) {
  const struct timespec pause = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 30000; ++i) {
    if (cond()) return 1;
    nanosleep(&pause, NULL);
  }
  return 0;
}

// DIR/NAME holds exactly TEXT (LEN bytes), or the process exits with 6.
static void put_file(const char* dir, const char* name, const char* text, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text, len) != (ssize_t)len) _exit(6);
  close(fd);
}
