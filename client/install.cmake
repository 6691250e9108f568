# `cmake --install`: binaries, the lookup client library (shared and static) with its headers,
# ktuneConfig.cmake (imported targets ktune::client, the shared library, and
# ktune::client_static) and ktune.pc. Included from the top-level CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ktuned ktune ktune-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ktune_lookup_client_shared ktune_lookup_client_static EXPORT ktuneTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/client/include/ktune/client.h
              ${PROJECT_SOURCE_DIR}/client/include/ktune/client.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ktune)
install(FILES ${PROJECT_SOURCE_DIR}/client/python/ktune_client.py
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ktune/python)

set(KTUNE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ktune)
install(EXPORT ktuneTargets NAMESPACE ktune:: DESTINATION ${KTUNE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/client/ktuneConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ktuneConfig.cmake INSTALL_DESTINATION ${KTUNE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ktuneConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ktuneConfig.cmake ${CMAKE_BINARY_DIR}/ktuneConfigVersion.cmake
        DESTINATION ${KTUNE_CMAKE_DIR})

configure_file(${PROJECT_SOURCE_DIR}/client/ktune.pc.in ${CMAKE_BINARY_DIR}/ktune.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ktune.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
