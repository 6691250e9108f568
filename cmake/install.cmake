# `cmake --install` (and the Debian packages, cmake/package.cmake): a relocatable tree, split into
# the install components the packages are made of (`cmake --install --component C` installs one).
#   component ktune  (package ktune)
#     bin/                      ktune, ktuned, ktune-worker
#     share/ktune/              kernels/ (the shipped families), ktuned.toml (the documented
#                               defaults ktuned reads without --config), sweeps/ (the shipped sweep
#                               files), deploy/ (systemd units, Kubernetes files, Dockerfile)
#     lib/systemd/user/         ktuned.service, ktuned.socket
#     share/doc/ktune/          README.md, docs/*.md
#     share/man/man1/           ktune.1 and ktune-COMMAND.1 per command group (`ktune man-pages`),
#                               ktuned.1, ktune-worker.1 (help2man, when installed)
#     share/bash-completion/completions/ktune, share/zsh/vendor-completions/_ktune,
#     share/fish/vendor_completions.d/ktune.fish (from `ktune completion SHELL`)
#   component lib    (package libktune-client0)
#     lib/<multiarch>/          libktune_client.so.0, libktune_client.so.<version>
#   component dev    (package libktune-client-dev)
#     lib/<multiarch>/          libktune_client.so (the link), libktune_client.a, cmake/ktune,
#                               pkgconfig/ktune.pc
#     include/ktune/            client.h, client.hpp
#   component python (package python3-ktune-client)
#     lib/python3/dist-packages/ktune_client (where Debian's python3 imports packages from /usr;
#                               from another prefix put that directory on PYTHONPATH, or pip
#                               install client/python)
# Every binary finds share/ktune from its own location, so the tree can be moved; ktune.pc and
# ktuneConfig.cmake locate the prefix from their own location too.
include(CMakePackageConfigHelpers)

set(KTUNE_SHARE_DIR ${CMAKE_INSTALL_DATADIR}/ktune)
set(KTUNE_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/ktune)
set(KTUNE_PYTHON_DIR lib/python3/dist-packages CACHE STRING
    "Where the Python client is installed, relative to the prefix")
# Every rule below without a COMPONENT of its own belongs to the ktune package.
set(CMAKE_INSTALL_DEFAULT_COMPONENT_NAME ktune)

install(TARGETS ktuned ktune ktune-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ktune_lookup_client_shared ktune_lookup_client_static EXPORT ktuneTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/client/include/ktune/client.h
              ${PROJECT_SOURCE_DIR}/client/include/ktune/client.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ktune COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/python/ktune_client
        DESTINATION ${KTUNE_PYTHON_DIR} COMPONENT python
        PATTERN __pycache__ EXCLUDE PATTERN *.pyc EXCLUDE)

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

# Man pages, compressed as Debian wants them: ktune.1 and one page per command group generated
# from the CLI definition (cli/man_pages.hpp), ktuned.1 and ktune-worker.1 from their --help
# (help2man, Debian package help2man).
find_program(GZIP gzip REQUIRED)
set(KTUNE_MAN_DIR ${CMAKE_BINARY_DIR}/man)
add_custom_command(
  OUTPUT ${KTUNE_MAN_DIR}/ktune.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${KTUNE_MAN_DIR}/ktune
  COMMAND ktune man-pages ${KTUNE_MAN_DIR}/ktune > /dev/null
  COMMAND ${GZIP} -9nf ${KTUNE_MAN_DIR}/ktune/*.1
  COMMAND ${CMAKE_COMMAND} -E touch ${KTUNE_MAN_DIR}/ktune.stamp
  DEPENDS ktune
  COMMENT "Generating the ktune man pages")
set(man_outputs ${KTUNE_MAN_DIR}/ktune.stamp)
install(DIRECTORY ${KTUNE_MAN_DIR}/ktune/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        FILES_MATCHING PATTERN "*.1.gz")
find_program(HELP2MAN help2man)
if(HELP2MAN)
  add_custom_command(
    OUTPUT ${KTUNE_MAN_DIR}/ktuned.1.gz
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr "--name=the ktune autotuning daemon"
            --output=${KTUNE_MAN_DIR}/ktuned.1 $<TARGET_FILE:ktuned>
    COMMAND ${GZIP} -9nf ${KTUNE_MAN_DIR}/ktuned.1
    DEPENDS ktuned
    COMMENT "Generating the ktuned(1) man page" VERBATIM)
  # ktune-worker has no --version: ktuned runs it, a user only for `--run-repro` (ktune repro).
  add_custom_command(
    OUTPUT ${KTUNE_MAN_DIR}/ktune-worker.1.gz
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION}
            "--name=the worker process of ktuned (compiles and benchmarks one candidate at a time)"
            --output=${KTUNE_MAN_DIR}/ktune-worker.1 $<TARGET_FILE:ktune-worker>
    COMMAND ${GZIP} -9nf ${KTUNE_MAN_DIR}/ktune-worker.1
    DEPENDS ktune-worker
    COMMENT "Generating the ktune-worker(1) man page" VERBATIM)
  list(APPEND man_outputs ${KTUNE_MAN_DIR}/ktuned.1.gz ${KTUNE_MAN_DIR}/ktune-worker.1.gz)
  install(FILES ${KTUNE_MAN_DIR}/ktuned.1.gz ${KTUNE_MAN_DIR}/ktune-worker.1.gz
          DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no ktuned(1), ktune-worker(1) (scripts/install-deps.sh installs it)")
endif()
add_custom_target(ktune_man ALL DEPENDS ${man_outputs})

# The client library's CMake package and pkg-config file, both relocatable (package
# libktune-client-dev).
set(KTUNE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ktune)
install(EXPORT ktuneTargets NAMESPACE ktune:: DESTINATION ${KTUNE_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/client/ktuneConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ktuneConfig.cmake INSTALL_DESTINATION ${KTUNE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ktuneConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ktuneConfig.cmake ${CMAKE_BINARY_DIR}/ktuneConfigVersion.cmake
        DESTINATION ${KTUNE_CMAKE_DIR} COMPONENT dev)

file(RELATIVE_PATH KTUNE_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" KTUNE_PC_TO_PREFIX "${KTUNE_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/client/ktune.pc.in ${CMAKE_BINARY_DIR}/ktune.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ktune.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)
