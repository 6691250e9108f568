#include "core/device_identity.hpp"

#include "core/hash.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <string_view>

namespace ktune {

namespace {

// Device detail keys that name software, not hardware (core/device.cpp's CPU details,
// bench/cuda_device.cpp's CUDA details).
constexpr std::array<std::string_view, 4> k_environment_keys{"compiler", "driver_version",
                                                             "nvrtc_version", "toolkit_version"};

std::string text_of(const nlohmann::json& value) {
  if (value.is_null()) return "none";
  return value.is_string() ? value.get<std::string>() : value.dump();
}

} // namespace

bool is_environment_key(const std::string& key) {
  return std::find(k_environment_keys.begin(), k_environment_keys.end(), key) != k_environment_keys.end();
}

DeviceIdentity split_device_identity(const nlohmann::json& details) {
  DeviceIdentity identity;
  identity.hardware = nlohmann::json::object();
  identity.environment = nlohmann::json::object();
  if (details.is_object()) {
    for (auto it = details.begin(); it != details.end(); ++it) {
      (is_environment_key(it.key()) ? identity.environment : identity.hardware)[it.key()] = it.value();
    }
  }
  identity.environment["measurement_protocol"] = k_measurement_protocol_version;
  identity.hardware_id = hash_hex(identity.hardware.dump());
  return identity;
}

std::string environment_change(const nlohmann::json& from, const nlohmann::json& to) {
  std::set<std::string> keys;
  for (const auto* side : {&from, &to}) {
    if (!side->is_object()) continue;
    for (auto it = side->begin(); it != side->end(); ++it) keys.insert(it.key());
  }
  std::string out;
  for (const std::string& key : keys) {
    const nlohmann::json a = from.is_object() && from.contains(key) ? from[key] : nlohmann::json();
    const nlohmann::json b = to.is_object() && to.contains(key) ? to[key] : nlohmann::json();
    if (a == b) continue;
    out += (out.empty() ? "" : ", ") + key + ": " + text_of(a) + " -> " + text_of(b);
  }
  return out;
}

} // namespace ktune
