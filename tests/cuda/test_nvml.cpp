// NVML clock readings (cuda/nvml.hpp): the pure parts everywhere; without libnvidia-ml (this
// machine) every reading is unknown with the reason, never an error.
#include "cuda/nvml.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

using namespace ktune::cuda;

namespace {

ClockReading at(unsigned sm) { return ClockReading{true, sm, 2619, 0}; }

// Sets an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (m_old) ::setenv(m_name, m_old->c_str(), 1);
    else ::unsetenv(m_name);
  }

private:
  const char* m_name;
  std::optional<std::string> m_old;
};

} // namespace

TEST_CASE("clock event reasons are named in bit order", "[cuda][nvml]") {
  CHECK(clock_event_names(0).empty());
  CHECK(clock_event_names(0x1) == std::vector<std::string>{"gpu_idle"});
  CHECK(clock_event_names(0x4 | 0x40) == std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"});
  CHECK(clock_event_names(std::uint64_t{1} << 40) == std::vector<std::string>{"0x10000000000"});
}

TEST_CASE("clocks have settled when the last readings agree within the tolerance", "[cuda][nvml]") {
  // An idle H100 ramping up from 345 MHz to its boost clock.
  std::vector<ClockReading> ramp{at(345), at(1155), at(1755), at(1980)};
  CHECK_FALSE(clocks_settled(ramp));
  ramp.push_back(at(1980));
  CHECK_FALSE(clocks_settled(ramp));
  ramp.push_back(at(1965)); // within 1% of 1980
  CHECK(clocks_settled(ramp));
  CHECK_FALSE(clocks_settled({at(1980), at(1980)}));          // fewer than the window
  CHECK_FALSE(clocks_settled({at(1980), ClockReading{}, at(1980)})); // an unknown reading
  CHECK_FALSE(clocks_settled({at(1980), at(1900), at(1980)}));
  CHECK(clocks_settled({at(1980), at(1900), at(1980)}, 3, 0.05));
}

TEST_CASE("without NVML every reading is unknown, with the reason", "[cuda][nvml]") {
  NvmlClocks clocks("GPU-6f1c2e0a-9b3d-4102-a7ff-00102030405e");
  if (clocks.available()) {
    SUCCEED("this machine has NVML and such a board");
    return;
  }
  CHECK_FALSE(clocks.reason().empty());
  CHECK_FALSE(clocks.read().known);
}

TEST_CASE("a MIG instance is told from a board by NVML, else by CUDA_VISIBLE_DEVICES", "[cuda][nvml]") {
  NvmlClocks probe("GPU-00000000-0000-0000-0000-000000000000");
  if (probe.reason().find("libnvidia-ml") == std::string::npos &&
      probe.reason().find("nvmlInit") == std::string::npos) {
    SUCCEED("NVML is loaded here: it decides, and knows no such UUID");
    return;
  }
  const std::string hex = "6f1c2e0a-9b3d-4102-a7ff-00102030405e";
  {
    ScopedEnv env("CUDA_VISIBLE_DEVICES", "MIG-0b6c1e2f-1111-2222-3333-444455556666");
    CHECK(uuid_is_mig(hex));
  }
  {
    ScopedEnv env("CUDA_VISIBLE_DEVICES", "GPU-6f1c2e0a-9b3d-4102-a7ff-00102030405e");
    CHECK_FALSE(uuid_is_mig(hex));
  }
  {
    ScopedEnv env("CUDA_VISIBLE_DEVICES", nullptr);
    CHECK_FALSE(uuid_is_mig(hex));
  }
}
