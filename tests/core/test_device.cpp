#include "core/device.hpp"

#include <catch2/catch.hpp>

namespace {

const char* const k_cpuinfo = "processor\t: 0\n"
                              "vendor_id\t: GenuineIntel\n"
                              "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                              "flags\t\t: fpu vme sse2 avx2 sse4_2 avx fma avx512f amx_tile hypervisor pti\n"
                              "bugs\t\t: spectre_v1\n"
                              "\n"
                              "processor\t: 1\n"
                              "model name\t: Some Other CPU\n"
                              "flags\t\t: fpu avx512bw\n"
                              "\n";

} // namespace

TEST_CASE("core/device: cpu_device_from", "[core][device]") {
  const ktune::DeviceInfo cpu = ktune::cpu_device_from(k_cpuinfo, 8, "g++ (Debian 12.2.0-14) 12.2.0\n");
  SECTION("details from the first processor block") {
    CHECK(cpu.name == "cpu");
    CHECK(cpu.details["kind"] == "cpu");
    CHECK(cpu.details["model"] == "Intel(R) Xeon(R) Platinum 8480+");
    CHECK(cpu.details["flags"] == nlohmann::json{"amx_tile", "avx", "avx2", "avx512f", "fma", "sse4_2"});
    CHECK(cpu.details["cores"] == 8);
    CHECK(cpu.details["compiler"] == "g++ (Debian 12.2.0-14) 12.2.0");
  }
  SECTION("fingerprint is stable and depends on every input") {
    CHECK(cpu.fingerprint.size() == 32);
    CHECK(cpu.fingerprint == ktune::cpu_device_from(k_cpuinfo, 8, "g++ (Debian 12.2.0-14) 12.2.0").fingerprint);
    CHECK(cpu.fingerprint != ktune::cpu_device_from(k_cpuinfo, 4, "g++ (Debian 12.2.0-14) 12.2.0").fingerprint);
    CHECK(cpu.fingerprint != ktune::cpu_device_from(k_cpuinfo, 8, "clang 16").fingerprint);
    CHECK(cpu.fingerprint != ktune::cpu_device_from("model name : X\nflags : avx\n", 8,
                                                    "g++ (Debian 12.2.0-14) 12.2.0").fingerprint);
  }
  SECTION("irrelevant flags do not change the fingerprint") {
    const std::string other_bugs = "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                                   "flags\t\t: avx pti avx2 sse4_2 fma avx512f amx_tile md_clear\n";
    CHECK(cpu.fingerprint == ktune::cpu_device_from(other_bugs, 8, "g++ (Debian 12.2.0-14) 12.2.0").fingerprint);
  }
  SECTION("Arm Features and a missing model name") {
    const auto arm = ktune::cpu_device_from("processor : 0\nFeatures : fp asimd sve evtstrm\n\n", 4, "gcc");
    CHECK(arm.details["model"] == "unknown");
    CHECK(arm.details["flags"] == nlohmann::json{"asimd", "sve"});
  }
  SECTION("empty cpuinfo") {
    const auto empty = ktune::cpu_device_from("", 1, "");
    CHECK(empty.details["flags"].empty());
    CHECK(empty.fingerprint.size() == 32);
  }
}
