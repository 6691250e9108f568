#pragma once
// Device identity. A fingerprint is the hash of everything that makes measurements comparable;
// a winner is only valid for the fingerprint it was measured on.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace ktune {

struct DeviceInfo {
  std::string name;          // "cpu", "cuda:0"
  std::string fingerprint;   // hash_hex over `details`' canonical dump
  nlohmann::json details;    // model, flags, cores, compiler, ...
  std::string uuid;          // the physical board ("GPU-…") for CUDA devices; empty for the CPU
};

// Builds the CPU device from /proc/cpuinfo text (model name and flags of the first processor),
// the online core count and the host compiler's version line. Pure: the caller reads the files.
// details = {"kind":"cpu","model":...,"flags":[...],"cores":N,"compiler":...}; "flags" keeps only
// the sorted ISA features that matter for performance (SSE4/AVX/AVX-512/AMX on x86, ASIMD/SVE
// on Arm; the fixed list is k_performance_flags in device.cpp), "flags" or "Features" lines alike.
[[nodiscard]] DeviceInfo cpu_device_from(std::string_view cpuinfo_text, int cores,
                                         std::string_view compiler_version);

} // namespace ktune
