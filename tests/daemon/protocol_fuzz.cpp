// libFuzzer target over hpd's request parser: any bytes give a Request or a ProtocolError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hpd/service/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hpd::service::Request request =
        hpd::service::parse_request(std::string_view(reinterpret_cast<const char*>(data), size));
    (void)request;
  } catch (const hpd::service::ProtocolError&) {
  }
  return 0;
}
