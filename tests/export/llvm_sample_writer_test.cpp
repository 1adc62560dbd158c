// The LLVM sample profile writer on sites whose profile is known by hand, and LLVM's discriminator
// decoding on values its encoder produces.
#include <gtest/gtest.h>

#include <sstream>

#include "hpd/export/llvm_sample.h"
#include "hpd/symbolizer/sample_lines.h"

namespace hpd {
namespace {

TEST(LlvmSampleWriter, FoldsInlineChainsIntoNestedCallSites) {
  // f (declared at line 10) runs line 12 (5 samples) and line 11 (its entry, 1 sample); at line 14,
  // discriminator 2, it inlines g (declared at 40), which runs line 43 (7 samples) and inlines h
  // (declared at 70) at line 41, which runs line 69, one line before its declaration (2 samples).
  const std::vector<SampledSite> sites = {
      {{{"_Z1fv", 10, 12, 0}}, 5},
      {{{"_Z1fv", 10, 11, 0}}, 1},
      {{{"_Z1fv", 10, 14, 2}, {"_Z1gv", 40, 43, 0}}, 7},
      {{{"_Z1fv", 10, 14, 2}, {"_Z1gv", 40, 41, 0}, {"_Z1hv", 70, 69, 3}}, 2},
      {{{"_Z1kv", 5, 0, 0}}, 4},  // line 0: in the total only
      {{}, 3},                    // nothing found: left out
  };
  const LlvmSampleProfile p = build_llvm_sample_profile(sites, {{"_Z1fv", {11, 0}}});
  std::ostringstream out;
  write_llvm_sample_text(p, out, {"test"});
  EXPECT_EQ(out.str(),
            "# test\n"
            "_Z1fv:15:1\n"
            " 1: 1\n"
            " 2: 5\n"
            " 4.2: _Z1gv:9\n"
            "  3: 7\n"
            "  1: _Z1hv:2\n"
            "   65535.3: 2\n"
            "_Z1kv:4:0\n");
  EXPECT_EQ(p.samples, 22u);
  EXPECT_EQ(p.unlocated, 7u);
  std::ostringstream order;
  write_symbol_order(p, order);
  EXPECT_EQ(order.str(), "_Z1fv\n_Z1kv\n");
  // The extensible binary form of the same profile: byte for byte what LLVM 14's
  // `llvm-profdata merge --sample --extbinary` writes from the text above (its output, in hex).
  const std::string expected_hex =
      "84e4d0b1f4c994a85367070000000000000001000000000000000000000000000000f200000000000000550000000000"
      "000002000000000000000000000000000000470100000000000019000000000000000600000000000000000000000000"
      "000060010000000000000100000000000000040000000000000000000000000000008901000000000000050000000000"
      "000020000000000000000000000000000000610100000000000028000000000000000300000000000000000000000000"
      "000089010000000000000000000000000000050000000000000000000000000000008e01000000000000000000000000"
      "00000f0701040210904e0000a08d060701c09a0c0701e0a712070180b5180701a0c21e0701c0cf240502e0dc2a050280"
      "ea300502a0f7360203f0fd390203b0b63c0203d8fc3c0203dc833d0203b6843d0203bf843d0203045f5a316676005f5a"
      "316776005f5a316876005f5a316b76000001000f02010001000200050001040201090103000700010100020201ffff03"
      "0302000000030400000200000323";
  std::ostringstream binary;
  write_llvm_sample_extbinary(p, binary);
  std::string hex;
  for (const unsigned char c : binary.str()) {
    static const char kDigits[] = "0123456789abcdef";
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  EXPECT_EQ(hex, expected_hex);
  // Every function's declaration line, inlined ones too, for hpctl pgo-check.
  EXPECT_EQ(declaration_line_comments(p),
            (std::vector<std::string>{"decl-line _Z1fv 10", "decl-line _Z1gv 40", "decl-line _Z1hv 70",
                                      "decl-line _Z1kv 5"}));
}

TEST(LlvmSampleWriter, SymbolOrderPutsCallersNextToTheirCalleesByExactCounts) {
  // Samples: hot 100, mid 50, caller 40, small 15; callee0 is never sampled.
  const std::vector<SampledSite> sites = {
      {{{"hot", 1, 2, 0}}, 100},
      {{{"mid", 1, 2, 0}}, 50},
      {{{"caller", 1, 2, 0}}, 40},
      {{{"small", 1, 2, 0}}, 15},
  };
  const LlvmSampleProfile p = build_llvm_sample_profile(sites, {});
  EXPECT_EQ(symbol_order(p), (std::vector<std::string>{"hot", "mid", "caller", "small"}));
  // caller calls callee0 1000 times and small 10 times; mid calls small 3 times (not its most
  // frequent caller); recursion and edges without a caller order nothing.
  const std::vector<NamedCallEdge> edges = {
      {"caller", "small", 6}, {"caller", "callee0", 1000}, {"mid", "small", 3},
      {"caller", "small", 4}, {"hot", "hot", 99},          {"", "mid", 500},
  };
  // caller, then callee0 (the most calls), then small; their cluster's 55 samples go before mid's 50.
  EXPECT_EQ(symbol_order(p, edges), (std::vector<std::string>{"hot", "caller", "callee0", "small", "mid"}));
  // Were mid's calls of small the most frequent, small would follow mid.
  const std::vector<NamedCallEdge> to_mid = {
      {"caller", "callee0", 1000}, {"mid", "small", 30}, {"caller", "small", 10}};
  EXPECT_EQ(symbol_order(p, to_mid), (std::vector<std::string>{"hot", "mid", "small", "caller", "callee0"}));
  std::ostringstream order;
  write_symbol_order(p, order, edges);
  EXPECT_EQ(order.str(), "hot\ncaller\ncallee0\nsmall\nmid\n");
}

TEST(LlvmSampleWriter, BaseDiscriminatorsDecodeLlvmsPrefixEncoding) {
  // DILocation::encodeDiscriminator(base, duplication factor, copy id) for a few values.
  EXPECT_EQ(base_discriminator(0), 0u);
  EXPECT_EQ(base_discriminator(2), 1u);  // base 1
  EXPECT_EQ(base_discriminator(8), 4u);  // base 4
  EXPECT_EQ(base_discriminator(1), 0u);  // base 0 with more components after it
  EXPECT_EQ(base_discriminator(0x7e), 0x1fu);
  EXPECT_EQ(base_discriminator(0xc0), 0x20u);       // base 32: ((32 & 0xfe0) << 1 | 0x20) << 1
  EXPECT_EQ(base_discriminator(2 | (1 << 7)), 1u);  // base 1, then a duplication factor
}

}  // namespace
}  // namespace hpd
