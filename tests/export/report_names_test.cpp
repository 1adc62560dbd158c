// Names shortened to the report's function column (export/src/report/names.h) on names as hpd's
// demangler writes them: nested templates, operators, lambdas, Rust paths and hashes.
#include "report/names.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "hpd/base/demangle.h"

namespace hpd::report_names {
namespace {

// Real symbols of a C++ program (g++ 12, libstdc++), demangled as hpd does.
const std::string kPushBack = demangle("_ZNSt6vectorIiSaIiEE9push_backERKi");
const std::string kSelect1st = demangle(
    "_ZNKSt10_Select1stISt4pairIKNSt7__cxx1112basic_stringIcSt11char_"
    "traitsIcESaIcEEESt6vectorIdSaIdEEEEclERKSB_");
const std::string kFunctionCall = demangle("_ZNKSt8functionIFiiEEclEi");
const std::string kStreamInt = demangle("_ZNSolsEi");
const std::string kStreamCString = demangle("_ZStlsISt11char_traitsIcEERSt13basic_ostreamIcT_ES5_PKc");

TEST(ReportNamesTest, TheDemanglerWritesWhatTheseTestsRead) {
  EXPECT_EQ(kPushBack, "std::vector<int, std::allocator<int> >::push_back(int const&)");
  EXPECT_EQ(kFunctionCall, "std::function<int (int)>::operator()(int) const");
  EXPECT_EQ(kStreamInt, "std::ostream::operator<<(int)");
}

TEST(ReportNamesTest, WholeWhenItFits) {
  EXPECT_EQ(shorten(kPushBack, kPushBack.size()), kPushBack);
  EXPECT_EQ(shorten("main", 4), "main");
}

TEST(ReportNamesTest, TemplateArgumentsGoFirstDeepestFirst) {
  EXPECT_EQ(shorten(kPushBack, 59), "std::vector<int, std::allocator<…> >::push_back(int const&)");
  EXPECT_EQ(shorten(kPushBack, 40), "std::vector<…>::push_back(int const&)");
}

TEST(ReportNamesTest, ThenParameterLists) {
  EXPECT_EQ(shorten(kPushBack, 30), "std::vector<…>::push_back(…)");
  EXPECT_EQ(shorten(kSelect1st, 40), "std::_Select1st<…>::operator()(…) const");
}

TEST(ReportNamesTest, ThenACutInTheMiddleThatKeepsTheFunctionsName) {
  const std::string s = shorten(kPushBack, 20);
  EXPECT_EQ(display_width(s), 20u);
  EXPECT_NE(s.find("…"), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - 14), "push_back(…)") << s;
  EXPECT_EQ(s.substr(0, 3), "std") << s;
}

TEST(ReportNamesTest, OperatorsAreNotBrackets) {
  EXPECT_EQ(shorten(kStreamInt, 27), "std::ostream::operator<<(…)");
  EXPECT_EQ(shorten(kFunctionCall, 38), "std::function<…>::operator()(…) const");
  // operator<< with its own template arguments and a return type that holds some.
  EXPECT_EQ(kStreamCString,
            "std::basic_ostream<char, std::char_traits<char> >& std::operator<<<std::char_traits<char> "
            ">(std::basic_ostream<char, std::char_traits<char> >&, char const*)");
  EXPECT_EQ(shorten(kStreamCString, 80),
            "std::basic_ostream<…>& std::operator<<<…>(std::basic_ostream<…>&, char const*)");
  EXPECT_EQ(shorten("foo<int>::operator->() const", 26), "foo<…>::operator->() const");
  EXPECT_EQ(shorten("Vec<int>::operator<=(Vec<int> const&) const", 39),
            "Vec<…>::operator<=(Vec<…> const&) const");
}

TEST(ReportNamesTest, Lambdas) {
  // LLVM's spelling (hpd's demangler) and GCC's (c++filt, other tools' profiles).
  EXPECT_EQ(demangle("_ZZ4mainENKUliE_clEi"), "main::'lambda'(int)::operator()(int) const");
  EXPECT_EQ(shorten(demangle("_ZZ4mainENKUliE_clEi"), 38), "main::'lambda'(…)::operator()(…) const");
  const std::string gcc1 =
      "std::vector<int, std::allocator<int> > run<int>(int)::{lambda(int)#1}::operator()(int) const";
  const std::string gcc2 =
      "std::vector<int, std::allocator<int> > run<int>(int)::{lambda(int)#2}::operator()(int) const";
  EXPECT_EQ(shorten(gcc1, 70), "std::vector<…> run<…>(int)::{lambda(int)#1}::operator()(int) const");
  EXPECT_EQ(shorten(gcc1, 60), "std::vector<…> run<…>(…)::{lambda(…)#1}::operator()(…) const");
  const std::vector<std::string> both = shorten_distinct({gcc1, gcc2}, 40);
  EXPECT_NE(both[0], both[1]);
}

TEST(ReportNamesTest, RustPathsAndHashes) {
  const std::string drop = "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop::h0123456789abcdef";
  EXPECT_EQ(shorten(drop, 60), "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop");
  // The qualified path stays; the arguments inside it go.
  EXPECT_EQ(shorten(drop, 51), "<alloc::vec::Vec<…> as core::ops::drop::Drop>::drop");
  const std::string s = shorten(drop, 30);
  EXPECT_EQ(display_width(s), 30u);
  EXPECT_EQ(s.substr(s.size() - 11), "Drop>::drop") << s;
  EXPECT_EQ(shorten("core::ptr::drop_in_place::<alloc::vec::Vec<u8>>", 30), "core::ptr::drop_in_place::<…>");
  EXPECT_EQ(shorten("core::ptr::mut_ptr::<impl *mut T>::add::h0123456789abcdef", 40),
            "core::ptr::mut_ptr::<impl *mut T>::add");
  // Rust's legacy mangling, demangled by hpd (which drops the hash itself; other tools' names keep it).
  const std::string legacy = demangle(
      "_ZN70_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h0123456789abcdefE");
  EXPECT_EQ(legacy, "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop");
  EXPECT_EQ(shorten(legacy, 51), "<alloc::vec::Vec<…> as core::ops::drop::Drop>::drop");
}

TEST(ReportNamesTest, NeverWiderThanAsked) {
  const std::vector<std::string> names = {kPushBack,      kSelect1st,
                                          kFunctionCall,  kStreamInt,
                                          kStreamCString, "a<b<c<d<e>>>>::f(g<h>, (anonymous namespace)::i)"};
  for (size_t width = 1; width < 120; ++width) {
    for (const std::string& n : names)
      EXPECT_LE(display_width(shorten(n, width)), width) << n << " " << width;
    for (const std::string& s : shorten_distinct(names, width)) EXPECT_LE(display_width(s), width) << s;
  }
}

TEST(ReportNamesTest, DifferentFunctionsNeverLookTheSame) {
  const std::string d = "Matrix<std::map<std::string, std::vector<double>>>::multiply(int)";
  const std::string f = "Matrix<std::map<std::string, std::vector<float>>>::multiply(int)";
  const std::string other = "Matrix<int>::transpose()";
  for (size_t width = 12; width < 70; ++width) {
    const std::vector<std::string> s = shorten_distinct({d, f, d, other}, width);
    EXPECT_NE(s[0], s[1]) << width;
    EXPECT_EQ(s[0], s[2]);
    EXPECT_LE(display_width(s[0]), width);
    EXPECT_LE(display_width(s[1]), width);
  }
  // Where elision alone tells them apart, it is used: overloads keep their parameters.
  const std::vector<std::string> o =
      shorten_distinct({"std::vector<int>::at(int)", "std::vector<int>::at(long)"}, 24);
  EXPECT_EQ(o[0], "std::vector<…>::at(int)");
  EXPECT_EQ(o[1], "std::vector<…>::at(long)");
}

}  // namespace
}  // namespace hpd::report_names
