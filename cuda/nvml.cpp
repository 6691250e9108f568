#include "cuda/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace ktune::cuda {
namespace {

// The few NVML entry points ktune calls, declared from NVML's documented ABI (nvml.h is not part
// of the CUDA toolkit packages ktune builds with). nvmlReturn_t is an int; NVML_SUCCESS is 0.
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlInit = int (*)();
using NvmlShutdown = int (*)();
using NvmlHandleByUuid = int (*)(const char*, NvmlDevice*);
using NvmlIsMig = int (*)(NvmlDevice, unsigned*);
using NvmlParentOfMig = int (*)(NvmlDevice, NvmlDevice*);
using NvmlClockInfo = int (*)(NvmlDevice, int, unsigned*);
using NvmlEventReasons = int (*)(NvmlDevice, unsigned long long*);
using NvmlErrorString = const char* (*)(int);
constexpr int k_nvml_success = 0;
constexpr int k_clock_sm = 1;  // NVML_CLOCK_SM
constexpr int k_clock_mem = 2; // NVML_CLOCK_MEM

struct Library {
  void* handle = nullptr;
  std::string error;
  NvmlInit init = nullptr;
  NvmlShutdown shutdown = nullptr;
  NvmlHandleByUuid by_uuid = nullptr;
  NvmlIsMig is_mig = nullptr;
  NvmlParentOfMig parent = nullptr;
  NvmlClockInfo clock = nullptr;
  NvmlEventReasons reasons = nullptr;
  NvmlErrorString error_string = nullptr;
};

template <typename F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(::dlsym(handle, name));
}

// Loaded and initialised once per process; kept until exit (like libcuda).
const Library& library() {
  static const Library loaded = [] {
    Library lib;
    ::dlerror();
    lib.handle = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      const char* why = ::dlerror();
      lib.error = why != nullptr ? why : "libnvidia-ml.so.1: dlopen failed";
      return lib;
    }
    lib.init = symbol<NvmlInit>(lib.handle, "nvmlInit_v2");
    lib.shutdown = symbol<NvmlShutdown>(lib.handle, "nvmlShutdown");
    lib.by_uuid = symbol<NvmlHandleByUuid>(lib.handle, "nvmlDeviceGetHandleByUUID");
    lib.is_mig = symbol<NvmlIsMig>(lib.handle, "nvmlDeviceIsMigDeviceHandle");
    lib.parent = symbol<NvmlParentOfMig>(lib.handle, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    lib.clock = symbol<NvmlClockInfo>(lib.handle, "nvmlDeviceGetClockInfo");
    lib.reasons = symbol<NvmlEventReasons>(lib.handle, "nvmlDeviceGetCurrentClocksEventReasons");
    if (lib.reasons == nullptr) {
      lib.reasons = symbol<NvmlEventReasons>(lib.handle, "nvmlDeviceGetCurrentClocksThrottleReasons");
    }
    lib.error_string = symbol<NvmlErrorString>(lib.handle, "nvmlErrorString");
    if (lib.init == nullptr || lib.by_uuid == nullptr || lib.clock == nullptr) {
      lib.error = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByUUID or nvmlDeviceGetClockInfo";
      return lib;
    }
    if (const int rc = lib.init(); rc != k_nvml_success) {
      lib.error = "nvmlInit_v2 failed: " +
                  std::string(lib.error_string != nullptr ? lib.error_string(rc) : std::to_string(rc).c_str());
    }
    return lib;
  }();
  return loaded;
}

std::string nvml_error(const Library& lib, const char* call, int rc) {
  return std::string(call) + " failed: " +
         (lib.error_string != nullptr ? std::string(lib.error_string(rc)) : std::to_string(rc));
}

} // namespace

std::vector<std::string> clock_event_names(std::uint64_t events) {
  static constexpr std::pair<std::uint64_t, std::string_view> k_names[] = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks_setting"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clock_setting"},
  };
  std::vector<std::string> out;
  for (int bit = 0; bit < 64; ++bit) {
    const std::uint64_t mask = std::uint64_t{1} << bit;
    if ((events & mask) == 0) continue;
    const auto* named = std::find_if(std::begin(k_names), std::end(k_names),
                                     [mask](const auto& n) { return n.first == mask; });
    if (named != std::end(k_names)) {
      out.emplace_back(named->second);
    } else {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(mask));
      out.emplace_back(hex);
    }
  }
  return out;
}

bool clocks_settled(const std::vector<ClockReading>& readings, std::size_t window, double tolerance) {
  if (window == 0 || readings.size() < window) return false;
  unsigned low = ~0u, high = 0;
  for (auto it = readings.end() - static_cast<std::ptrdiff_t>(window); it != readings.end(); ++it) {
    if (!it->known) return false;
    low = std::min(low, it->sm_mhz);
    high = std::max(high, it->sm_mhz);
  }
  return high > 0 && static_cast<double>(high - low) <= tolerance * static_cast<double>(high);
}

struct NvmlClocks::State {
  NvmlDevice device = nullptr;
  std::string reason;
};

NvmlClocks::NvmlClocks(const std::string& uuid) : m_state(std::make_unique<State>()) {
  const Library& lib = library();
  if (!lib.error.empty()) {
    m_state->reason = lib.error;
    return;
  }
  NvmlDevice device = nullptr;
  if (const int rc = lib.by_uuid(uuid.c_str(), &device); rc != k_nvml_success) {
    m_state->reason = nvml_error(lib, ("nvmlDeviceGetHandleByUUID(" + uuid + ")").c_str(), rc);
    return;
  }
  unsigned mig = 0;
  if (lib.is_mig != nullptr && lib.parent != nullptr && lib.is_mig(device, &mig) == k_nvml_success && mig != 0) {
    NvmlDevice parent = nullptr;
    if (const int rc = lib.parent(device, &parent); rc != k_nvml_success) {
      m_state->reason = nvml_error(lib, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", rc);
      return;
    }
    device = parent;
  }
  m_state->device = device;
}

NvmlClocks::~NvmlClocks() = default;

bool NvmlClocks::available() const { return m_state->device != nullptr; }

const std::string& NvmlClocks::reason() const { return m_state->reason; }

ClockReading NvmlClocks::read() const {
  ClockReading r;
  if (m_state->device == nullptr) return r;
  const Library& lib = library();
  if (lib.clock(m_state->device, k_clock_sm, &r.sm_mhz) != k_nvml_success ||
      lib.clock(m_state->device, k_clock_mem, &r.mem_mhz) != k_nvml_success) {
    return ClockReading{};
  }
  unsigned long long events = 0;
  if (lib.reasons != nullptr && lib.reasons(m_state->device, &events) == k_nvml_success) r.events = events;
  r.known = true;
  return r;
}

bool uuid_is_mig(const std::string& hex_uuid) {
  const Library& lib = library();
  if (lib.error.empty()) {
    NvmlDevice device = nullptr;
    if (lib.by_uuid(("GPU-" + hex_uuid).c_str(), &device) == k_nvml_success) return false;
    if (lib.by_uuid(("MIG-" + hex_uuid).c_str(), &device) == k_nvml_success) return true;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible != nullptr && std::string_view(visible).find("MIG-") != std::string_view::npos;
}

} // namespace ktune::cuda
