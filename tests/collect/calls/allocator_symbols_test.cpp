// module_allocators on the allocators Debian ships (libc, jemalloc, tcmalloc, mimalloc): which entry
// points it finds, and which of those `--pid` probes call another probed one (`wraps`), as objdump
// shows them: libtcmalloc's posix_memalign, valloc and pvalloc call tc_memalign@plt (its memalign);
// no other function of these libraries calls another of its probed ones (glibc's realloc calls its
// malloc and free, but realloc is never flagged: inside it the probes look at nothing already).
#include "hpd/calls/allocator_symbols.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

namespace {

constexpr const char* kLibDir = "/usr/lib/x86_64-linux-gnu/";

// name -> wraps, for the C library's names the module defines.
std::map<std::string, bool> standard_wraps(const std::string& library) {
  std::map<std::string, bool> out;
  for (const hpd::calls::AllocatorFunction& f : hpd::calls::module_allocators(kLibDir + library).standard)
    out[f.name] = f.wraps;
  return out;
}

TEST(AllocatorSymbols, TcmallocsAlignedAllocatorsWrapItsMemalign) {
  for (const char* library : {"libtcmalloc_minimal.so.4", "libtcmalloc.so.4"}) {
    SCOPED_TRACE(library);
    const std::map<std::string, bool> wraps = standard_wraps(library);
    // memalign and aligned_alloc are one function (one per address: the first name is kept).
    const std::map<std::string, bool> expected = {
        {"malloc", false},        {"calloc", false},        {"realloc", false}, {"free", false},
        {"posix_memalign", true}, {"aligned_alloc", false}, {"valloc", true},   {"pvalloc", true}};
    EXPECT_EQ(wraps, expected);
  }
}

TEST(AllocatorSymbols, JemallocMimallocAndGlibcWrapNothing) {
  for (const char* library : {"libjemalloc.so.2", "libmimalloc.so.2", "libc.so.6"}) {
    SCOPED_TRACE(library);
    const std::map<std::string, bool> wraps = standard_wraps(library);
    EXPECT_GE(wraps.size(), 6u);
    EXPECT_TRUE(wraps.count("malloc") != 0 && wraps.count("free") != 0 && wraps.count("posix_memalign") != 0);
    for (const auto& [name, wrapping] : wraps) EXPECT_FALSE(wrapping) << name;
  }
}

}  // namespace
