#include "bench/host_device.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <thread>

using namespace ktune;

TEST_CASE("detect_cpu_device", "[bench][host_device]") {
  const DeviceInfo device = detect_cpu_device("c++ (Debian 12.2.0-14) 12.2.0");
  CHECK(device.name == "cpu");
  CHECK(device.fingerprint.size() == 32);
  CHECK(device.fingerprint.find_first_not_of("0123456789abcdef") == std::string::npos);
  REQUIRE(device.details.contains("cores"));
  CHECK(device.details["cores"].get<int>() >= 1);

  SECTION("the same machine and compiler give the same fingerprint") {
    CHECK(detect_cpu_device("c++ (Debian 12.2.0-14) 12.2.0").fingerprint == device.fingerprint);
  }
  SECTION("another compiler gives another fingerprint") {
    CHECK(detect_cpu_device("clang version 14.0.6").fingerprint != device.fingerprint);
  }
}

TEST_CASE("last_level_cache_bytes", "[bench][host_device]") {
  const std::size_t bytes = last_level_cache_bytes();
  CHECK(bytes >= 64 * 1024);          // no real last-level cache is smaller
  CHECK(bytes <= std::size_t{1} << 36);
}

TEST_CASE("parse_cache_size", "[bench][host_device]") {
  CHECK(parse_cache_size("32K\n") == std::size_t{32} << 10);
  CHECK(parse_cache_size("1024K") == std::size_t{1} << 20);
  CHECK(parse_cache_size("32M") == std::size_t{32} << 20);
  CHECK(parse_cache_size(" 8192 ") == std::size_t{8192});
  CHECK_FALSE(parse_cache_size(""));
  CHECK_FALSE(parse_cache_size("0K"));
  CHECK_FALSE(parse_cache_size("32X"));
  CHECK_FALSE(parse_cache_size("K"));
}
