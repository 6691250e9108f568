#pragma once
// The CPU device as seen by this process: /proc/cpuinfo, online cores, host compiler version.
#include "core/device.hpp"

#include <string>

namespace ktune {

[[nodiscard]] DeviceInfo detect_cpu_device(const std::string& compiler_version);

// Size in bytes of the last-level cache (sysconf, else /sys, else 32 MiB).
[[nodiscard]] std::size_t last_level_cache_bytes();

} // namespace ktune
