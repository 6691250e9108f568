#pragma once
// The clocks of a GPU while ktune measures on it, through NVML (libnvidia-ml.so.1, loaded at run
// time like libcuda: ktune never links it). NVML is optional: without the library, or for a board
// it does not know, every reading is "unknown" with the reason, never an error.
//
// Not thread-safe: one NvmlClocks per bench worker, used from its one thread.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ktune::cuda {

// One reading. `known` is false when NVML could not answer (then the rest is 0).
struct ClockReading {
  bool known = false;
  unsigned sm_mhz = 0;
  unsigned mem_mhz = 0;
  std::uint64_t events = 0; // nvmlClocksEventReasons bits: why the clocks are below their maximum
};

// The names of the nvmlClocksEventReasons bits set in `events` ("gpu_idle", "sw_power_cap",
// "hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
// "hw_power_brake_slowdown", "applications_clocks_setting", "display_clock_setting"; an unknown
// bit as "0x..."), in bit order. Pure.
[[nodiscard]] std::vector<std::string> clock_event_names(std::uint64_t events);

// True when every reading in `readings` is known and their SM clocks are within `tolerance`
// (a fraction of the largest) of each other: the clocks have settled. False for fewer than
// `window` readings (the last `window` are compared). Pure.
[[nodiscard]] bool clocks_settled(const std::vector<ClockReading>& readings, std::size_t window = 3,
                                  double tolerance = 0.01);

class NvmlClocks {
public:
  // NVML's device of the board named `uuid` ("GPU-..." as cuda_uuid_string writes it, or a MIG
  // instance's "MIG-...", whose parent board's clocks are read). Never fails: without NVML or
  // without such a board every read() is unknown and reason() says why.
  explicit NvmlClocks(const std::string& uuid);
  ~NvmlClocks();
  NvmlClocks(const NvmlClocks&) = delete;
  NvmlClocks& operator=(const NvmlClocks&) = delete;

  [[nodiscard]] bool available() const;
  [[nodiscard]] const std::string& reason() const; // why not available; empty when it is
  [[nodiscard]] ClockReading read() const;

private:
  struct State;
  std::unique_ptr<State> m_state;
};

// Whether NVML knows `hex_uuid` (the 32 hex digits of a CUuuid, grouped 8-4-4-4-12 without a
// prefix) as a MIG instance ("MIG-" + it) rather than a board ("GPU-" + it). Without NVML: whether
// this process's CUDA_VISIBLE_DEVICES names MIG instances. The driver API cannot tell the two
// apart (cuDeviceGetUuid returns a MIG instance's own UUID in the same 16 bytes).
[[nodiscard]] bool uuid_is_mig(const std::string& hex_uuid);

} // namespace ktune::cuda
