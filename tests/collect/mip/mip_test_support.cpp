// Helpers for the MIP tests (see mip_test_support.h).
#include "mip_test_support.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace hpd::mip::test {

std::string fixture(const std::string& name) {
  return std::string(HPD_MIP_FIXTURE_DIR) + "/" + name;
}

std::map<std::string, ElfSymbol> read_function_symbols(const std::string& path) {
  std::map<std::string, ElfSymbol> out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  for (Elf_Scn* scn = elf ? elf_nextscn(elf, nullptr) : nullptr; scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    const size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
    for (size_t i = 0; data && i < n; i++) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;
      const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (name && sym.st_value) out[name] = {sym.st_value, sym.st_size};
    }
  }
  if (elf) elf_end(elf);
  close(fd);
  return out;
}

Child::Child(const std::string& path, const std::vector<std::string>& env) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; e++) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = path;
  char* argv[] = {arg0.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  const int rc = posix_spawn(&pid_, path.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  in_ = in[1];
  out_ = out[0];
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error("cannot start " + path + ": " + std::strerror(rc));
  }
}

Child::~Child() {
  kill_and_reap();
  if (in_ >= 0) close(in_);
  if (out_ >= 0) close(out_);
}

bool Child::wait_for_line(const std::string& line, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    size_t nl;
    while ((nl = buffered_.find('\n')) != std::string::npos) {
      const std::string got = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      if (got == line) return true;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[256];
    const ssize_t n = read(out_, buf, sizeof buf);
    if (n <= 0) return false;
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void Child::send_line() {
  if (in_ >= 0 && write(in_, "\n", 1) != 1) throw std::runtime_error("write to child failed");
}

void Child::close_stdin() {
  if (in_ >= 0) close(in_);
  in_ = -1;
}

int Child::wait_exit() {
  if (pid_ < 0) return -1;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void Child::kill_and_reap() {
  if (pid_ < 0) return;
  kill(pid_, SIGKILL);
  wait_exit();
}

}  // namespace hpd::mip::test

namespace hpd::mip::test {

std::vector<Expected> calls_fixture_expected(bool after_late) {
  return {{"main", 1, 1},
          {"setup", 1, 2},
          {"mid", 16000, 3},
          {"leaf", 32000, 4},
          {"wait_for_input", after_late ? 2u : 1u, 5},
          {"late", after_late ? 1u : 0u, after_late ? 6u : 0u},
          {"never_called", 0, 0}};
}

const Function* find_base(const Module& m, const std::string& base) {
  for (const Function& f : m.functions) {
    const std::string d = f.demangled.substr(0, f.demangled.find('('));
    if (d == base || f.name == base) return &f;
  }
  return nullptr;
}

std::string check_calls_fixture(const Module& m, bool after_late) {
  const auto expected = calls_fixture_expected(after_late);
  if (m.functions.size() != expected.size()) {
    return "expected " + std::to_string(expected.size()) + " functions, got " +
           std::to_string(m.functions.size());
  }
  for (const Expected& e : expected) {
    const Function* f = find_base(m, e.name);
    if (!f) return std::string("no function ") + e.name;
    if (f->call_count != e.calls) {
      return std::string(e.name) + ": " + std::to_string(f->call_count) + " calls, expected " +
             std::to_string(e.calls);
    }
    if (f->order_sum != e.order) {
      return std::string(e.name) + ": first call " + std::to_string(f->order_sum) + ", expected " +
             std::to_string(e.order);
    }
  }
  const auto never = m.never_called();
  const size_t expected_never = after_late ? 1 : 2;
  if (never.size() != expected_never)
    return "never-called list has " + std::to_string(never.size()) + " entries";
  const auto order = m.call_order();
  for (size_t i = 0; i < order.size(); i++) {
    if (order[i]->order_sum != i + 1) return "call order broken at " + order[i]->demangled;
  }
  const Function* setup = find_base(m, "setup");
  if (setup->blocks_total() < 2 || setup->blocks_covered() != setup->blocks_total() - 1) {
    return "setup: blocks " + std::to_string(setup->blocks_covered()) + "/" +
           std::to_string(setup->blocks_total()) + ", expected exactly one uncovered";
  }
  const Function* leaf = find_base(m, "leaf");
  if (leaf->blocks_total() < 1 || leaf->blocks_covered() != leaf->blocks_total())
    return "leaf: not every block covered";
  const Function* nc = find_base(m, "never_called");
  if (nc->blocks_total() < 2 || nc->blocks_covered() != 0) return "never_called: blocks covered or missing";
  return "";
}

std::string check_against_symbols(const Module& m, const std::string& binary, bool runtime) {
  const auto symbols = read_function_symbols(binary);
  for (const Function& f : m.functions) {
    auto it = symbols.find(f.name);
    if (it == symbols.end()) return "no symbol " + f.name + " in " + binary;
    const uint64_t address = runtime ? f.runtime_address - m.load_bias : f.file_address;
    if (address != it->second.value) {
      return f.name + ": address " + std::to_string(address) + ", symbol table " +
             std::to_string(it->second.value);
    }
    if (f.size != it->second.size) {
      return f.name + ": size " + std::to_string(f.size) + ", symbol table " +
             std::to_string(it->second.size);
    }
  }
  return "";
}

}  // namespace hpd::mip::test
