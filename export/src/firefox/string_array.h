// shared.stringArray: every string the other tables name by StringIndex.
#pragma once

#include <string_view>
#include <vector>

#include "firefox/table_index.h"
#include "json_writer.h"

namespace hpd::firefox {

class StringArray {
 public:
  // Appends a string; the array views it, so it must outlive the array. Equal strings are not
  // merged: the Profile's strings come first, already unique, and keep their indices.
  StringIndex add(std::string_view s) {
    strings_.push_back(s);
    return StringIndex{static_cast<uint32_t>(strings_.size() - 1)};
  }
  size_t size() const { return strings_.size(); }

  void serialize(json::Writer& w) const;

 private:
  std::vector<std::string_view> strings_;
};

}  // namespace hpd::firefox
