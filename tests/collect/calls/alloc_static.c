/* A static program (no libc mapped, nothing for `--alloc --pid` to probe): `alloc_static wait` sleeps
 * for at most 120 s, until killed. */
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2 || strcmp(argv[1], "wait") != 0) return 1;
  for (int i = 0; i < 1200; ++i) usleep(100000);
  return 0;
}
