#pragma once
// The worker op `bench_ab`: a baseline (A) and a candidate (B) measured in one bench worker, in
// interleaved rounds on the same buffers (a HostRunner keeps one shape's buffers between runs),
// each round one short measurement of each, A first in even rounds and B first in odd ones,
// with the device's measurement lock held from the first round to the last. What decides is
// core/ab_judge.hpp on the rounds' medians (daemon/ab_service.hpp).
//
//   daemon -> worker: {"id":N,"op":"bench_ab","job":{"a":<BenchJob>,"b":<BenchJob>,"rounds":R}}
//   worker -> daemon: {"id":N,"ok":true,"outcome":<AbOutcome>}
#include "core/result.hpp"
#include "core/status.hpp"
#include "jobs/bench_job.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ktune {

// Rounds one request may ask for.
inline constexpr int k_max_ab_rounds = 200;

struct AbRequest {
  BenchJob a, b;          // baseline, candidate; each round's settings are theirs
  int rounds = 10;        // 1 .. k_max_ab_rounds

  // {"a":<BenchJob>,"b":<BenchJob>,"rounds":R}
  [[nodiscard]] nlohmann::json to_json() const;
  // Errors: bad_request naming the field ("a: bench job: field 'entry' ...", "rounds: ...").
  [[nodiscard]] static Result<AbRequest> from_json(const nlohmann::json& j);
};

// One side's measurement in one round.
struct AbSide {
  double median_ms = 0;
  std::size_t samples = 0;
  std::int64_t retaken = 0;
};

struct AbRound {
  AbSide a, b;
  bool a_first = true;
};

struct AbOutcome {
  // ok when every round measured both sides; else the status of the first measurement that
  // failed (mismatch, runtime_error, ...), which side it was ("a" or "b") and its reason. The
  // rounds measured before it are kept.
  CandidateStatus status = CandidateStatus::ok;
  std::string failed_side;
  std::string reason;
  std::vector<AbRound> rounds;
  std::string unlocked;    // BenchOutcome::unlocked of the whole A/B

  // {"status":"ok","side":"","reason":"","rounds":[{"a":{"median_ms","samples","retaken"},
  //  "b":{..},"a_first":true}..],"unlocked":""}
  [[nodiscard]] nlohmann::json to_json() const;
  // Errors: bad_request naming the field.
  [[nodiscard]] static Result<AbOutcome> from_json(const nlohmann::json& j);

  [[nodiscard]] std::vector<double> a_medians() const;
  [[nodiscard]] std::vector<double> b_medians() const;
};

} // namespace ktune
