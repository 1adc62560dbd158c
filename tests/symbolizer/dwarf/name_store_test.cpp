// NameStore: a name interned under a key is found again by that key alone, views stay put while
// the store grows, and long names get blocks of their own.
#include "name_store.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hpd {
namespace {

TEST(NameStore, FindsEachNameByItsKeyOnly) {
  NameStore store;
  // Keys are compared as pointers: two equal strings at different places are different keys.
  const char first[] = "_Z1fv";
  const char copy[] = "_Z1fv";
  EXPECT_EQ(store.find(first), NameStore::kNone);
  const uint32_t a = store.add(first, "f()");
  EXPECT_EQ(store.find(first), a);
  EXPECT_EQ(store.find(copy), NameStore::kNone);
  const uint32_t b = store.add(copy, "f() again");
  EXPECT_NE(a, b);
  EXPECT_EQ(store.view(a), "f()");
  EXPECT_EQ(store.view(b), "f() again");
  EXPECT_EQ(store.view(NameStore::kNone), "");
  EXPECT_EQ(store.size(), 2u);
}

TEST(NameStore, ViewsSurviveGrowthAndLongNamesAreWhole) {
  NameStore store;
  // 200,000 keys: the hash slots and the index arrays grow many times, the arena takes many
  // blocks, and every so often a name longer than a shared block's share is stored.
  constexpr size_t kCount = 200000;
  std::vector<char> keys(kCount);
  std::vector<std::string> expected(kCount);
  std::vector<std::string_view> views(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    expected[i] = "name" + std::to_string(i);
    if (i % 5000 == 0) expected[i] += std::string(20000 + i % 7, 'x');  // over 8 KiB
    ASSERT_EQ(store.add(&keys[i], expected[i]), i);
    views[i] = store.view(static_cast<uint32_t>(i));
  }
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(store.find(&keys[i]), i);
    ASSERT_EQ(views[i], expected[i]);
    ASSERT_EQ(views[i].data(), store.view(static_cast<uint32_t>(i)).data());
    ASSERT_EQ(views[i].data()[views[i].size()], '\0');  // each name is NUL-terminated too
  }
  EXPECT_EQ(store.find(nullptr), NameStore::kNone);
  size_t chars = 0;
  for (const std::string& s : expected) chars += s.size() + 1;
  EXPECT_GE(store.memory_bytes(), chars);
  EXPECT_LT(store.memory_bytes(), chars + kCount * 48 + (size_t{64} << 10));
}

}  // namespace
}  // namespace hpd
