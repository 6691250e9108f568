#include "core/device_identity.hpp"

#include <catch2/catch.hpp>

using namespace ktune;
using nlohmann::json;

namespace {

json cpu_details(const std::string& compiler) {
  return {{"kind", "cpu"}, {"model", "AMD EPYC"}, {"flags", {"avx2", "fma"}}, {"cores", 2},
          {"compiler", compiler}};
}

json cuda_details(const std::string& driver, const std::string& nvrtc) {
  return {{"kind", "cuda"}, {"name", "NVIDIA H100 80GB HBM3"}, {"arch", "sm_90"}, {"sm_count", 132},
          {"driver_version", driver}, {"nvrtc_version", nvrtc}};
}

} // namespace

TEST_CASE("device identity: the same hardware under two compilers has one hardware id",
          "[core][device]") {
  const DeviceIdentity gcc12 = split_device_identity(cpu_details("g++ 12.2.0"));
  const DeviceIdentity gcc13 = split_device_identity(cpu_details("g++ 13.1.0"));
  CHECK(gcc12.hardware_id == gcc13.hardware_id);
  CHECK(gcc12.environment != gcc13.environment);
  CHECK(gcc12.environment["compiler"] == "g++ 12.2.0");
  CHECK(gcc12.environment["measurement_protocol"] == k_measurement_protocol_version);
  CHECK_FALSE(gcc12.hardware.contains("compiler"));
  CHECK(gcc12.hardware["model"] == "AMD EPYC");
  CHECK(environment_change(gcc12.environment, gcc13.environment) == "compiler: g++ 12.2.0 -> g++ 13.1.0");
  CHECK(environment_change(gcc12.environment, gcc12.environment).empty());

  SECTION("other hardware is another id") {
    json other = cpu_details("g++ 12.2.0");
    other["cores"] = 4;
    CHECK(split_device_identity(other).hardware_id != gcc12.hardware_id);
  }
}

TEST_CASE("device identity: a CUDA board's driver and toolkit are its environment", "[core][device]") {
  const DeviceIdentity before = split_device_identity(cuda_details("580.65", "12.8"));
  const DeviceIdentity after = split_device_identity(cuda_details("580.159", "12.8"));
  CHECK(before.hardware_id == after.hardware_id);
  CHECK(environment_change(before.environment, after.environment) == "driver_version: 580.65 -> 580.159");
  CHECK(before.hardware.contains("arch"));
  CHECK_FALSE(before.hardware.contains("nvrtc_version"));
  CHECK(environment_change(json::object(), json{{"toolkit_version", "13.0"}}) == "toolkit_version: none -> 13.0");
  // Details that are no object (a damaged row) still split: no hardware, the protocol only.
  const DeviceIdentity odd = split_device_identity(json("text"));
  CHECK(odd.hardware.empty());
  CHECK(odd.environment.size() == 1);
}
