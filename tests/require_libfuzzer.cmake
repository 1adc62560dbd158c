# The libFuzzer targets (*_fuzz_bounded in tests/capture, tests/daemon, tests/unwind, tests/collect/mip,
# tests/symbolizer/dwarf) are part of the suite: when clang++ or its libFuzzer runtime is missing, the
# configuration of the tests fails and says which Debian package to install, rather than building a
# suite without them (issue 29). Included by tests/CMakeLists.txt with HPD_FUZZ_CLANGXX set by
# find_program; also run as a script by the test libfuzzer_runtime_required:
#   cmake -DHPD_FUZZ_CLANGXX=PATH -P tests/require_libfuzzer.cmake
set(hpd_fuzz_fix "install it (packaging/install-deps.sh), or configure with -DHPD_BUILD_TESTS=OFF to build no tests")
if(NOT HPD_FUZZ_CLANGXX OR NOT EXISTS "${HPD_FUZZ_CLANGXX}")
  message(FATAL_ERROR "clang++ not found (Debian package clang-14): the libFuzzer targets of the test suite "
                      "cannot be built; ${hpd_fuzz_fix}")
endif()
execute_process(COMMAND ${HPD_FUZZ_CLANGXX} -print-file-name=libclang_rt.fuzzer-x86_64.a
  OUTPUT_VARIABLE HPD_LIBFUZZER_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
# clang prints the bare name back when it has no such file.
if(NOT IS_ABSOLUTE "${HPD_LIBFUZZER_RUNTIME}" OR NOT EXISTS "${HPD_LIBFUZZER_RUNTIME}")
  message(FATAL_ERROR "libFuzzer runtime not found (Debian package libclang-rt-14-dev): ${HPD_FUZZ_CLANGXX} "
                      "-print-file-name=libclang_rt.fuzzer-x86_64.a printed '${HPD_LIBFUZZER_RUNTIME}'; the "
                      "libFuzzer targets of the test suite cannot be built; ${hpd_fuzz_fix}")
endif()
