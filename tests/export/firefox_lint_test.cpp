// Tests of the profile linter itself: the reference profile passes, each kind of defect is flagged.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "firefox_lint.h"

namespace hpd {
namespace {

using nlohmann::json;

const json& reference() {
  static const json doc =
      testing::load_json_maybe_gzip(HPD_EXPORT_TEST_DATA "/firefox-profile-minimal-v66.json");
  return doc;
}

std::string joined(const std::vector<std::string>& problems) {
  std::string text;
  for (const auto& p : problems) text += p + "\n";
  return text;
}

TEST(FirefoxLint, ReferenceProfilePasses) {
  const auto problems = testing::lint_firefox_profile(reference());
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

struct Defect {
  const char* name;
  std::function<void(json&)> apply;
  const char* expected;  // a substring of one reported problem
};

class FirefoxLintDefects : public ::testing::TestWithParam<Defect> {};

TEST_P(FirefoxLintDefects, IsFlagged) {
  json doc = reference();
  GetParam().apply(doc);
  const auto problems = testing::lint_firefox_profile(doc);
  ASSERT_FALSE(problems.empty()) << GetParam().name << " was not flagged";
  EXPECT_NE(joined(problems).find(GetParam().expected), std::string::npos) << joined(problems);
}

json& shared(json& d) {
  return d["shared"];
}

// A native allocations table (threads[i].nativeAllocations) of the profiler's balanced shape: two
// allocations, the first freed by another thread.
json& with_allocations(json& d) {
  d["threads"][0]["nativeAllocations"] = json::parse(R"({
    "length": 3, "weightType": "bytes", "time": [1.0, 2.0, 2.5], "weight": [4096, 1048576.5, -4096],
    "stack": [3, 7, null], "memoryAddress": [140737488347136, 140737488351232, 140737488347136],
    "threadId": [1234, 1234, 1235]})");
  return d["threads"][0]["nativeAllocations"];
}

TEST(FirefoxLint, NativeAllocationsTablePasses) {
  json doc = reference();
  with_allocations(doc);
  const auto problems = testing::lint_firefox_profile(doc);
  EXPECT_TRUE(problems.empty()) << joined(problems);
}

const Defect kDefects[] = {
    {"column_shorter_than_length", [](json& d) { shared(d)["frameTable"]["func"].erase(5); },
     "shared.frameTable.func has 5 entries but shared.frameTable.length is 6"},
    {"stack_frame_out_of_range", [](json& d) { shared(d)["stackTable"]["frame"][3] = 6; },
     "shared.stackTable.frame[3] = 6 is out of range"},
    {"frame_func_out_of_range", [](json& d) { shared(d)["frameTable"]["func"][0] = 6; },
     "shared.frameTable.func[0] = 6 is out of range"},
    {"frame_native_symbol_out_of_range", [](json& d) { shared(d)["frameTable"]["nativeSymbol"][4] = 5; },
     "shared.frameTable.nativeSymbol[4] = 5 is out of range"},
    {"func_name_out_of_range", [](json& d) { shared(d)["funcTable"]["name"][2] = 11; },
     "shared.funcTable.name[2] = 11 is out of range for shared.stringArray"},
    {"func_resource_out_of_range", [](json& d) { shared(d)["funcTable"]["resource"][2] = 2; },
     "shared.funcTable.resource[2] = 2 is out of range"},
    {"func_source_out_of_range", [](json& d) { shared(d)["funcTable"]["source"][0] = 2; },
     "shared.funcTable.source[0] = 2 is out of range"},
    {"resource_lib_out_of_range", [](json& d) { shared(d)["resourceTable"]["lib"][1] = 2; },
     "shared.resourceTable.lib[1] = 2 is out of range for libs"},
    {"string_index_not_a_number", [](json& d) { shared(d)["resourceTable"]["name"][0] = "myapp"; },
     "shared.resourceTable.name[0] = \"myapp\" is out of range"},
    {"sample_stack_out_of_range", [](json& d) { d["threads"][1]["samples"]["stack"][0] = 8; },
     "threads[1].samples.stack[0] = 8 is out of range for shared.stackTable"},
    {"negative_prefix_offset", [](json& d) { shared(d)["stackTable"]["prefixOffset"][2] = -1; },
     "shared.stackTable.prefixOffset[2] = -1 is not an integer"},
    {"prefix_before_first_stack", [](json& d) { shared(d)["stackTable"]["prefixOffset"][1] = 2; },
     "prefixOffset[1] = 2 points before the first stack"},
    {"old_prefix_column",
     [](json& d) {
       shared(d)["stackTable"].erase("prefixOffset");
       shared(d)["stackTable"]["prefix"] = json::parse("[null, 0, 1, 2, null, 4, 5, 4]");
     },
     "version 66 uses prefixOffset"},
    {"inline_frame_address_differs", [](json& d) { shared(d)["frameTable"]["address"][2] = 4400; },
     "its address differs from the parent frame 1's"},
    {"inline_frame_symbol_differs", [](json& d) { shared(d)["frameTable"]["nativeSymbol"][2] = 0; },
     "its nativeSymbol differs"},
    {"inline_frame_depth_gap", [](json& d) { shared(d)["frameTable"]["inlineDepth"][2] = 2; },
     "has inlineDepth 0, expected 1"},
    {"inline_frame_at_root", [](json& d) { shared(d)["frameTable"]["inlineDepth"][0] = 1; },
     "is inlined but has no parent stack"},
    {"unsorted_time", [](json& d) { d["threads"][0]["samples"]["time"][3] = 1.5; },
     "threads[0].samples.time is not sorted ascending at index 3"},
    {"negative_time_delta", [](json& d) { d["threads"][1]["samples"]["timeDeltas"][2] = -1; },
     "timeDeltas is not sorted ascending at index 2"},
    {"greek_mu_unit", [](json& d) { d["meta"]["sampleUnits"]["threadCPUDelta"] = "\xCE\xBCs"; },
     "meta.sampleUnits.threadCPUDelta is"},
    {"cpu_delta_without_units", [](json& d) { d["meta"].erase("sampleUnits"); },
     "threadCPUDelta is present but meta.sampleUnits is not"},
    {"missing_interval", [](json& d) { d["meta"].erase("interval"); }, "meta.interval is missing"},
    {"missing_marker_schema", [](json& d) { d["meta"].erase("markerSchema"); },
     "meta.markerSchema is missing"},
    {"missing_start_time", [](json& d) { d["meta"].erase("startTime"); }, "meta.startTime is missing"},
    {"wrong_version", [](json& d) { d["meta"]["preprocessedProfileVersion"] = 70; }, "is 70, expected 66"},
    {"no_grey_category", [](json& d) { d["meta"]["categories"][0]["color"] = "blue"; }, "no grey category"},
    {"no_idle_category", [](json& d) { d["meta"]["categories"][1]["name"] = "Sleeping"; },
     "no category named \"Idle\""},
    {"unknown_color", [](json& d) { d["meta"]["categories"][2]["color"] = "chartreuse"; },
     "is not a profiler color"},
    {"frame_category_out_of_range", [](json& d) { shared(d)["frameTable"]["category"][0] = 4; },
     "shared.frameTable.category[0] = 4 is out of range for meta.categories"},
    {"pid_is_a_number", [](json& d) { d["threads"][0]["pid"] = 1234; },
     "threads[0].pid is 1234, not a string"},
    {"missing_register_time", [](json& d) { d["threads"][1].erase("registerTime"); },
     "threads[1].registerTime is missing"},
    {"missing_unregister_time", [](json& d) { d["threads"][0].erase("unregisterTime"); },
     "threads[0].unregisterTime is missing"},
    {"breakpad_id_lower_case",
     [](json& d) { d["libs"][0]["breakpadId"] = "0123456789abcdef0123456789ABCDEF0"; }, "libs[0].breakpadId"},
    {"breakpad_id_too_short", [](json& d) { d["libs"][1]["breakpadId"] = "FEDCBA9876543210"; },
     "is not 33 upper-case hex digits"},
    {"code_id_upper_case", [](json& d) { d["libs"][0]["codeId"] = "ABCDEF"; },
     "libs[0].codeId \"ABCDEF\" is not lower-case hex"},
    {"marker_column_missing", [](json& d) { d["threads"][0]["markers"].erase("phase"); },
     "threads[0].markers.phase is missing"},
    {"marker_name_out_of_range", [](json& d) { d["threads"][0]["markers"]["name"][0] = 11; },
     "threads[0].markers.name[0] = 11 is out of range"},
    {"samples_without_time", [](json& d) { d["threads"][0]["samples"].erase("time"); },
     "has neither time nor timeDeltas"},
    {"native_allocations_unsorted", [](json& d) { with_allocations(d)["time"][2] = 0.5; },
     "threads[0].nativeAllocations.time is not sorted ascending at index 2"},
    {"native_allocation_stack_out_of_range", [](json& d) { with_allocations(d)["stack"][1] = 8; },
     "threads[0].nativeAllocations.stack[1] = 8 is out of range for shared.stackTable"},
    {"native_allocation_address_missing", [](json& d) { with_allocations(d).erase("memoryAddress"); },
     "threads[0].nativeAllocations.memoryAddress is missing"},
    {"native_allocation_address_beyond_a_double",
     [](json& d) { with_allocations(d)["memoryAddress"][0] = uint64_t{1} << 60; },
     "threads[0].nativeAllocations.memoryAddress[0] = 1152921504606846976 is not an integer"},
    {"native_allocations_weight_type", [](json& d) { with_allocations(d)["weightType"] = "samples"; },
     "threads[0].nativeAllocations.weightType is not \"bytes\""},
    {"native_allocations_thread_id_column_short", [](json& d) { with_allocations(d)["threadId"].erase(2); },
     "threads[0].nativeAllocations.threadId has 2 entries"},
    {"subcategory_null_with_category", [](json& d) { shared(d)["frameTable"]["subcategory"][0] = nullptr; },
     "subcategory[0] is null but its category is not"},
};

INSTANTIATE_TEST_SUITE_P(Reference, FirefoxLintDefects, ::testing::ValuesIn(kDefects),
                         [](const ::testing::TestParamInfo<Defect>& info) {
                           return std::string(info.param.name);
                         });

TEST(FirefoxLint, RandomCorruptionsAreReportedNotThrown) {
  const json flat = reference().flatten();
  std::vector<std::string> leaves;
  for (const auto& item : flat.items()) leaves.push_back(item.key());
  const json replacements[] = {nullptr, -1, 4294967295u, "x", json::array(), json::object(), true, 3.5};
  std::mt19937 rng(99);
  size_t flagged = 0;
  for (int i = 0; i < 2000; ++i) {
    json doc = reference();
    doc[json::json_pointer(leaves[rng() % leaves.size()])] = replacements[rng() % std::size(replacements)];
    std::vector<std::string> problems;
    ASSERT_NO_THROW(problems = testing::lint_firefox_profile(doc));
    flagged += !problems.empty();
  }
  EXPECT_GT(flagged, 1000u);
}

TEST(FirefoxLint, NotAnObject) {
  EXPECT_EQ(testing::lint_firefox_profile(json::array()).size(), 1u);
}

TEST(FirefoxLint, ProblemListIsBounded) {
  json doc = reference();
  json& stack = doc["threads"][0]["samples"]["stack"];
  json& time = doc["threads"][0]["samples"]["time"];
  json& cpu = doc["threads"][0]["samples"]["threadCPUDelta"];
  for (int i = 0; i < 1000; ++i) {
    stack.push_back(99);
    time.push_back(10 + i);
    cpu.push_back(0);
  }
  doc["threads"][0]["samples"]["length"] = stack.size();
  const auto problems = testing::lint_firefox_profile(doc);
  EXPECT_EQ(problems.size(), 201u);
  EXPECT_EQ(problems.back(), "... further problems not listed");
}

}  // namespace
}  // namespace hpd
