// protoc text-format parsing for the pprof tests.
#include "pprof_text.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace hpd::testing {

std::vector<const TextNode*> TextNode::all(const std::string& field) const {
  std::vector<const TextNode*> out;
  for (const TextNode& c : children)
    if (c.name == field) out.push_back(&c);
  return out;
}

const TextNode* TextNode::first(const std::string& field) const {
  for (const TextNode& c : children)
    if (c.name == field) return &c;
  return nullptr;
}

int64_t TextNode::num(const std::string& field, int64_t fallback) const {
  const TextNode* n = first(field);
  return n == nullptr ? fallback : std::stoll(n->value);
}

namespace {

std::string unquote(const std::string& v) {
  if (v.size() < 2 || v.front() != '"') return v;
  std::string out;
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] == '\\' && i + 2 < v.size()) ++i;  // enough for the names in these tests
    out.push_back(v[i]);
  }
  return out;
}

}  // namespace

bool decode_pprof(const std::string& message, TextNode* root, std::string* error) {
  char in_path[] = "/tmp/hpd-pprof-XXXXXX";
  const int fd = mkstemp(in_path);
  if (fd < 0) return false;
  (void)!write(fd, message.data(), message.size());
  close(fd);
  const std::string out_path = std::string(in_path) + ".txt", err_path = std::string(in_path) + ".err";
  const std::string cmd = "protoc --decode=perftools.profiles.Profile -I " HPD_CAPTURE_TEST_DIR
                          " " HPD_CAPTURE_TEST_DIR "/profile.proto < " +
                          std::string(in_path) + " > " + out_path + " 2> " + err_path;
  const int rc = std::system(cmd.c_str());
  std::ifstream out(out_path), err(err_path);
  std::stringstream text, err_text;
  text << out.rdbuf();
  err_text << err.rdbuf();
  unlink(in_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  if (rc != 0) {
    *error = "protoc failed (" + std::to_string(rc) + "): " + err_text.str();
    return false;
  }
  std::vector<TextNode*> stack{root};
  std::string line;
  while (std::getline(text, line)) {
    const size_t b = line.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    line = line.substr(b);
    if (line == "}") {
      stack.pop_back();
    } else if (line.back() == '{') {
      stack.back()->children.push_back(TextNode{line.substr(0, line.size() - 2), "", {}});
      stack.push_back(&stack.back()->children.back());
    } else {
      const size_t colon = line.find(": ");
      stack.back()->children.push_back(TextNode{line.substr(0, colon), unquote(line.substr(colon + 2)), {}});
    }
  }
  return true;
}

std::string gunzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  std::string out;
  char buf[65536];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

}  // namespace hpd::testing
