#include "core/device.hpp"

#include "core/hash.hpp"

#include <algorithm>
#include <array>

namespace ktune {
namespace {

// ISA features that change which code a compiler emits or how fast a kernel runs; everything
// else in /proc/cpuinfo (bug lists, virtualisation flags, power management) is left out so the
// fingerprint does not change with microcode or kernel updates. x86 "flags" and Arm "Features".
constexpr std::array<std::string_view, 30> k_performance_flags{
    "sse4_1",      "sse4_2",      "avx",          "avx2",        "fma",         "f16c",
    "bmi2",        "avx512f",     "avx512dq",     "avx512cd",    "avx512bw",    "avx512vl",
    "avx512ifma",  "avx512vbmi",  "avx512_vnni",  "avx512_bf16", "avx512_fp16", "avx_vnni",
    "amx_tile",    "amx_bf16",    "amx_int8",     "asimd",       "asimdhp",     "asimddp",
    "fphp",        "sve",         "sve2",         "i8mm",        "bf16",        "sme",
};

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

} // namespace

DeviceInfo cpu_device_from(std::string_view cpuinfo_text, int cores, std::string_view compiler_version) {
  std::string model;
  std::vector<std::string> flags;
  bool seen_model = false;
  bool seen_flags = false;

  std::size_t start = 0;
  while (start < cpuinfo_text.size()) {
    auto end = cpuinfo_text.find('\n', start);
    if (end == std::string_view::npos) end = cpuinfo_text.size();
    const std::string_view line = cpuinfo_text.substr(start, end - start);
    start = end + 1;
    if (trim(line).empty()) {
      // A blank line ends a processor block; only the first one is read.
      if (seen_model || seen_flags) break;
      continue;
    }
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = trim(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (key == "model name" && !seen_model) {
      model = std::string(value);
      seen_model = true;
    } else if ((key == "flags" || key == "Features") && !seen_flags) {
      seen_flags = true;
      std::size_t pos = 0;
      while (pos < value.size()) {
        auto space = value.find_first_of(" \t", pos);
        if (space == std::string_view::npos) space = value.size();
        const std::string_view flag = value.substr(pos, space - pos);
        if (!flag.empty() &&
            std::find(k_performance_flags.begin(), k_performance_flags.end(), flag) != k_performance_flags.end()) {
          flags.emplace_back(flag);
        }
        pos = space + 1;
      }
    }
  }
  std::sort(flags.begin(), flags.end());
  flags.erase(std::unique(flags.begin(), flags.end()), flags.end());

  DeviceInfo info;
  info.name = "cpu";
  info.details = {
      {"kind", "cpu"},
      {"model", model.empty() ? std::string("unknown") : model},
      {"flags", flags},
      {"cores", cores},
      {"compiler", std::string(trim(compiler_version))},
  };
  info.fingerprint = hash_hex(info.details.dump());
  return info;
}

} // namespace ktune
