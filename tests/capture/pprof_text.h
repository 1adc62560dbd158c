// Parses protoc --decode's text output into a tree, and runs protoc on pprof bytes, for the tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpd::testing {

struct TextNode {
  std::string name;
  std::string value;  // leaf fields; unquoted for strings
  std::vector<TextNode> children;

  std::vector<const TextNode*> all(const std::string& field) const;
  const TextNode* first(const std::string& field) const;
  int64_t num(const std::string& field, int64_t fallback = 0) const;  // a leaf child's value
};

// Runs `protoc --decode=perftools.profiles.Profile` on `message` (uncompressed) against the
// profile.proto beside these tests. Returns the root node; *error gets protoc's stderr on failure.
bool decode_pprof(const std::string& message, TextNode* root, std::string* error);

// The gunzipped content of a .gz file ("" when it is not gzip).
std::string gunzip_file(const std::string& path);

}  // namespace hpd::testing
