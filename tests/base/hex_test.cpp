// Hex text of bytes and back.
#include "hpd/base/hex.h"

#include <gtest/gtest.h>

namespace hpd {
namespace {

TEST(Hex, EveryByteValueRoundTrips) {
  std::vector<uint8_t> all(256);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i);
  const std::string lower = to_hex(all);
  ASSERT_EQ(lower.size(), 512u);
  EXPECT_EQ(lower.substr(0, 8), "00010203");
  EXPECT_EQ(lower.substr(508), "feff");
  EXPECT_TRUE(is_lower_hex(lower));
  EXPECT_EQ(from_hex(lower), all);
  const std::string upper = to_hex(all, HexCase::kUpper);
  EXPECT_EQ(upper.substr(0x9a * 2, 4), "9A9B");
  EXPECT_FALSE(is_lower_hex(upper));
  EXPECT_EQ(from_hex(upper), all);
}

TEST(Hex, DigitsAndValues) {
  EXPECT_EQ(hex_digit(0), '0');
  EXPECT_EQ(hex_digit(10), 'a');
  EXPECT_EQ(hex_digit(15, HexCase::kUpper), 'F');
  EXPECT_EQ(hex_digit(0x1b), 'b');  // only the low nibble
  EXPECT_EQ(hex_value('7'), 7);
  EXPECT_EQ(hex_value('c'), 12);
  EXPECT_EQ(hex_value('C'), 12);
  EXPECT_EQ(hex_value('g'), -1);
  EXPECT_EQ(hex_value(' '), -1);
  std::string out = "x";
  append_hex_byte(out, 0x0f);
  EXPECT_EQ(out, "x0f");
}

TEST(Hex, RejectsWhatIsNotHex) {
  EXPECT_EQ(from_hex("abc"), std::nullopt);  // odd length
  EXPECT_EQ(from_hex("zz"), std::nullopt);
  EXPECT_EQ(from_hex("0x12"), std::nullopt);
  EXPECT_EQ(from_hex(""), std::vector<uint8_t>{});
  EXPECT_FALSE(is_lower_hex(""));
  EXPECT_FALSE(is_lower_hex("12 4"));
  EXPECT_TRUE(is_lower_hex("0123456789abcdef"));
}

}  // namespace
}  // namespace hpd
