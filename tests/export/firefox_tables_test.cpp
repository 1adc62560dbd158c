// Tests of the Firefox table builders (export/src/firefox/): typed indices that do not mix, a
// stack table that refuses a prefix it cannot write, and tables serializing their columns.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "firefox/frame_table.h"
#include "firefox/stack_table.h"
#include "json_writer.h"

namespace hpd::firefox {
namespace {

// A table's index is not another table's: a frame cannot be handed a stack's index.
static_assert(!std::is_convertible_v<StackIndex, FrameIndex>);
static_assert(!std::is_convertible_v<FuncIndex, FrameIndex>);
static_assert(!std::is_convertible_v<uint32_t, FuncIndex>);
static_assert(!std::is_assignable_v<FuncIndex&, StackIndex>);

class StringSink : public json::ByteSink {
 public:
  void write(const char* data, size_t size) override { text.append(data, size); }
  std::string text;
};

template <typename Table>
nlohmann::json serialized(const Table& table) {
  StringSink sink;
  json::Writer w(sink);
  table.serialize(w);
  w.finish();
  return nlohmann::json::parse(sink.text);
}

TEST(FirefoxTables, StackTableWritesPrefixesAsOffsetsBack) {
  StackTable stacks;
  const StackIndex root = stacks.add(std::nullopt, FrameIndex{4});
  const StackIndex child = stacks.add(root, FrameIndex{5});
  stacks.add(std::nullopt, FrameIndex{6});
  const StackIndex grandchild = stacks.add(child, FrameIndex{7});
  EXPECT_EQ(grandchild.v, 3u);
  const nlohmann::json t = serialized(stacks);
  EXPECT_EQ(t["length"], 4);
  EXPECT_EQ(t["frame"], nlohmann::json({4, 5, 6, 7}));
  EXPECT_EQ(t["prefixOffset"], nlohmann::json({0, 1, 0, 2}));
}

TEST(FirefoxTables, StackTableRefusesAPrefixThatIsNotBeforeIt) {
  StackTable stacks;
  stacks.add(std::nullopt, FrameIndex{0});
  EXPECT_THROW(stacks.add(StackIndex{1}, FrameIndex{0}), std::logic_error);  // itself
  EXPECT_THROW(stacks.add(StackIndex{9}, FrameIndex{0}), std::logic_error);  // a later row
  EXPECT_EQ(stacks.size(), 1u);
}

TEST(FirefoxTables, FrameTableWritesUnknownsAsTheFormatsNulls) {
  FrameTable frames;
  FrameRow known;
  known.address = 0x1234;
  known.inline_depth = 1;
  known.category = Category::kKernel;
  known.func = FuncIndex{2};
  known.native_symbol = NativeSymbolIndex{3};
  known.line = 10;
  known.column = 4;
  EXPECT_EQ(frames.add(known).v, 0u);
  FrameRow unknown;
  unknown.address = -7;
  unknown.func = FuncIndex{1};
  EXPECT_EQ(frames.add(unknown).v, 1u);
  const nlohmann::json t = serialized(frames);
  EXPECT_EQ(t["length"], 2);
  EXPECT_EQ(t["address"], nlohmann::json({0x1234, -1}));
  EXPECT_EQ(t["inlineDepth"], nlohmann::json({1, 0}));
  EXPECT_EQ(t["category"], nlohmann::json({3, 2}));
  EXPECT_EQ(t["func"], nlohmann::json({2, 1}));
  EXPECT_EQ(t["nativeSymbol"], nlohmann::json({3, nullptr}));
  EXPECT_EQ(t["line"], nlohmann::json({10, nullptr}));
  EXPECT_EQ(t["column"], nlohmann::json({4, nullptr}));
  EXPECT_EQ(t["subcategory"], nlohmann::json({0, 0}));
}

}  // namespace
}  // namespace hpd::firefox
