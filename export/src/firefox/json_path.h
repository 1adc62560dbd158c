// A place in a Firefox profile as the reader's error messages spell it, built from schema.h's names
// so that a renamed column changes the writer, the reader and its messages together:
// "threads[0].samples.stack[3]", "shared.frameTable.func[0]", "meta.interval".
#pragma once

#include <cstddef>
#include <string>

#include "hpd/export/firefox/schema.h"

namespace hpd::firefox {

class JsonPath {
 public:
  JsonPath() = default;  // the document itself

  JsonPath key(const char* name) const {
    JsonPath p = *this;
    if (!p.text_.empty()) p.text_ += '.';
    p.text_ += name;
    ++p.keys_;
    p.indexed_ = false;
    return p;
  }
  JsonPath at(size_t index) const {
    JsonPath p = *this;
    p.text_ += '[' + std::to_string(index) + ']';
    p.indexed_ = true;
    return p;
  }

  // A top-level member alone reads "profile.libs", so that the message says what it belongs to;
  // deeper places start at the top-level member ("libs[2].name").
  std::string str() const { return keys_ == 1 && !indexed_ ? std::string("profile.") + text_ : text_; }

 private:
  std::string text_;
  int keys_ = 0;
  bool indexed_ = false;
};

// Element `index` of the column `key` of a table, spelled only when a message needs it (the reader
// names one per sample it reads).
class JsonColumnElement {
 public:
  JsonColumnElement(const JsonPath& table, const char* key, size_t index)
      : table_(table), key_(key), index_(index) {}
  std::string str() const { return table_.key(key_).at(index_).str(); }

 private:
  const JsonPath& table_;
  const char* key_;
  size_t index_;
};

// The places the reader names most.
namespace path {
inline JsonPath meta(const char* key) {
  return JsonPath().key(profile::kMeta).key(key);
}
inline JsonPath shared(const char* table) {
  return JsonPath().key(profile::kShared).key(table);
}
inline JsonPath lib(size_t i) {
  return JsonPath().key(profile::kLibs).at(i);
}
inline JsonPath thread(size_t i) {
  return JsonPath().key(profile::kThreads).at(i);
}
}  // namespace path

}  // namespace hpd::firefox
