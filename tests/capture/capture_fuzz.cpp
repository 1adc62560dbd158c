// libFuzzer target: read_capture() on arbitrary bytes must never crash, leak or hit UB; bad input
// is a CaptureError or a recovered prefix.
#include <cstddef>
#include <cstdint>

#include "hpd/capture/capture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hpd::CaptureContents contents = hpd::read_capture({data, size}, "fuzz");
    // Touch what a consumer would: every sample's stack must be in the table.
    for (const hpd::RawSample& s : contents.profile.samples) {
      if (s.stack != hpd::kNoIndex) (void)contents.profile.stacks.user_frames(s.stack);
    }
  } catch (const hpd::CaptureError&) {
  }
  return 0;
}
