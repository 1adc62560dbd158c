# Run by CPack (CPACK_PRE_BUILD_SCRIPTS) on the staged package tree: adds /etc/hpd/hpd.conf, which
# `cmake --install` does not write (it must not touch /etc of the machine that builds), but a
# package installs as a conffile. CPACK_HPD_CONF_SOURCE is set in cpack.cmake and reaches this
# script through CPackConfig.cmake, which carries every CPACK_ variable.
if(NOT CPACK_HPD_CONF_SOURCE OR NOT EXISTS "${CPACK_HPD_CONF_SOURCE}")
  return()
endif()
if(NOT CPACK_TEMPORARY_DIRECTORY)
  message(FATAL_ERROR "stage-etc.cmake: CPACK_TEMPORARY_DIRECTORY is not set; run it through cpack")
endif()
# Not file(INSTALL): CPack still has DESTDIR set here, and INSTALL would prefix it a second time.
file(MAKE_DIRECTORY "${CPACK_TEMPORARY_DIRECTORY}/etc/hpd")
file(COPY_FILE "${CPACK_HPD_CONF_SOURCE}" "${CPACK_TEMPORARY_DIRECTORY}/etc/hpd/hpd.conf")
file(CHMOD "${CPACK_TEMPORARY_DIRECTORY}/etc/hpd/hpd.conf" FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
