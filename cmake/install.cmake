# `cmake --install` (and the Debian package, cmake/package.cmake): a relocatable tree.
#   bin/                      ktune, ktuned, ktune-worker
#   lib/                      libktune_client (shared and static), cmake/ktune, pkgconfig/ktune.pc
#   include/ktune/            client.h, client.hpp
#   share/ktune/              kernels/ (the shipped families), ktuned.toml (the documented
#                             defaults ktuned reads without --config), deploy/ (systemd units,
#                             Kubernetes files, Dockerfile), python/ (the client)
#   lib/systemd/user/         ktuned.service, ktuned.socket
#   share/doc/ktune/          README.md, docs/*.md
#   share/man/man1/           ktune.1, ktuned.1 (help2man, when installed)
#   share/bash-completion/completions/ktune, share/zsh/vendor-completions/_ktune,
#   share/fish/vendor_completions.d/ktune.fish (from `ktune completion SHELL`)
# Every binary finds share/ktune from its own location, so the tree can be moved; ktune.pc and
# ktuneConfig.cmake locate the prefix from their own location too.
include(CMakePackageConfigHelpers)

set(KTUNE_SHARE_DIR ${CMAKE_INSTALL_DATADIR}/ktune)
set(KTUNE_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/ktune)

install(TARGETS ktuned ktune ktune-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ktune_lookup_client_shared ktune_lookup_client_static EXPORT ktuneTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/client/include/ktune/client.h
              ${PROJECT_SOURCE_DIR}/client/include/ktune/client.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ktune)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/python/ktune_client
        DESTINATION ${KTUNE_SHARE_DIR}/python
        PATTERN __pycache__ EXCLUDE)

# Shipped data.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/kernels_src/ DESTINATION ${KTUNE_SHARE_DIR}/kernels)
install(FILES ${PROJECT_SOURCE_DIR}/configs/ktuned.toml DESTINATION ${KTUNE_SHARE_DIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/sweeps DESTINATION ${KTUNE_SHARE_DIR})
# The unit names absolute paths: written at install time, for the prefix installed to (CPack
# installs to /usr, `cmake --install --prefix P` to P).
install(CODE "
  set(KTUNE_BIN_DIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  set(KTUNE_SHARE_DIR_FULL \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/ktune\")
  set(KTUNE_DOC_DIR_FULL \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/doc/ktune\")
  configure_file(\"${PROJECT_SOURCE_DIR}/configs/deploy/ktuned.service.in\"
                 \"${CMAKE_BINARY_DIR}/deploy/ktuned.service\" @ONLY)")
set(KTUNE_UNITS ${CMAKE_BINARY_DIR}/deploy/ktuned.service
                ${PROJECT_SOURCE_DIR}/configs/deploy/ktuned.socket)
install(FILES ${KTUNE_UNITS} ${PROJECT_SOURCE_DIR}/configs/deploy/k8s-sweep.yaml
              ${PROJECT_SOURCE_DIR}/configs/deploy/k8s-merge.yaml
              ${PROJECT_SOURCE_DIR}/configs/deploy/Dockerfile
        DESTINATION ${KTUNE_SHARE_DIR}/deploy)
install(FILES ${KTUNE_UNITS} DESTINATION lib/systemd/user)

# Documentation.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${KTUNE_DOC_DIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${KTUNE_DOC_DIR})

# Shell completion, generated from the CLI definition by the built ktune.
set(KTUNE_COMPLETION_DIR ${CMAKE_BINARY_DIR}/completion)
add_custom_command(
  OUTPUT ${KTUNE_COMPLETION_DIR}/ktune.bash ${KTUNE_COMPLETION_DIR}/_ktune
         ${KTUNE_COMPLETION_DIR}/ktune.fish
  COMMAND ${CMAKE_COMMAND} -E make_directory ${KTUNE_COMPLETION_DIR}
  COMMAND ktune completion bash > ${KTUNE_COMPLETION_DIR}/ktune.bash
  COMMAND ktune completion zsh > ${KTUNE_COMPLETION_DIR}/_ktune
  COMMAND ktune completion fish > ${KTUNE_COMPLETION_DIR}/ktune.fish
  DEPENDS ktune
  COMMENT "Generating shell completion for ktune")
add_custom_target(ktune_completion ALL
  DEPENDS ${KTUNE_COMPLETION_DIR}/ktune.bash ${KTUNE_COMPLETION_DIR}/_ktune
          ${KTUNE_COMPLETION_DIR}/ktune.fish)
install(FILES ${KTUNE_COMPLETION_DIR}/ktune.bash RENAME ktune
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
install(FILES ${KTUNE_COMPLETION_DIR}/_ktune DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions)
install(FILES ${KTUNE_COMPLETION_DIR}/ktune.fish
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fish/vendor_completions.d)

# Man pages from --help and --version (help2man, Debian package help2man), compressed as
# Debian wants them.
find_program(HELP2MAN help2man)
find_program(GZIP gzip)
if(HELP2MAN AND GZIP)
  set(KTUNE_MAN_DIR ${CMAKE_BINARY_DIR}/man)
  set(man_pages)
  foreach(program ktune ktuned)
    if(program STREQUAL ktune)
      set(summary "tune kernels with the ktuned daemon and look up their winners")
    else()
      set(summary "the ktune autotuning daemon")
    endif()
    add_custom_command(
      OUTPUT ${KTUNE_MAN_DIR}/${program}.1.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${KTUNE_MAN_DIR}
      COMMAND ${HELP2MAN} --no-info --no-discard-stderr --name=${summary}
              --output=${KTUNE_MAN_DIR}/${program}.1 $<TARGET_FILE:${program}>
      COMMAND ${GZIP} -9nf ${KTUNE_MAN_DIR}/${program}.1
      DEPENDS ${program}
      COMMENT "Generating the ${program}(1) man page")
    list(APPEND man_pages ${KTUNE_MAN_DIR}/${program}.1.gz)
  endforeach()
  add_custom_target(ktune_man ALL DEPENDS ${man_pages})
  install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no man pages (scripts/install-deps.sh installs it)")
endif()

# The client library's CMake package and pkg-config file, both relocatable.
set(KTUNE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ktune)
install(EXPORT ktuneTargets NAMESPACE ktune:: DESTINATION ${KTUNE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/client/ktuneConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ktuneConfig.cmake INSTALL_DESTINATION ${KTUNE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ktuneConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ktuneConfig.cmake ${CMAKE_BINARY_DIR}/ktuneConfigVersion.cmake
        DESTINATION ${KTUNE_CMAKE_DIR})

file(RELATIVE_PATH KTUNE_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" KTUNE_PC_TO_PREFIX "${KTUNE_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/client/ktune.pc.in ${CMAKE_BINARY_DIR}/ktune.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ktune.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
