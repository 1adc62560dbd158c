# The Debian package, built with `cpack -G DEB` in the build directory. Depends are computed
# from the binaries by dpkg-shlibdeps. tests/packaging/package_test.sh checks what it contains and
# runs lintian on it.
include(${CMAKE_CURRENT_LIST_DIR}/install.cmake)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hpd)
set(CPACK_PACKAGE_VENDOR "hpd developers")
set(CPACK_PACKAGE_CONTACT "hpd maintainers <maintainers@users.noreply.a-seed-f84fe8f1.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "sampling profiler for native code (C, C++, Rust)")
set(CPACK_PACKAGE_DESCRIPTION
    "hpd samples the call stacks of native programs with perf_event and eBPF,
measures each thread's CPU and off-CPU time, resolves inline frames from
DWARF, and writes profiles that open in the Firefox Profiler, with a terminal
report of exclusive and inclusive time per function.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Loaded with dlopen, so dpkg-shlibdeps cannot see them: libdebuginfod when DEBUGINFOD_URLS is set
# (hpd/symbolizer/debuginfod_client.h), libcurl for an OTLP push (session/src/otlp_push.cpp),
# Capstone for ARM64 code in hpctl open and annotate (cli/disassembler.cpp).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libdebuginfod1, libcurl4, libcapstone4")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)

# The service's files come from packaging/systemd (daemon/src/service installs the units and the
# sysusers entry); the maintainer scripts that create the group and enable hpd.socket ship only
# when there is a socket unit to enable.
set(CPACK_HPD_CONF_SOURCE ${CMAKE_CURRENT_LIST_DIR}/systemd/hpd.conf)
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_CURRENT_LIST_DIR}/debian/stage-etc.cmake)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "")
if(EXISTS ${CPACK_HPD_CONF_SOURCE})
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/packaging/conffiles "/etc/hpd/hpd.conf\n")
  list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_BINARY_DIR}/packaging/conffiles)
endif()
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/systemd/hpd.socket)
  foreach(script postinst prerm postrm)
    list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/debian/${script})
  endforeach()
endif()
include(CPack)
