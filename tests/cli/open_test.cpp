// Privileged integration test of `hpctl open`: a recorded profile is served on loopback and its
// symbol-server API is queried the way the Firefox Profiler queries it (src/utils/fetch-source.ts,
// fetch-assembly.ts): the source of a sampled function's file and the assembly of a function come
// back, requests without the URL's token are refused, and nothing listens beyond 127.0.0.1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "firefox_lint.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace hpd::test {
namespace {

const std::string kHpctl = HPD_HPCTL_PATH;
const std::string kFixtures = HPD_FIXTURE_DIR;
const std::string kFixtureSource = HPD_FIXTURE_SOURCE;  // cpu_split.c, as the compiler saw it

struct HttpAnswer {
  int status = 0;
  std::string headers;  // the raw header block
  std::string body;
};

// One HTTP/1.1 request to 127.0.0.1:port; the server closes the connection after answering.
HttpAnswer http(uint16_t port, const std::string& method, const std::string& target,
                const std::string& body = "") {
  HttpAnswer answer;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return answer;
  }
  // What a browser's fetch() sends for the profiler's POST: a text/plain body, an Origin header.
  std::string request = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                        "\r\nOrigin: https://profiler.firefox.com\r\n";
  if (method == "POST") {
    request +=
        "Content-Type: text/plain;charset=UTF-8\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string all;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) all.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t head_end = all.find("\r\n\r\n");
  if (all.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos) return answer;
  answer.status = std::stoi(all.substr(9, 3));
  answer.headers = all.substr(0, head_end);
  answer.body = all.substr(head_end + 4);
  return answer;
}

std::string url_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The local addresses (hex "ADDR:PORT" as /proc/net/tcp{,6} print them) of sockets listening on `port`.
std::vector<std::string> listeners_on_port(uint16_t port) {
  std::vector<std::string> found;
  char port_hex[8];
  std::snprintf(port_hex, sizeof port_hex, "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state == "0A" && local.size() > 5 && local.substr(local.size() - 4) == port_hex)
        found.push_back(local);
    }
  }
  return found;
}

class OpenTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Records the cpu_split fixture with default flags into `out`.
  void record_fixture(const std::string& out) {
    RunResult r = run({kHpctl, "--local", "record", "-o", out, "--no-report", "-q", "--",
                       kFixtures + "/cpu_split", "--rounds", "2000"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // Waits for `hpctl open` to print its URL into `log`; returns it ("" after 60 s).
  static std::string wait_for_url(const std::string& log) {
    for (int i = 0; i < 600; ++i) {
      const std::string text = read_text(log);
      const size_t at = text.find("Firefox Profiler: ");
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        return text.substr(at + 18, text.find('\n', at) - at - 18);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return {};
  }

  // Kept when the test fails: its recordings and logs are what to look at.
  hpd::testing::TempDir tmp_{"hpd-open", hpd::testing::TempDir::Cleanup::kKeepOnFailure};
  const fs::path dir_{tmp_.path()};
};

TEST_F(OpenTest, ServesTheProfileWithSourceAndAssemblyAsTheProfilerAsks) {
  const std::string profile_path = path("cpu.json.gz");
  record_fixture(profile_path);
  const std::string log = path("open.log");
  BackgroundOptions options;
  options.stdout_path = log;
  Background server({kHpctl, "open", "--no-browser", profile_path}, options);
  const std::string url = wait_for_url(log);
  ASSERT_FALSE(url.empty()) << read_text(log);

  // https://profiler.firefox.com/from-url/<profile URL>/?symbolServer=<server URL>
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      url, m, std::regex(R"(https://profiler\.firefox\.com/from-url/([^/]+)/\?symbolServer=(.+))")))
      << url;
  const std::string profile_url = url_decode(m[1].str());
  const std::string symbol_server = url_decode(m[2].str());
  std::smatch s;
  ASSERT_TRUE(std::regex_match(symbol_server, s, std::regex(R"(http://127\.0\.0\.1:(\d+)(/[0-9a-f]{32}))")))
      << symbol_server;
  const auto port = static_cast<uint16_t>(std::stoi(s[1].str()));
  const std::string prefix = s[2].str();
  EXPECT_EQ(profile_url, symbol_server + "/profile.json");

  // Nothing listens on this port except on the loopback address (127.0.0.1 = 0100007F).
  const std::vector<std::string> listeners = listeners_on_port(port);
  ASSERT_EQ(listeners.size(), 1u);
  EXPECT_EQ(
      listeners[0], "0100007F:" + [&] {
        char p[8];
        std::snprintf(p, sizeof p, "%04X", port);
        return std::string(p);
      }());

  // The profile, byte for byte, gzip undone by the browser (Content-Encoding), readable cross-origin.
  const HttpAnswer served = http(port, "GET", prefix + "/profile.json");
  ASSERT_EQ(served.status, 200);
  EXPECT_EQ(served.body, read_text(profile_path));
  EXPECT_NE(served.headers.find("Content-Encoding: gzip"), std::string::npos) << served.headers;
  EXPECT_NE(served.headers.find("Access-Control-Allow-Origin: *"), std::string::npos) << served.headers;

  // Without the token, or with another one: refused, and no CORS header that would let a page read it.
  for (const std::string& target : {std::string("/profile.json"), std::string("/source/v1"),
                                    std::string("/0123456789abcdef0123456789abcdef/profile.json"), prefix,
                                    std::string("/") + prefix.substr(2) + "/profile.json"}) {
    const HttpAnswer refused = http(port, target == "/source/v1" ? "POST" : "GET", target, "{}");
    EXPECT_EQ(refused.status, 404) << target;
    EXPECT_EQ(refused.headers.find("Access-Control"), std::string::npos) << target;
    EXPECT_EQ(refused.body.find("leaf_c"), std::string::npos) << target;
  }

  const json profile = testing::load_json_maybe_gzip(profile_path);
  const auto& shared = profile.at("shared");
  const auto& strings = shared.at("stringArray");
  const auto& funcs = shared.at("funcTable");
  const auto& frames = shared.at("frameTable");
  const auto& resources = shared.at("resourceTable");
  const auto& libs = profile.at("libs");
  size_t leaf_c = SIZE_MAX;
  for (size_t f = 0; f < funcs.at("length").get<size_t>(); ++f) {
    if (strings[funcs["name"][f].get<size_t>()] == "leaf_c") leaf_c = f;
  }
  ASSERT_NE(leaf_c, SIZE_MAX);
  ASSERT_TRUE(funcs["source"][leaf_c].is_number());
  const size_t source_index = funcs["source"][leaf_c].get<size_t>();
  const std::string file = strings[shared.at("sources").at("filename")[source_index].get<size_t>()];
  EXPECT_EQ(fs::path(file).filename(), "cpu_split.c");

  // findAddressProofForFile: the first function with this source, its first frame, its library
  // (v70's frameTable.lib is resourceTable.lib of the function's resource in v66).
  size_t proof_func = 0;
  while (!(funcs["source"][proof_func].is_number() &&
           funcs["source"][proof_func].get<size_t>() == source_index)) {
    ++proof_func;
  }
  size_t proof_frame = 0;
  while (frames["func"][proof_frame].get<size_t>() != proof_func) ++proof_frame;
  const auto lib_index = resources["lib"][funcs["resource"][proof_func].get<size_t>()].get<size_t>();
  const json& lib = libs[lib_index];
  const int64_t address = frames["address"][proof_frame].get<int64_t>();
  ASSERT_GE(address, 0);
  char offset[32];
  std::snprintf(offset, sizeof offset, "0x%llx", static_cast<unsigned long long>(address));
  const json source_request{{"debugName", lib["debugName"]},
                            {"debugId", lib["breakpadId"]},
                            {"moduleOffset", offset},
                            {"file", file}};
  const HttpAnswer source = http(port, "POST", prefix + "/source/v1", source_request.dump());
  ASSERT_EQ(source.status, 200);
  const json source_json = json::parse(source.body);
  ASSERT_TRUE(source_json.contains("source")) << source.body;
  EXPECT_EQ(source_json["source"].get<std::string>(), read_text(kFixtureSource));
  EXPECT_EQ(source_json["file"], file);

  // A file the profile does not name is never read, whatever the request says.
  json passwd = source_request;
  passwd["file"] = "/etc/passwd";
  const json refused_file = json::parse(http(port, "POST", prefix + "/source/v1", passwd.dump()).body);
  EXPECT_TRUE(refused_file.contains("error"));
  EXPECT_FALSE(refused_file.contains("source"));

  // fetchAssembly: the native symbol of a leaf_c frame, its size, the library's names and ids.
  size_t leaf_frame = 0;
  while (frames["func"][leaf_frame].get<size_t>() != leaf_c || frames["nativeSymbol"][leaf_frame].is_null()) {
    ++leaf_frame;
  }
  const auto& symbols = shared.at("nativeSymbols");
  const size_t symbol = frames["nativeSymbol"][leaf_frame].get<size_t>();
  const json& symbol_lib = libs[symbols["libIndex"][symbol].get<size_t>()];
  const uint64_t start = symbols["address"][symbol].get<uint64_t>();
  ASSERT_TRUE(symbols["functionSize"][symbol].is_number());
  const uint64_t size = symbols["functionSize"][symbol].get<uint64_t>();
  char start_hex[32], size_hex[32];
  std::snprintf(start_hex, sizeof start_hex, "0x%llx", static_cast<unsigned long long>(start));
  std::snprintf(size_hex, sizeof size_hex, "0x%llx", static_cast<unsigned long long>(size));
  const json asm_request{{"debugName", symbol_lib["debugName"]},
                         {"debugId", symbol_lib["breakpadId"]},
                         {"name", symbol_lib["name"]},
                         {"codeId", symbol_lib["codeId"]},
                         {"startAddress", start_hex},
                         {"size", size_hex},
                         {"continueUntilFunctionEnd", false}};
  const HttpAnswer assembly = http(port, "POST", prefix + "/asm/v1", asm_request.dump());
  ASSERT_EQ(assembly.status, 200);
  const json asm_json = json::parse(assembly.body);
  ASSERT_TRUE(asm_json.contains("instructions")) << assembly.body;
  EXPECT_EQ(asm_json["startAddress"], start_hex);
  EXPECT_EQ(asm_json["arch"], "x86_64");
  // The same instructions objdump decodes for leaf_c in the fixture (a PIE: vaddr = lib-relative).
  RunResult objdump = run({"objdump", "-d", "--no-show-raw-insn", "--start-address=" + std::string(start_hex),
                           "--stop-address=0x" +
                               [&] {
                                 std::ostringstream o;
                                 o << std::hex << start + size;
                                 return o.str();
                               }(),
                           kFixtures + "/cpu_split"});
  ASSERT_EQ(objdump.exit_code, 0) << objdump.err;
  std::vector<uint64_t> objdump_offsets;
  std::istringstream lines(objdump.out);
  std::string line;
  const std::regex insn_line(R"(^\s+([0-9a-f]+):\s+\S.*)");
  while (std::getline(lines, line)) {
    std::smatch im;
    if (std::regex_match(line, im, insn_line))
      objdump_offsets.push_back(std::stoull(im[1].str(), nullptr, 16) - start);
  }
  ASSERT_GT(objdump_offsets.size(), 5u) << objdump.out;
  std::vector<uint64_t> offsets;
  bool has_ret = false;
  for (const auto& insn : asm_json["instructions"]) {
    offsets.push_back(insn[0].get<uint64_t>());
    if (insn[1].get<std::string>().rfind("ret", 0) == 0) has_ret = true;
  }
  EXPECT_EQ(offsets, objdump_offsets);
  EXPECT_TRUE(has_ret);

  // Ctrl-C stops the server.
  kill(server.pid(), SIGINT);
  EXPECT_EQ(server.wait(), 0);
  EXPECT_TRUE(listeners_on_port(port).empty());
}

TEST_F(OpenTest, PrintsTheUrlWhenNoBrowserCanBeStarted) {
  const std::string profile_path = path("cpu.json");
  record_fixture(profile_path);
  const std::string log = path("open.log");
  const std::string err_log = path("open.err");
  BackgroundOptions options;
  options.stdout_path = log;
  // No xdg-open in PATH and no $BROWSER: the URL is what the user gets.
  Background server(
      {"/bin/sh", "-c",
       "exec env -u BROWSER PATH=/nonexistent " + kHpctl + " open " + profile_path + " 2>" + err_log},
      options);
  const std::string url = wait_for_url(log);
  EXPECT_EQ(url.rfind("https://profiler.firefox.com/from-url/http%3A%2F%2F127.0.0.1%3A", 0), 0u) << url;
  for (int i = 0; i < 100 && read_text(err_log).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(read_text(err_log).find("could not start a browser (xdg-open)"), std::string::npos)
      << read_text(err_log);
  kill(server.pid(), SIGINT);
  EXPECT_EQ(server.wait(), 0);
}

}  // namespace
}  // namespace hpd::test
