#pragma once
// A device's identity in two halves (docs/ARCHITECTURE.md § Keys). The fingerprint hashes a
// device's whole `details`; of those details,
//   environment: the software a measurement ran under -- the host compiler (CPU), the CUDA
//                driver and nvrtc/toolkit versions (CUDA) -- plus ktune's measurement protocol
//                version (k_measurement_protocol_version);
//   hardware:    everything else (CPU: model, ISA flags, cores; CUDA: name, compute capability,
//                arch, SMs, memory, L2): what makes two boards the same.
// Two fingerprints with one hardware id are the same hardware under two environments: a winner
// tuned under one is stale, not gone, under the other. Pure; the kernel's source hash is the
// other part of an environment and stays in every result's key.
#include <nlohmann/json.hpp>

#include <string>

namespace ktune {

// Bumped when a change to how ktune measures makes earlier times incomparable with new ones.
inline constexpr int k_measurement_protocol_version = 1;

struct DeviceIdentity {
  std::string hardware_id;       // hash_hex of `hardware`'s canonical dump
  nlohmann::json hardware;       // the details that are not environment, as stored
  nlohmann::json environment;    // {"compiler": ...} or {"driver_version": ..., "nvrtc_version": ...},
                                 // and "measurement_protocol"
};

// The details' keys that are environment, not hardware.
[[nodiscard]] bool is_environment_key(const std::string& key);

// Splits stored device details (an object; anything else is treated as an empty one).
[[nodiscard]] DeviceIdentity split_device_identity(const nlohmann::json& details);

// What changed from one environment to another, for people: "g++ 12.2.0 -> 13.1.0" style, one
// "key: old -> new" per changed key joined by ", " (a key only one side has shows "none");
// "" when nothing differs.
[[nodiscard]] std::string environment_change(const nlohmann::json& from, const nlohmann::json& to);

} // namespace ktune
