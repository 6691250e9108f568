#include "tests/support/paths.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef KTUNE_TEST_SOURCE_FROM_BIN
#error "KTUNE_TEST_SOURCE_FROM_BIN (the path from the bin directory to the sources) must be defined"
#endif

namespace ktune::test {
namespace {

std::string from_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

std::filesystem::path own_directory() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : exe.parent_path();
}

} // namespace

const std::string& bin_dir() {
  static const std::string dir = [] {
    std::string env = from_env("KTUNE_TEST_BIN_DIR");
    return env.empty() ? own_directory().string() : env;
  }();
  return dir;
}

const std::string& source_dir() {
  static const std::string dir = [] {
    std::string env = from_env("KTUNE_TEST_SOURCE_DIR");
    if (!env.empty()) return env;
    return (std::filesystem::path(bin_dir()) / KTUNE_TEST_SOURCE_FROM_BIN).lexically_normal().string();
  }();
  return dir;
}

std::string source_path(const std::string& relative) { return source_dir() + relative; }

std::string bin_path(const std::string& relative) { return bin_dir() + relative; }

} // namespace ktune::test
