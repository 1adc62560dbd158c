// The names in hpd/export/firefox/schema.h, which the writer, the reader and the linter all use, are
// the Firefox Profiler's: checked against the reference v66 profile in data/, not against the writer.
#include "hpd/export/firefox/schema.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>

namespace hpd {
namespace {

using nlohmann::json;

json reference() {
  std::ifstream in(std::string(HPD_EXPORT_TEST_DATA) + "/firefox-profile-minimal-v66.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

std::set<std::string> keys_of(const json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

std::set<std::string> names(std::span<const char* const> all) {
  return std::set<std::string>(all.begin(), all.end());
}

TEST(FirefoxSchema, SharedTablesHaveExactlyTheReferenceColumns) {
  const json shared = reference().at(firefox::profile::kShared);
  const struct {
    const char* table;
    std::span<const char* const> columns;
  } tables[] = {
      {firefox::shared::kSources, firefox::sources::kAll},
      {firefox::shared::kSourceLocationTable, firefox::source_locations::kAll},
      {firefox::shared::kResourceTable, firefox::resources::kAll},
      {firefox::shared::kNativeSymbols, firefox::native_symbols::kAll},
      {firefox::shared::kFuncTable, firefox::funcs::kAll},
      {firefox::shared::kFrameTable, firefox::frames::kAll},
      {firefox::shared::kStackTable, firefox::stacks::kAll},
  };
  std::set<std::string> seen_tables;
  for (const auto& t : tables) {
    SCOPED_TRACE(t.table);
    ASSERT_TRUE(shared.contains(t.table));
    std::set<std::string> expected = names(t.columns);
    expected.insert(firefox::kLength);
    EXPECT_EQ(keys_of(shared.at(t.table)), expected);
    seen_tables.insert(t.table);
  }
  seen_tables.insert(firefox::shared::kStringArray);
  EXPECT_EQ(keys_of(shared), seen_tables);
}

TEST(FirefoxSchema, LibThreadSampleAndMarkerNamesAreTheReferences) {
  const json root = reference();
  EXPECT_EQ(keys_of(root), (std::set<std::string>{firefox::profile::kMeta, firefox::profile::kLibs,
                                                  firefox::profile::kShared, firefox::profile::kThreads}));
  EXPECT_EQ(keys_of(root.at(firefox::profile::kLibs).at(0)), names(firefox::lib::kAll));
  const json& thread = root.at(firefox::profile::kThreads).at(0);
  const std::set<std::string> thread_keys = keys_of(thread);
  for (const char* key : firefox::thread::kAll) EXPECT_TRUE(thread_keys.count(key)) << key;
  std::set<std::string> markers = names(firefox::markers::kAll);
  markers.insert(firefox::kLength);
  EXPECT_EQ(keys_of(thread.at(firefox::thread::kMarkers)), markers);
  const json& samples = thread.at(firefox::thread::kSamples);
  for (const char* key : {firefox::samples::kWeightType, firefox::samples::kWeight, firefox::samples::kStack,
                          firefox::samples::kTime, firefox::samples::kThreadCpuDelta})
    EXPECT_TRUE(samples.contains(key)) << key;
  const json& stacks = root.at(firefox::profile::kShared).at(firefox::shared::kStackTable);
  EXPECT_FALSE(stacks.contains(firefox::stacks::kPrefixBefore66));
}

TEST(FirefoxSchema, MetaKeysOfTheReferenceAreSpelledAlike) {
  const json meta = reference().at(firefox::profile::kMeta);
  for (const char* key :
       {firefox::meta::kVersion, firefox::meta::kPreprocessedProfileVersion, firefox::meta::kInterval,
        firefox::meta::kStartTime, firefox::meta::kProcessType, firefox::meta::kProduct,
        firefox::meta::kStackwalk, firefox::meta::kDebug, firefox::meta::kSymbolicated,
        firefox::meta::kPlatform, firefox::meta::kOscpu, firefox::meta::kUsesOnlyOneStackType,
        firefox::meta::kSourceCodeIsNotOnSearchfox, firefox::meta::kCategories, firefox::meta::kSampleUnits,
        firefox::meta::kMarkerSchema, firefox::meta::kInitialSelectedThreads})
    EXPECT_TRUE(meta.contains(key)) << key;
  const json& category = meta.at(firefox::meta::kCategories).at(0);
  EXPECT_EQ(keys_of(category), (std::set<std::string>{firefox::category::kName, firefox::category::kColor,
                                                      firefox::category::kSubcategories}));
  const json& units = meta.at(firefox::meta::kSampleUnits);
  EXPECT_EQ(keys_of(units),
            (std::set<std::string>{firefox::sample_units::kTime, firefox::sample_units::kEventDelay,
                                   firefox::sample_units::kThreadCpuDelta}));
  const json& schema = meta.at(firefox::meta::kMarkerSchema).at(0);
  for (const char* key : {firefox::marker_schema::kName, firefox::marker_schema::kDisplay,
                          firefox::marker_schema::kChartLabel, firefox::marker_schema::kTableLabel,
                          firefox::marker_schema::kTooltipLabel, firefox::marker_schema::kFields})
    EXPECT_TRUE(schema.contains(key)) << key;
  const json& field = schema.at(firefox::marker_schema::kFields).at(0);
  for (const char* key : {firefox::marker_schema::kFieldKey, firefox::marker_schema::kFieldLabel,
                          firefox::marker_schema::kFieldFormat})
    EXPECT_TRUE(field.contains(key)) << key;
}

}  // namespace
}  // namespace hpd
