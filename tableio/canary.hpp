#pragma once
// The speed canary in comparisons (daemon/canary.hpp takes the readings): how fast the machine
// was when a run was measured, so that a comparison with history can tell a machine that moved
// from a kernel that did. A machine's factor is now / then of its canary medians, the geometric
// mean of the compute-bound and the memory-bound kernel's ratios (> 1: slower now); a key's
// ratio divided by its device's factor is its normalised ratio. The verdicts themselves come from
// A/B measurements (daemon/ab_service.hpp), which need no normalising: the factor and the
// normalised ratios select what to confirm and tell the reader what the machine did.
#include "core/result.hpp"
#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ktune::tableio {

// Readings taken this long before a run started or after it finished still describe it.
inline constexpr std::int64_t k_canary_margin_ms = 15 * 60 * 1000;

struct CanaryLevel {
  double compute_ms = 0, memory_ms = 0;   // medians of the readings
  std::size_t readings = 0;
};

// The medians of `readings`; nullopt when there are none.
[[nodiscard]] std::optional<CanaryLevel> canary_level(const std::vector<CanaryReading>& readings);

// The readings of `fingerprint` from k_canary_margin_ms before `from_ms` to as long after
// `to_ms`; when none falls in the run itself, only the nearest before and after it count.
[[nodiscard]] Result<std::vector<CanaryReading>> readings_near(const Store& store,
                                                               const std::string& fingerprint,
                                                               std::int64_t from_ms,
                                                               std::int64_t to_ms);

// What the canary says of one device between a baseline and now.
struct MachineMove {
  std::string fingerprint, device;
  std::optional<double> factor;            // now / baseline; > 1: the machine is slower now
  std::optional<double> compute_ratio, memory_ratio;
  // This run's last reading / its first (geometric, as factor): > 1 the machine slowed while
  // the run measured. nullopt with fewer than two readings.
  std::optional<double> drift;
  std::size_t readings_now = 0, readings_baseline = 0;

  // Whether the machine moved by more than `min_effect` against the baseline, or during the run.
  [[nodiscard]] bool moved(double min_effect) const;
  [[nodiscard]] bool drifted(double min_effect) const;
  // One line: "machine 23% slower than the baseline's (canary compute ×1.25, memory ×1.21);
  // verdicts from A/B only", or what is missing.
  [[nodiscard]] std::string text(double min_effect) const;
};

// `now`: this run's readings of the device, oldest first; `baseline`: the baseline's.
[[nodiscard]] MachineMove compare_canary(const std::string& fingerprint, const std::string& device,
                                         const std::vector<CanaryReading>& now,
                                         const std::vector<CanaryReading>& baseline);

// Readings as JSON (a table's provenance "canary", a sweep's summary) and back; unreadable
// entries are skipped.
[[nodiscard]] nlohmann::ordered_json canary_json(const std::vector<CanaryReading>& readings);
[[nodiscard]] std::vector<CanaryReading> canary_from_json(const nlohmann::ordered_json& list);
[[nodiscard]] nlohmann::json machine_json(const MachineMove& move, double min_effect);

} // namespace ktune::tableio
