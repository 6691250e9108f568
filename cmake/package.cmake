# `make package` (cmake --build --preset release --target package): a Debian package
# ktune_<version>_<arch>.deb of the tree cmake/install.cmake describes, installed under /usr.
# Dependencies come from dpkg-shlibdeps; the package is checked by tests/packaging
# (dpkg-deb --contents/--info, lintian).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ktune)
set(CPACK_PACKAGE_VENDOR "ktune")
set(KTUNE_DEB_MAINTAINER "ktune maintainers <ktune-maintainers@example.org>" CACHE STRING
    "Maintainer field of the Debian package (name <email>)")
set(CPACK_PACKAGE_CONTACT "${KTUNE_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "autotuning daemon for CUDA and CPU kernels")
set(CPACK_PACKAGE_DESCRIPTION
  "ktuned JIT-compiles candidate configurations of kernel families in worker\n\
processes, benchmarks them with failure isolation and keeps the winners in\n\
SQLite. Runtimes look the winners up over a Unix socket with the client\n\
library (C, C++) or the Python client; the ktune command tunes, sweeps,\n\
exports and imports tables.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Run time: the host compiler builds CPU candidates; python3 for the Python client.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "g++, python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "bash-completion")
# libktune_client is a public shared library: the ldconfig trigger Debian policy asks for.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/cmake/debian/triggers)

# Files Debian policy asks for in every package: copyright and a compressed changelog.
set(KTUNE_DEB_DOC ${CMAKE_BINARY_DIR}/debian-doc)
file(MAKE_DIRECTORY ${KTUNE_DEB_DOC})
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/changelog.in ${KTUNE_DEB_DOC}/changelog @ONLY)
add_custom_command(OUTPUT ${KTUNE_DEB_DOC}/changelog.gz
  COMMAND gzip -9nc ${KTUNE_DEB_DOC}/changelog > ${KTUNE_DEB_DOC}/changelog.gz
  DEPENDS ${KTUNE_DEB_DOC}/changelog)
add_custom_target(ktune_deb_doc ALL DEPENDS ${KTUNE_DEB_DOC}/changelog.gz)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright ${KTUNE_DEB_DOC}/changelog.gz
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/ktune)

include(CPack)
