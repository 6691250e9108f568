#include "core/status.hpp"

#include <catch2/catch.hpp>

using ktune::CandidateStatus;

TEST_CASE("core/status: names round-trip", "[core][status]") {
  const std::pair<CandidateStatus, const char*> all[] = {
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
  };
  for (const auto& [status, name] : all) {
    CHECK(ktune::to_string(status) == name);
    CHECK(ktune::parse_candidate_status(name) == status);
  }
  CHECK_FALSE(ktune::parse_candidate_status("OK").has_value());
  CHECK_FALSE(ktune::parse_candidate_status("").has_value());
  CHECK_FALSE(ktune::parse_candidate_status("crashed").has_value());
}
