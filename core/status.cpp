#include "core/status.hpp"

#include <array>
#include <utility>

namespace ktune {
namespace {

constexpr std::array<std::pair<CandidateStatus, std::string_view>, 10> k_names{{
    {CandidateStatus::ok, "ok"},
    {CandidateStatus::invalid_config, "invalid_config"},
    {CandidateStatus::compile_error, "compile_error"},
    {CandidateStatus::compile_timeout, "compile_timeout"},
    {CandidateStatus::launch_error, "launch_error"},
    {CandidateStatus::runtime_error, "runtime_error"},
    {CandidateStatus::mismatch, "mismatch"},
    {CandidateStatus::crash, "crash"},
    {CandidateStatus::timeout, "timeout"},
    {CandidateStatus::worker_lost, "worker_lost"},
}};

} // namespace

std::string_view to_string(CandidateStatus status) {
  for (const auto& [value, name] : k_names) {
    if (value == status) return name;
  }
  return "unknown";
}

std::optional<CandidateStatus> parse_candidate_status(std::string_view text) {
  for (const auto& [value, name] : k_names) {
    if (name == text) return value;
  }
  return std::nullopt;
}

} // namespace ktune
