#include "tableio/canary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ktune::tableio {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", std::abs(share) * 100.0);
  return buf;
}

std::string times(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "x%.3f", ratio);
  return buf;
}

template <typename J>
J optional_number(const std::optional<double>& value) {
  return value ? J(*value) : J(nullptr);
}

} // namespace

std::optional<CanaryLevel> canary_level(const std::vector<CanaryReading>& readings) {
  std::vector<double> compute, memory;
  for (const auto& r : readings) {
    if (r.compute_ms > 0 && r.memory_ms > 0) {
      compute.push_back(r.compute_ms);
      memory.push_back(r.memory_ms);
    }
  }
  if (compute.empty()) return std::nullopt;
  return CanaryLevel{median(compute), median(memory), compute.size()};
}

Result<std::vector<CanaryReading>> readings_near(const Store& store, const std::string& fingerprint,
                                                 std::int64_t from_ms, std::int64_t to_ms) {
  auto all = store.canary_readings(fingerprint, from_ms - k_canary_margin_ms, to_ms + k_canary_margin_ms);
  if (!all) return all.error();
  std::vector<CanaryReading> during, before, after;
  for (auto& r : *all) {
    if (r.taken_at < from_ms) before.push_back(std::move(r));
    else if (r.taken_at > to_ms) after.push_back(std::move(r));
    else during.push_back(std::move(r));
  }
  if (!during.empty()) return during;
  std::vector<CanaryReading> nearest;
  if (!before.empty()) nearest.push_back(before.back());
  if (!after.empty()) nearest.push_back(after.front());
  return nearest;
}

bool MachineMove::moved(double min_effect) const {
  return factor && (*factor > 1 + min_effect || *factor < 1 / (1 + min_effect));
}

bool MachineMove::drifted(double min_effect) const {
  return drift && (*drift > 1 + min_effect || *drift < 1 / (1 + min_effect));
}

std::string MachineMove::text(double min_effect) const {
  const std::string name = device.empty() ? fingerprint.substr(0, 12) : device;
  std::string out;
  if (!factor) {
    out = name + ": " +
          (readings_now == 0 ? std::string("no canary reading of this run")
                             : std::string("no canary reading of the baseline's runs")) +
          ", so the machine's own speed is not known; verdicts from A/B only";
  } else {
    const std::string how = *factor >= 1 ? "slower" : "faster";
    out = name + ": machine " + percent(*factor - 1) + " " + how + " than the baseline's (canary " +
          "compute " + times(*compute_ratio) + ", memory " + times(*memory_ratio) + ")" +
          (moved(min_effect) ? "; verdicts from A/B only" : ", within the minimum effect");
  }
  if (drifted(min_effect)) {
    out += "; the canary moved mid-measure (" + times(*drift) + " from this run's first reading "
           "to its last)";
  }
  return out;
}

MachineMove compare_canary(const std::string& fingerprint, const std::string& device,
                           const std::vector<CanaryReading>& now,
                           const std::vector<CanaryReading>& baseline) {
  MachineMove out;
  out.fingerprint = fingerprint;
  out.device = device;
  const auto current = canary_level(now);
  const auto before = canary_level(baseline);
  out.readings_now = current ? current->readings : 0;
  out.readings_baseline = before ? before->readings : 0;
  if (current && before) {
    out.compute_ratio = current->compute_ms / before->compute_ms;
    out.memory_ratio = current->memory_ms / before->memory_ms;
    out.factor = std::sqrt(*out.compute_ratio * *out.memory_ratio);
  }
  std::vector<const CanaryReading*> usable;
  for (const auto& r : now) {
    if (r.compute_ms > 0 && r.memory_ms > 0) usable.push_back(&r);
  }
  if (usable.size() >= 2) {
    const CanaryReading& first = *usable.front();
    const CanaryReading& last = *usable.back();
    out.drift = std::sqrt((last.compute_ms / first.compute_ms) * (last.memory_ms / first.memory_ms));
  }
  return out;
}

nlohmann::ordered_json canary_json(const std::vector<CanaryReading>& readings) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& r : readings) {
    list.push_back({{"device", r.device},
                    {"fingerprint", r.fingerprint},
                    {"taken_at_ms", r.taken_at},
                    {"compute_ms", r.compute_ms},
                    {"memory_ms", r.memory_ms},
                    {"context", r.context}});
  }
  return list;
}

std::vector<CanaryReading> canary_from_json(const nlohmann::ordered_json& list) {
  std::vector<CanaryReading> out;
  if (!list.is_array()) return out;
  for (const auto& item : list) {
    if (!item.is_object()) continue;
    const auto compute = item.find("compute_ms");
    const auto memory = item.find("memory_ms");
    const auto fingerprint = item.find("fingerprint");
    if (compute == item.end() || !compute->is_number() || memory == item.end() ||
        !memory->is_number() || fingerprint == item.end() || !fingerprint->is_string()) {
      continue;
    }
    CanaryReading r;
    r.fingerprint = fingerprint->get<std::string>();
    r.device = item.value("device", std::string());
    r.taken_at = item.value("taken_at_ms", std::int64_t{0});
    r.compute_ms = compute->get<double>();
    r.memory_ms = memory->get<double>();
    r.context = item.value("context", std::string());
    out.push_back(std::move(r));
  }
  return out;
}

nlohmann::json machine_json(const MachineMove& move, double min_effect) {
  return {{"device", move.device},
          {"fingerprint", move.fingerprint},
          {"factor", optional_number<nlohmann::json>(move.factor)},
          {"compute_ratio", optional_number<nlohmann::json>(move.compute_ratio)},
          {"memory_ratio", optional_number<nlohmann::json>(move.memory_ratio)},
          {"drift", optional_number<nlohmann::json>(move.drift)},
          {"moved", move.moved(min_effect)},
          {"drifted", move.drifted(min_effect)},
          {"readings", move.readings_now},
          {"baseline_readings", move.readings_baseline},
          {"text", move.text(min_effect)}};
}

} // namespace ktune::tableio
