#include "bench/host_device.hpp"
#include "core/file_io.hpp"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ktune {

namespace {

int online_cores() {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0) return static_cast<int>(online);
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware > 0 ? static_cast<int>(hardware) : 1;
}

// The largest cache of the highest level listed under `cache_dir` (index0, index1, ...).
std::optional<std::size_t> sysfs_last_level_cache(const std::filesystem::path& cache_dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(cache_dir, ec);
  if (ec) return std::nullopt;
  int best_level = -1;
  std::optional<std::size_t> best_size;
  for (const auto& entry : it) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    const std::string level_text = read_file((entry.path() / "level").string()).value_or(std::string());
    int level = 0;
    const auto [ptr, err] =
        std::from_chars(level_text.data(), level_text.data() + level_text.size(), level);
    if (err != std::errc{}) continue;
    const auto size = parse_cache_size(read_file((entry.path() / "size").string()).value_or(std::string()));
    if (!size) continue;
    if (level > best_level || (level == best_level && *size > best_size.value_or(0))) {
      best_level = level;
      best_size = size;
    }
  }
  return best_size;
}

} // namespace

std::optional<std::size_t> parse_cache_size(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  std::size_t value = 0;
  const auto [ptr, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err != std::errc{} || value == 0) return std::nullopt;
  const std::string_view suffix(ptr, static_cast<std::size_t>(text.data() + text.size() - ptr));
  std::size_t scale = 1;
  if (suffix.empty()) scale = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = std::size_t{1} << 10;
  else if (suffix == "M" || suffix == "MiB") scale = std::size_t{1} << 20;
  else if (suffix == "G" || suffix == "GiB") scale = std::size_t{1} << 30;
  else return std::nullopt;
  return value * scale;
}

DeviceInfo detect_cpu_device(const std::string& compiler_version) {
  return cpu_device_from(read_file("/proc/cpuinfo").value_or(std::string()), online_cores(), compiler_version);
}

std::size_t last_level_cache_bytes() {
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<std::size_t>(l3);
  const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 > 0) return static_cast<std::size_t>(l2);
  if (const auto size = sysfs_last_level_cache("/sys/devices/system/cpu/cpu0/cache")) return *size;
  return k_default_last_level_cache_bytes;
}

} // namespace ktune
