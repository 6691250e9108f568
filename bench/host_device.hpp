#pragma once
// The CPU device as seen by this process: /proc/cpuinfo, online cores, host compiler version.
#include "core/device.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ktune {

// cpu_device_from over /proc/cpuinfo (empty text when unreadable), the online core count
// (sysconf(_SC_NPROCESSORS_ONLN), else std::thread::hardware_concurrency(), at least 1) and
// `compiler_version`.
[[nodiscard]] DeviceInfo detect_cpu_device(const std::string& compiler_version);

inline constexpr std::size_t k_default_last_level_cache_bytes = std::size_t{32} << 20;

// Size in bytes of the last-level cache: sysconf L3, else sysconf L2, else the largest cache of
// the highest level under /sys/devices/system/cpu/cpu0/cache, else 32 MiB.
[[nodiscard]] std::size_t last_level_cache_bytes();

// A sysfs cache size ("32K", "1024K", "32M", "8192", surrounding whitespace allowed) in bytes;
// nullopt for anything else or zero.
[[nodiscard]] std::optional<std::size_t> parse_cache_size(std::string_view text);

} // namespace ktune
