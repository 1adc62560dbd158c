// demangle(): C++ Itanium, Rust legacy (hash stripped, escapes decoded) and Rust v0 names.
#include <gtest/gtest.h>

#include <string>

#include "hpd/base/demangle.h"
#include "hpd/symbolizer/symbolizer.h"
#include "test_util.h"

namespace hpd {
namespace {

// Builds a legacy Rust symbol from its path components: _ZN <len><comp>... 17h<hash>E.
std::string rust_legacy(std::initializer_list<std::string> components) {
  std::string out = "_ZN";
  for (const auto& c : components) out += std::to_string(c.size()) + c;
  return out + "17h0123456789abcdefE";
}

TEST(Demangle, ItaniumNames) {
  EXPECT_EQ(demangle("_ZN2ns3fooEi"), "ns::foo(int)");
  EXPECT_EQ(demangle("_ZNK11hpd_fixture6WidgetclEi"), "hpd_fixture::Widget::operator()(int) const");
  EXPECT_EQ(demangle("_ZN11hpd_fixture6scaledILi3EEEii"), "int hpd_fixture::scaled<3>(int)");
  EXPECT_EQ(demangle("_Z3fooi.isra.0"), "foo(int) (.isra.0)");
}

TEST(Demangle, PlainAndBrokenNamesComeBackUnchanged) {
  EXPECT_EQ(demangle("main"), "main");
  EXPECT_EQ(demangle(""), "");
  EXPECT_EQ(demangle("_Z"), "_Z");
  EXPECT_EQ(demangle("_Zfoo"), "_Zfoo");
  EXPECT_EQ(demangle("_RNvC"), "_RNvC");
  EXPECT_EQ(demangle("hpd_leaf.cold"), "hpd_leaf.cold");
}

TEST(Demangle, SuffixAfterAtIsKept) {
  EXPECT_EQ(demangle("_Z3fooi@plt"), "foo(int)@plt");
  EXPECT_EQ(demangle("puts@plt"), "puts@plt");
  EXPECT_EQ(demangle("memcpy@@GLIBC_2.14"), "memcpy@@GLIBC_2.14");
}

TEST(Demangle, SymbolVersionsAreFoundButPltIsNoVersion) {
  EXPECT_EQ(symbol_version_start("clock_nanosleep@@GLIBC_2.17"), 15u);
  EXPECT_EQ(symbol_version_start("__libc_start_main@GLIBC_2.2.5"), 17u);
  EXPECT_EQ(symbol_version_start("puts@plt"), std::string::npos);
  EXPECT_EQ(symbol_version_start("main"), std::string::npos);
  EXPECT_EQ(symbol_version_start("@odd"), std::string::npos);
}

// LLVM 14's demangler refuses this libstdc++ operator== (found in hpctl's own binary); libstdc++'s
// abi::__cxa_demangle, what c++filt uses, reads it.
TEST(Demangle, NamesLlvmRefusesGoThroughCxaDemangle) {
  const std::string name =
      "_ZSteqIcEN9__gnu_cxx11__enable_ifIXsrSt9__is_charIT_E7__valueEbE6__typeERKNSt7__cxx1112basic_"
      "stringIS3_St11char_traitsIS3_ESaIS3_EEESE_";
  // c++filt's answer, verbatim.
  const std::string expected =
      "__gnu_cxx::__enable_if<std::__is_char<char>::__value, bool>::__type std::operator==<char>("
      "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&, "
      "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)";
  EXPECT_EQ(demangle(name), expected);
  EXPECT_EQ(demangle(name + ".isra.0"), expected + " [clone .isra.0]");
}

TEST(Demangle, RustLegacyStripsHashAndDecodesEscapes) {
  EXPECT_EQ(demangle(rust_legacy({"core", "fmt", "Formatter", "pad"})), "core::fmt::Formatter::pad");
  EXPECT_EQ(demangle(rust_legacy(
                {"_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$", "drop"})),
            "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop");
  EXPECT_EQ(demangle(rust_legacy({"std", "rt", "lang_start", "_$u7b$$u7b$closure$u7d$$u7d$"})),
            "std::rt::lang_start::{{closure}}");
  // An LLVM-added suffix does not hide the hash.
  EXPECT_EQ(demangle(rust_legacy({"a", "b"}) + ".llvm.12345678"), "a::b");
  // Without the 17h<16 hex> tail it is plain Itanium.
  EXPECT_EQ(demangle("_ZN1a1bE"), "a::b");
}

TEST(Demangle, RustEscapesInAlreadyDemangledNames) {
  EXPECT_EQ(decode_rust_legacy_escapes("core::ptr::drop_in_place$LT$std..env..ArgsOs$GT$"),
            "core::ptr::drop_in_place<std::env::ArgsOs>");
  EXPECT_EQ(decode_rust_legacy_escapes("_$LT$T$u20$as$u20$core..convert..Into$LT$U$GT$$GT$::into"),
            "<T as core::convert::Into<U>>::into");
  // Names without escapes stay as they are, "..." included.
  EXPECT_EQ(decode_rust_legacy_escapes("printf(char const*, ...)"), "printf(char const*, ...)");
  EXPECT_EQ(decode_rust_legacy_escapes("a$weird$name"), "a$weird$name");
}

TEST(Demangle, RustV0) {
  EXPECT_EQ(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
  EXPECT_EQ(demangle("_RNvNtCs1234_7mycrate3bar3baz"), "mycrate::bar::baz");
}

#ifdef FIXTURE_RUST_LEGACY
// Real rustc output: every function symbol of the fixture demangles, hash-free, to its path.
TEST(Demangle, RealRustSymbolsBothManglings) {
  for (const char* path : {FIXTURE_RUST_LEGACY, FIXTURE_RUST_V0}) {
    SCOPED_TRACE(path);
    bool saw_marker = false, saw_method = false;
    for (const auto& s : test::nm_functions(path)) {
      const std::string d = demangle(s.name);
      if (d == "rust_fixture::hpd_marker_function") saw_marker = true;
      if (d == "rust_fixture::Wrapper<T>::hpd_generic_method" ||
          d == "<rust_fixture::Wrapper<u32>>::hpd_generic_method") {
        saw_method = true;
      }
      if (s.name.rfind("_R", 0) == 0 || s.name.rfind("_ZN", 0) == 0) {
        EXPECT_NE(d, s.name) << "not demangled";
        EXPECT_EQ(d.find("::h0"), std::string::npos) << d;  // no legacy hash left (rough check)
      }
    }
    EXPECT_TRUE(saw_marker);
    EXPECT_TRUE(saw_method);
  }
}

// Legacy Rust names agree with binutils' Rust demangler (nm --demangle) on the whole binary.
TEST(Demangle, RustLegacyMatchesBinutils) {
  const auto raw = test::nm_functions(FIXTURE_RUST_LEGACY, false);
  const auto shown = test::nm_functions(FIXTURE_RUST_LEGACY, true);
  ASSERT_EQ(raw.size(), shown.size());
  size_t v0 = 0, v0_equal = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i].name.rfind("_R", 0) != 0) continue;
    ++v0;
    if (demangle(raw[i].name) == shown[i].name) ++v0_equal;
  }
  // The v0 symbols of std (LLVM's and binutils' v0 demanglers format a few things differently).
  EXPECT_GT(v0, 100u);
  EXPECT_GT(v0_equal * 10, v0 * 9) << v0_equal << " of " << v0;
  ASSERT_EQ(raw.size(), shown.size());
  size_t compared = 0, equal = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i].name.rfind("_ZN", 0) != 0 || raw[i].name.find("17h") == std::string::npos) continue;
    ++compared;
    if (demangle(raw[i].name) == shown[i].name)
      ++equal;
    else
      ADD_FAILURE() << raw[i].name << ": ours " << demangle(raw[i].name) << " binutils " << shown[i].name;
  }
  EXPECT_GE(compared, 2u);  // std itself ships v0-mangled in rustc 1.95; ours are legacy
  EXPECT_EQ(equal, compared);
}
#endif

// C++ names agree with llvm-symbolizer's demangling of the same fixture.
TEST(Demangle, CppMatchesLlvmCxxfilt) {
  if (!test::have_tool("llvm-cxxfilt-14") && !test::have_tool("llvm-cxxfilt"))
    GTEST_SKIP() << "no llvm-cxxfilt";
  const std::string tool = test::have_tool("llvm-cxxfilt-14") ? "llvm-cxxfilt-14" : "llvm-cxxfilt";
  size_t compared = 0;
  for (const auto& s : test::nm_functions(FIXTURE_CPP)) {
    if (s.name.rfind("_Z", 0) != 0) continue;
    std::string expected = test::run(tool + " '" + s.name + "'");
    while (!expected.empty() && expected.back() == '\n') expected.pop_back();
    EXPECT_EQ(demangle(s.name), expected);
    ++compared;
  }
  EXPECT_GT(compared, 5u);
}

}  // namespace
}  // namespace hpd
