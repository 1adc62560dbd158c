// Live MIP snapshots of running fixtures: exact counts before and after more calls, agreement with the dump
// at exit, runtime addresses against the symbol table and /proc/PID/maps, DSOs, --mipmap overrides, and a
// process that exits between discovery and the read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "mip_internal.h"
#include "mip_test_support.h"

namespace hpd::mip {
namespace {

using test::Child;
using test::fixture;
using test::TempDir;

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const MipError& e) {
    EXPECT_NE(std::string(e.what()), "");
    return e.code();
  }
  ADD_FAILURE() << "no MipError thrown";
  return ErrorCode::kIo;
}

// Whether `address` lies in an executable mapping of `path` in process `pid`.
bool in_executable_mapping(pid_t pid, uint64_t address, const std::string& path) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(in, line)) {
    uint64_t start = 0, end = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &start, &end, perms) != 3) continue;
    if (address >= start && address < end) return perms[2] == 'x' && line.ends_with(path);
  }
  return false;
}

std::string real(const std::string& path) {
  char buf[4096];
  return realpath(path.c_str(), buf) ? buf : path;
}

class MipLive : public ::testing::TestWithParam<const char*> {};

TEST_P(MipLive, SnapshotsGiveExactCountsAndMatchTheDump) {
  TempDir dir;
  const std::string binary = fixture(GetParam());
  Child child(binary, {"LLVM_MIP_PROFILE_FILENAME=" + dir.path() + "/exit.mipraw"});
  ASSERT_TRUE(child.wait_for_line("ready"));
  LiveReader reader(child.pid());
  ASSERT_EQ(reader.discover(), 1u);
  const Snapshot first = reader.snapshot();
  ASSERT_TRUE(first.errors.empty()) << first.errors[0].message;
  ASSERT_EQ(first.modules.size(), 1u);
  const Module& m1 = first.modules[0];
  EXPECT_EQ(real(m1.path), real(binary));
  EXPECT_GE(m1.build_id.size(), 16u);  // lld defaults to an 8-byte "fast" build-id
  EXPECT_EQ(test::check_calls_fixture(m1, false), "");
  EXPECT_EQ(test::check_against_symbols(m1, binary, false), "");
  EXPECT_EQ(test::check_against_symbols(m1, binary, true), "");
  for (const Function& f : m1.functions) {
    EXPECT_TRUE(in_executable_mapping(child.pid(), f.runtime_address, GetParam())) << f.name;
  }
  EXPECT_GT(first.read_ns, 0u);

  child.send_line();
  ASSERT_TRUE(child.wait_for_line("ready2"));
  const Snapshot second = reader.snapshot();
  ASSERT_EQ(second.modules.size(), 1u);
  EXPECT_EQ(test::check_calls_fixture(second.modules[0], true), "");
  EXPECT_GT(second.time_ns, first.time_ns);

  child.close_stdin();
  ASSERT_EQ(child.wait_exit(), 0);
  const Module dumped = decode_file(dir.path() + "/exit.mipraw", binary);
  ASSERT_EQ(dumped.functions.size(), second.modules[0].functions.size());
  for (size_t i = 0; i < dumped.functions.size(); i++) {
    const Function& a = dumped.functions[i];
    const Function& b = second.modules[0].functions[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.call_count, b.call_count) << a.name;
    EXPECT_EQ(a.order_sum, b.order_sum) << a.name;
    EXPECT_EQ(a.block_covered, b.block_covered) << a.name;
    EXPECT_EQ(a.file_address, b.file_address) << a.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Compilers, MipLive, ::testing::Values("mip_calls_gcc", "mip_calls_clang"));

TEST(MipLive, EveryModuleWithASectionCounts) {
  Child child(fixture("mip_dso_main"), {"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  ASSERT_TRUE(child.wait_for_line("ready"));
  EXPECT_TRUE(process_has_mip(child.pid()));
  const Snapshot s = snapshot_process(child.pid());
  ASSERT_TRUE(s.errors.empty()) << s.errors[0].message;
  ASSERT_EQ(s.modules.size(), 2u);
  bool saw_lib = false, saw_exe = false;
  for (const Module& m : s.modules) {
    const bool lib = m.path.ends_with("/libmipdso.so");
    const std::string binary = fixture(lib ? "libmipdso.so" : "mip_dso_main");
    EXPECT_EQ(test::check_against_symbols(m, binary, false), "") << m.path;
    EXPECT_EQ(test::check_against_symbols(m, binary, true), "") << m.path;
    for (const Function& f : m.functions) {
      EXPECT_TRUE(
          in_executable_mapping(child.pid(), f.runtime_address, lib ? "libmipdso.so" : "mip_dso_main"))
          << f.name;
    }
    if (lib) {
      saw_lib = true;
      EXPECT_NE(m.load_bias, 0u);  // a DSO is never at its link-time address 0
      EXPECT_EQ(m.find("dso_work")->call_count, 3u);
      EXPECT_EQ(m.find("dso_leaf")->call_count, 3000u);
      ASSERT_EQ(m.never_called().size(), 1u);
      EXPECT_EQ(m.never_called()[0]->name, "dso_never");
    } else {
      saw_exe = true;
      EXPECT_EQ(m.find("main_helper")->call_count, 7u);
      ASSERT_EQ(m.call_order().size(), 2u);
      EXPECT_EQ(m.call_order()[0]->name, "main");
      EXPECT_EQ(m.call_order()[1]->name, "main_helper");
    }
  }
  EXPECT_TRUE(saw_lib && saw_exe);
}

TEST(MipLive, MipmapFileStandsInForAStrippedMap) {
  Child child(fixture("mip_calls_gcc_nomap"), {"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  ASSERT_TRUE(child.wait_for_line("ready"));
  const Snapshot without = snapshot_process(child.pid());
  EXPECT_TRUE(without.modules.empty());
  ASSERT_EQ(without.errors.size(), 1u);
  EXPECT_EQ(without.errors[0].code, ErrorCode::kNoSection);
  EXPECT_NE(without.errors[0].message.find(".mipmap"), std::string::npos) << without.errors[0].message;

  LiveOptions options;
  options.mipmap_files["mip_calls_gcc_nomap"] = fixture("mip_calls_gcc.mipmap");
  const Snapshot with = snapshot_process(child.pid(), options);
  ASSERT_TRUE(with.errors.empty()) << with.errors[0].message;
  ASSERT_EQ(with.modules.size(), 1u);
  EXPECT_EQ(test::check_calls_fixture(with.modules[0], false), "");
  // The section's address comes from the running file, so addresses are known even with a .mipmap.
  EXPECT_EQ(test::check_against_symbols(with.modules[0], fixture("mip_calls_gcc"), false), "");
}

TEST(MipLive, WrongMipmapIsAHashMismatch) {
  Child child(fixture("mip_calls_gcc"), {"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  ASSERT_TRUE(child.wait_for_line("ready"));
  LiveOptions options;
  options.mipmap_files[fixture("mip_calls_gcc")] = fixture("mip_calls_clang");
  const Snapshot s = snapshot_process(child.pid(), options);
  EXPECT_TRUE(s.modules.empty());
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].code, ErrorCode::kHashMismatch) << s.errors[0].message;
}

TEST(MipLive, ProcessExitingBeforeTheReadIsAClearError) {
  auto child = std::make_unique<Child>(fixture("mip_calls_gcc"),
                                       std::vector<std::string>{"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  ASSERT_TRUE(child->wait_for_line("ready"));
  const pid_t pid = child->pid();
  LiveReader reader(pid);
  ASSERT_EQ(reader.discover(), 1u);
  child->kill_and_reap();
  try {
    reader.snapshot();
    ADD_FAILURE() << "snapshot of an exited process succeeded";
  } catch (const MipError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProcessGone);
    EXPECT_NE(std::string(e.what()).find(std::to_string(pid)), std::string::npos) << e.what();
  }
  EXPECT_EQ(code_of([&] { reader.discover(); }), ErrorCode::kProcessGone);
  EXPECT_FALSE(process_has_mip(pid));
}

TEST(MipLive, ZombieAndMissingProcesses) {
  Child child(fixture("mip_calls_gcc"), {"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  ASSERT_TRUE(child.wait_for_line("ready"));
  LiveReader reader(child.pid());
  ASSERT_EQ(reader.discover(), 1u);
  // Exited but not yet reaped: its memory is gone while /proc/PID still exists.
  kill(child.pid(), SIGKILL);
  for (int i = 0; i < 200; i++) {
    std::ifstream stat("/proc/" + std::to_string(child.pid()) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    if (text.find(") Z") != std::string::npos) break;
    usleep(10000);
  }
  EXPECT_EQ(code_of([&] { reader.snapshot(); }), ErrorCode::kProcessGone);
  EXPECT_EQ(code_of([&] { snapshot_process(child.pid()); }), ErrorCode::kProcessGone);
  child.kill_and_reap();
  EXPECT_EQ(code_of([&] { snapshot_process(999999999); }), ErrorCode::kProcessGone);
  EXPECT_FALSE(process_has_mip(getpid()));  // the test itself has no MIP section
}

TEST(MipLive, TenThousandFunctions) {
  Child child(fixture("mip_many"), {"LLVM_MIP_PROFILE_FILENAME=/dev/null"});
  ASSERT_TRUE(child.wait_for_line("ready", 30000));
  const Snapshot s = snapshot_process(child.pid());
  ASSERT_EQ(s.modules.size(), 1u);
  const Module& m = s.modules[0];
  ASSERT_EQ(m.functions.size(), 10001u);  // f_0 .. f_9999 and main
  size_t checked = 0, never = 0;
  for (const Function& f : m.functions) {
    if (f.name == "main") continue;
    const uint64_t i = std::stoull(f.name.substr(2));
    EXPECT_EQ(f.call_count, i % 7) << f.name;
    never += f.called() ? 0 : 1;
    checked++;
  }
  EXPECT_EQ(checked, 10000u);
  EXPECT_EQ(never, 10000u / 7 + 1);  // i % 7 == 0 for i = 0, 7, ..., 9996
  EXPECT_EQ(m.never_called().size(), never);
  EXPECT_EQ(test::check_against_symbols(m, fixture("mip_many"), true), "");
}

}  // namespace
}  // namespace hpd::mip
