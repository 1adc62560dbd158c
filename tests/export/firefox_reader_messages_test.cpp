// The Firefox reader's messages for malformed input, word for word: each names the place in the
// file by its JSON path (built from schema.h's names) and says what is wrong there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "hpd/export/firefox.h"
#include "hpd/export/firefox_reader.h"
#include "synthetic_profile.h"

namespace hpd {
namespace {

using nlohmann::json;

json good_profile() {
  std::ostringstream out;
  write_firefox_json(testing::make_synthetic_profile(), out);
  return json::parse(out.str());
}

// The message parse_firefox_json gives for `doc`, or "accepted".
std::string message_for(const json& doc) {
  try {
    parse_firefox_json(doc.dump(), "bad.json");
    return "accepted";
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(FirefoxReaderMessages, NameThePlaceAndTheFault) {
  const json good = good_profile();
  ASSERT_EQ(message_for(good), "accepted");
  const size_t funcs = good["shared"]["funcTable"]["length"].get<size_t>();
  const size_t stacks = good["shared"]["stackTable"]["length"].get<size_t>();
  const size_t frames = good["shared"]["frameTable"]["length"].get<size_t>();
  const size_t libs = good["libs"].size();

  struct Case {
    const char* pointer;  // the JSON pointer of the value to replace, or to remove when `value` is absent
    json value;
    bool remove;
    std::string expected;
  };
  const Case cases[] = {
      {"/meta", nullptr, true, "bad.json: missing profile.meta"},
      {"/meta/preprocessedProfileVersion", nullptr, true,
       "bad.json: not a Firefox processed profile (meta.preprocessedProfileVersion is missing; Gecko or "
       "other "
       "formats are not read)"},
      {"/meta/interval", -1, false, "bad.json: meta.interval must be positive"},
      {"/meta/interval", "1", false, "bad.json: meta.interval is not a number"},
      {"/meta/categories", json::array(), false, "bad.json: meta.categories is not a non-empty array"},
      {"/libs", 5, false, "bad.json: profile.libs is not an array"},
      {"/libs/1/name", 7, false, "bad.json: libs[1].name is not a string"},
      {"/shared/stringArray/2", 3, false, "bad.json: shared.stringArray[2] is not a string"},
      {"/shared/funcTable/length", "x", false, "bad.json: shared.funcTable.length is not a count"},
      {"/shared/frameTable/func/0", 999, false,
       "bad.json: shared.frameTable.func[0] = 999 is not a valid index into shared.funcTable (length " +
           std::to_string(funcs) + ")"},
      {"/shared/frameTable/func", json::array({0}), false,
       "bad.json: shared.frameTable.func has 1 entries, but shared.frameTable.length is " +
           std::to_string(frames)},
      {"/shared/resourceTable/lib/0", 99, false,
       "bad.json: shared.resourceTable.lib[0] = 99 is not a valid index into profile.libs (length " +
           std::to_string(libs) + ")"},
      {"/shared/stackTable/prefixOffset", nullptr, true,
       "bad.json: shared.stackTable has no prefixOffset column (a layout older than version 66)"},
      {"/shared/stackTable/prefixOffset/0", 5, false,
       "bad.json: shared.stackTable.prefixOffset[0] = 5 does not point at an earlier stack"},
      {"/threads/0/samples", nullptr, true, "bad.json: missing threads[0].samples"},
      {"/threads/0/tid", "abc", false, "bad.json: threads[0].tid = \"abc\" is not a number"},
      {"/threads/1/samples/time/2", "x", false, "bad.json: threads[1].samples.time[2] is not a number"},
      {"/threads/0/samples/stack/0", -3, false,
       "bad.json: threads[0].samples.stack[0] = -3 is not a valid index into shared.stackTable (length " +
           std::to_string(stacks) + ")"},
      {"/threads/1/markers/data/0/sample", 77, false,
       "bad.json: threads[1].markers.data[0] is an off-CPU marker with an invalid sample or time"},
  };
  for (const Case& c : cases) {
    json doc = good;
    const json::json_pointer at(c.pointer);
    if (c.remove) {
      doc[at.parent_pointer()].erase(at.back());
    } else {
      doc[at] = c.value;
    }
    EXPECT_EQ(message_for(doc), c.expected) << "at " << c.pointer;
  }
}

}  // namespace
}  // namespace hpd
