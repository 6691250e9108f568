#pragma once
// Where a test finds the source tree's files (kernel families, fault kernels, configs) and the
// binaries it drives (ktuned, ktune, ktune-worker), decided at run time so that a test binary
// keeps working when copied with them (the GPU bundle, scripts/gpu-pack.sh):
//   source_dir(): $KTUNE_TEST_SOURCE_DIR, else the source tree found from the test's own location
//                 (KTUNE_TEST_SOURCE_FROM_BIN, the path from the bin directory to the sources);
//   bin_dir():    $KTUNE_TEST_BIN_DIR, else the directory of the running test binary (every test
//                 binary is built next to ktuned).
// No absolute path of the build machine is compiled in. Both are computed once per process.
#include <string>

namespace ktune::test {

[[nodiscard]] const std::string& source_dir();
[[nodiscard]] const std::string& bin_dir();

// source_dir() + relative ("/kernels_src"), bin_dir() + relative ("/ktuned").
[[nodiscard]] std::string source_path(const std::string& relative);
[[nodiscard]] std::string bin_path(const std::string& relative);

} // namespace ktune::test
