// Serializes shared.stringArray (string_array.h).
#include "firefox/string_array.h"

namespace hpd::firefox {

void StringArray::serialize(json::Writer& w) const {
  w.begin_array();
  for (std::string_view s : strings_) w.string(s);
  w.end_array();
}

}  // namespace hpd::firefox
