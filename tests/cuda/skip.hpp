#pragma once
// Skipping a test with a reason: prints "SKIPPED: <reason>" and exits with status 4, which ctest
// reports as skipped (SKIP_RETURN_CODE 4 in ktune_add_test). Each discovered test case runs in
// its own process, so only the calling test ends.
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ktune::test {

[[noreturn]] inline void skip_test(const std::string& reason) {
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
  std::exit(4);
}

} // namespace ktune::test
