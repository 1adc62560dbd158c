// The BPF programs as a machine without kernel BTF builds them: against the hand-written
// bpf/include/minimal/vmlinux.h (bpf/CMakeLists.txt builds them beside the embedded ones). They must
// be the same programs: as many instructions, loaded and verified by this kernel, and every CO-RE
// relocation naming the same kernel field as the build from the generated header's. A field the
// minimal header spells wrong is not an error at load time when the program checks that it exists
// (bpf_core_field_exists): it silently reads as missing; only the comparison of relocations sees it.
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "calls/uprobe_multi_link.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace hpd {
namespace {

// The BPF objects' names, as bpf/CMakeLists.txt builds them.
std::vector<std::string> object_names() {
  std::vector<std::string> names;
  std::istringstream in(HPD_BPF_OBJECTS);
  for (std::string name; in >> name;) names.push_back(name);
  EXPECT_GE(names.size(), 3u) << "HPD_BPF_OBJECTS: " << HPD_BPF_OBJECTS;
  return names;
}

std::string generated_object(const std::string& name) {
  return std::string(HPD_BPF_GEN_DIR) + "/" + name + ".bpf.o";
}
std::string minimal_object(const std::string& name) {
  return std::string(HPD_BPF_GEN_DIR) + "/minimal/" + name + ".bpf.o";
}

struct ObjectCloser {
  void operator()(bpf_object* object) const { bpf_object__close(object); }
};
using Object = std::unique_ptr<bpf_object, ObjectCloser>;

Object open_object(const std::string& path) {
  Object object(bpf_object__open_file(path.c_str(), nullptr));
  if (!object) ADD_FAILURE() << "cannot open " << path << ": " << std::strerror(errno);
  return object;
}

// Each program's instruction count before loading, by name.
std::map<std::string, size_t> instruction_counts(bpf_object* object) {
  std::map<std::string, size_t> counts;
  bpf_program* program = nullptr;
  bpf_object__for_each_program(program, object) counts[bpf_program__name(program)] =
      bpf_program__insn_cnt(program);
  return counts;
}

// The kernel types and fields that the objects' CO-RE relocations resolve to in this kernel's BTF, as
// C (`bpftool gen min_core_btf`, then `btf dump ... format c`): every field not named by a relocation
// is padding there.
std::string relocated_fields(const std::vector<std::string>& objects, const std::string& btf_path) {
  std::vector<std::string> argv = {HPD_BPFTOOL, "gen", "min_core_btf", "/sys/kernel/btf/vmlinux", btf_path};
  argv.insert(argv.end(), objects.begin(), objects.end());
  const test::RunResult made = test::run(argv);
  EXPECT_EQ(made.exit_code, 0) << made.err;
  const test::RunResult dumped = test::run({HPD_BPFTOOL, "btf", "dump", "file", btf_path, "format", "c"});
  EXPECT_EQ(dumped.exit_code, 0) << dumped.err;
  return dumped.out;
}

// The C definition of `struct NAME` in a dump with the blank line after it, or "" when it has none.
std::string struct_definition(const std::string& dump, const std::string& name) {
  const size_t begin = dump.find("struct " + name + " {\n");
  if (begin == std::string::npos) return "";
  return dump.substr(begin, dump.find("\n};\n\n", begin) + 5 - begin);
}

// Where two dumps first differ, as the text around it in each ("" when they are the same).
std::string first_difference(const std::string& a, const std::string& b) {
  const auto [in_a, in_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (in_a == a.end() && in_b == b.end()) return "";
  const size_t at = size_t(in_a - a.begin());
  const size_t from = at < 400 ? 0 : at - 400;
  return "the minimal header's build:\n" + a.substr(from, 600) + "\n--- the generated header's:\n" +
         b.substr(from, 600);
}

TEST(BpfMinimalVmlinux, ProgramsBuiltWithoutKernelBtfAreTheSamePrograms) {
  for (const std::string& name : object_names()) {
    SCOPED_TRACE(name);
    const Object generated = open_object(generated_object(name));
    const Object minimal = open_object(minimal_object(name));
    ASSERT_TRUE(generated && minimal);
    const auto counts = instruction_counts(generated.get());
    EXPECT_GE(counts.size(), 1u);
    EXPECT_EQ(instruction_counts(minimal.get()), counts);
  }
}

TEST(BpfMinimalVmlinux, ProgramsBuiltWithoutKernelBtfLoadIntoThisKernel) {
  size_t loaded = 0;
  std::set<std::string> programs;
  for (const std::string& name : object_names()) {
    SCOPED_TRACE(name);
    const Object object = open_object(minimal_object(name));
    ASSERT_TRUE(object);
    // The attach types the loaders set (multi-uprobe, session), as they set them.
    uprobe_multi::set_expected_attach_types(object.get());
    bpf_program* program = nullptr;
    const int err = bpf_object__load(object.get());
    ASSERT_EQ(err, 0) << "loading " << minimal_object(name) << ": " << std::strerror(-err)
                      << " (libbpf's log above names the program and the relocation)";
    bpf_object__for_each_program(program, object.get()) {
      EXPECT_GE(bpf_program__fd(program), 0) << bpf_program__name(program);
      programs.insert(bpf_program__name(program));
      ++loaded;
    }
  }
  EXPECT_GE(loaded, 10u);
  // Every program the attach-type table names exists: a renamed program would otherwise keep the
  // plain uprobe type and fail only at its link.
  for (const auto& entry : uprobe_multi::kProgramAttachTypes)
    EXPECT_TRUE(programs.count(entry.program)) << entry.program;
}

TEST(BpfMinimalVmlinux, RelocationsNameTheSameKernelFields) {
  testing::TempDir dir("hpd-minimal-vmlinux");
  std::vector<std::string> generated, minimal;
  for (const std::string& name : object_names()) {
    generated.push_back(generated_object(name));
    minimal.push_back(minimal_object(name));
  }
  std::string from_generated = relocated_fields(generated, dir.path() + "/generated.btf");
  std::string from_minimal = relocated_fields(minimal, dir.path() + "/minimal.btf");
  // Fields the programs read, so the comparison is not of two empty dumps.
  for (const char* field :
       {"sum_exec_runtime;", "*utask;", "orig_ret_vaddr;", "*vm_file;", "fsbase;", "s_dev;"}) {
    EXPECT_NE(from_generated.find(field), std::string::npos) << field;
  }
  // The one known difference: the minimal header declares the perf_event program's context without
  // preserve_access_index (the verifier rewrites context accesses: they need no relocation).
  const std::string context = struct_definition(from_generated, "bpf_perf_event_data");
  EXPECT_NE(context, "");
  EXPECT_EQ(struct_definition(from_minimal, "bpf_perf_event_data"), "");
  from_generated.erase(from_generated.find(context), context.size());
  EXPECT_EQ(first_difference(from_minimal, from_generated), "");
}

}  // namespace
}  // namespace hpd
