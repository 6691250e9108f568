# `make package` (cmake --build --preset release --target package): the Debian packages of the
# install components of cmake/install.cmake, installed under /usr, split as Debian splits a
# library and its tools:
#   ktune_<v>_<arch>.deb                 ktuned, ktune, ktune-worker, shipped data, units, docs,
#                                        man pages, completion
#   libktune-client0_<v>_<arch>.deb      libktune_client.so.0 in /usr/lib/<multiarch> (shlibs,
#                                        ldconfig trigger)
#   libktune-client-dev_<v>_<arch>.deb   headers, libktune_client.so and .a, CMake and pkg-config
#                                        files; depends on libktune-client0 of the same version.
#                                        find_package(ktune) needs no other -dev package for
#                                        ktune::client; the static library's users need
#                                        libsqlite3-dev and libtomlplusplus-dev (Suggests)
#   python3-ktune-client_<v>_all.deb     the Python client in /usr/lib/python3/dist-packages,
#                                        byte-compiled on install (py3compile) as dh_python3 does
# Run-time dependencies come from dpkg-shlibdeps. tests/packaging checks the packages
# (check_deb.sh: fields, contents, lintian) and installs them in a clean root
# (clean_root.sh: find_package and pkg-config builds of examples/runtime_lookup, import
# ktune_client with Debian's python3).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ktune)
set(CPACK_PACKAGE_VENDOR "ktune")
set(KTUNE_DEB_MAINTAINER "ktune maintainers <ktune-maintainers@example.org>" CACHE STRING
    "Maintainer field of the Debian packages (name <email>)")
set(CPACK_PACKAGE_CONTACT "${KTUNE_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SOURCE ktune)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file for the package with the shared library (libktune-client0): packages built
# against it depend on libktune-client0 (>= this version).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ktune lib dev python)
set(CPACK_COMPONENTS_GROUPING IGNORE)
set(KTUNE_DEB_VERSION ${PROJECT_VERSION})

# ktune: the daemon, the CLI and the worker.
set(CPACK_DEBIAN_KTUNE_PACKAGE_NAME ktune)
set(CPACK_DEBIAN_KTUNE_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_KTUNE_PACKAGE_SECTION devel)
# Run time: the host compiler builds CPU candidates.
set(CPACK_DEBIAN_KTUNE_PACKAGE_DEPENDS "g++")
set(CPACK_DEBIAN_KTUNE_PACKAGE_SUGGESTS "bash-completion, python3-ktune-client")
set(CPACK_COMPONENT_KTUNE_DESCRIPTION "autotuning daemon for CUDA and CPU kernels
ktuned JIT-compiles candidate configurations of kernel families in worker
processes, benchmarks them with failure isolation and keeps the winners in
SQLite. Runtimes look the winners up over a Unix socket with the client
library (C, C++) or the Python client; the ktune command tunes, sweeps,
exports and imports tables.")

# libktune-client0: the shared runtime lookup library (SONAME libktune_client.so.0).
set(CPACK_DEBIAN_LIB_PACKAGE_NAME libktune-client0)
set(CPACK_DEBIAN_LIB_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# Debian policy 8.1.2: a public shared library activates the ldconfig trigger (triggers); its
# postinst and postrm, which do nothing, keep CPack from adding explicit ldconfig calls (lintian:
# maintscript-calls-ldconfig), which the trigger replaces; lintian-overrides says so to lintian.
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/debian/libktune-client0/triggers
    ${PROJECT_SOURCE_DIR}/cmake/debian/libktune-client0/postinst
    ${PROJECT_SOURCE_DIR}/cmake/debian/libktune-client0/postrm)
set(CPACK_COMPONENT_LIB_DESCRIPTION "ktune runtime lookup client library
libktune_client looks up tuned kernel configurations: from ktuned over its
Unix socket, else read-only from its SQLite database, else the kernel
family's default configuration. C API with a C++ wrapper.")

# libktune-client-dev: what a program building against the library needs.
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libktune-client-dev)
set(CPACK_DEBIAN_DEV_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libktune-client0 (= ${KTUNE_DEB_VERSION})")
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "libsqlite3-dev, libtomlplusplus-dev, pkg-config, cmake")
set(CPACK_COMPONENT_DEV_DESCRIPTION "ktune runtime lookup client library (development files)
Headers (ktune/client.h, ktune/client.hpp), the shared library link, the
static library, the CMake package (find_package(ktune): ktune::client,
ktune::client_static) and the pkg-config file (ktune). Linking the static
library also needs SQLite and toml++ (libsqlite3-dev, libtomlplusplus-dev).")

# python3-ktune-client: the pure-Python client, for Debian's python3.
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-ktune-client)
set(CPACK_DEBIAN_PYTHON_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3 (>= 3.11)")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/debian/python3-ktune-client/postinst
    ${PROJECT_SOURCE_DIR}/cmake/debian/python3-ktune-client/prerm)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "ktune runtime lookup client for Python 3
The ktune_client module looks up tuned kernel configurations as
libktune_client does: from ktuned over its Unix socket, else read-only from
its SQLite database, else the kernel family's default configuration.
Standard library only.")

# Files Debian policy asks for in every package: /usr/share/doc/<package>/copyright and a
# compressed changelog.
set(KTUNE_DEB_DOC ${CMAKE_BINARY_DIR}/debian-doc)
file(MAKE_DIRECTORY ${KTUNE_DEB_DOC})
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/changelog.in ${KTUNE_DEB_DOC}/changelog @ONLY)
add_custom_command(OUTPUT ${KTUNE_DEB_DOC}/changelog.gz
  COMMAND gzip -9nc ${KTUNE_DEB_DOC}/changelog > ${KTUNE_DEB_DOC}/changelog.gz
  DEPENDS ${KTUNE_DEB_DOC}/changelog)
add_custom_target(ktune_deb_doc ALL DEPENDS ${KTUNE_DEB_DOC}/changelog.gz)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/libktune-client0/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME libktune-client0 COMPONENT lib)
foreach(component ktune lib dev python)
  string(TOUPPER ${component} upper)
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright ${KTUNE_DEB_DOC}/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME}
          COMPONENT ${component})
endforeach()

include(CPack)
