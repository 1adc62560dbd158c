# Install rules of the files in packaging/: bash completion, and the Debian copyright, changelog and
# lintian overrides (installed by every install, not only into the package, so `cmake --install`
# into a staging root yields the same tree the .deb holds, /etc aside).

# Where bash-completion looks for completions under our prefix: its pkg-config file knows, with its
# own prefix replaced by ours (a /usr/local install must not write into /usr).
set(HPD_BASH_COMPLETION_DIR "" CACHE STRING
    "Where the bash completion of hpctl is installed (relative to the prefix, or absolute)")
if(NOT HPD_BASH_COMPLETION_DIR)
  set(HPD_BASH_COMPLETION_DIR ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
  if(PKG_CONFIG_EXECUTABLE)
    execute_process(
      COMMAND ${PKG_CONFIG_EXECUTABLE} --define-variable=prefix=${CMAKE_INSTALL_PREFIX}
              --define-variable=datadir=${CMAKE_INSTALL_FULL_DATADIR} --variable=completionsdir bash-completion
      OUTPUT_VARIABLE completionsdir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE status ERROR_QUIET)
    if(status EQUAL 0 AND completionsdir MATCHES "^${CMAKE_INSTALL_PREFIX}/(.+)$")
      set(HPD_BASH_COMPLETION_DIR ${CMAKE_MATCH_1})
    endif()
  endif()
endif()
install(FILES ${CMAKE_CURRENT_LIST_DIR}/completion/hpctl DESTINATION ${HPD_BASH_COMPLETION_DIR})

# Debian wants the changelog gzip-compressed with no timestamp (gzip -n), as the man pages are.
configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog @ONLY)
set(HPD_CHANGELOG_GZ ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.gz)
add_custom_command(OUTPUT ${HPD_CHANGELOG_GZ}
  COMMAND sh -c "gzip -9n -c '${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog' > '${HPD_CHANGELOG_GZ}'"
  DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog VERBATIM)
add_custom_target(debian_changelog ALL DEPENDS ${HPD_CHANGELOG_GZ})
install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/copyright ${HPD_CHANGELOG_GZ} DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME ${PROJECT_NAME})
