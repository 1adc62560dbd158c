// Writes seed captures for the fuzzer (and a synthetic capture for the CLI tests) into a directory.
#include <cstdio>
#include <string>

#include "hpd/capture/capture.h"
#include "raw_profile_testing.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    hpd::write_capture_file(hpd::testing::make_raw_profile(40), dir + "/small.hpr");
    hpd::write_capture_file(hpd::testing::make_raw_profile(3000), dir + "/medium.hpr");
    hpd::write_capture_file(hpd::RawProfile{}, dir + "/empty.hpr");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
