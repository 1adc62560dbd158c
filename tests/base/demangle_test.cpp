// hpd_demangle on its own (what hpd_mip links instead of the symbolizer). The full demangling
// cases are in tests/symbolizer/demangle_test.cpp.
#include "hpd/base/demangle.h"

#include <gtest/gtest.h>

namespace hpd {
namespace {

TEST(Demangle, CxxRustAndPlainNames) {
  EXPECT_EQ(demangle("_ZN3foo3barEv"), "foo::bar()");
  EXPECT_EQ(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
  EXPECT_EQ(demangle("_ZN3foo3barEv@plt"), "foo::bar()@plt");
  EXPECT_EQ(demangle("main"), "main");
  EXPECT_EQ(demangle("_Znot_a_name"), "_Znot_a_name");
}

}  // namespace
}  // namespace hpd
