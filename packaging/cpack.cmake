# The Debian package, built with `cpack -G DEB` in the build directory. Depends are computed
# from the binaries by dpkg-shlibdeps.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hpd)
set(CPACK_PACKAGE_VENDOR "hpd developers")
set(CPACK_PACKAGE_CONTACT "hpd maintainers <maintainers@users.noreply.a-seed-f84fe8f1.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "sampling profiler for native code (C, C++, Rust)")
set(CPACK_PACKAGE_DESCRIPTION
    "hpd samples the call stacks of native programs with perf_event and eBPF, measures each
thread's CPU and off-CPU time, resolves inline frames from DWARF, and writes profiles that open
in the Firefox Profiler, with a terminal report of exclusive and inclusive time per function.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://profiler.firefox.com")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
