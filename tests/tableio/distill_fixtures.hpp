#pragma once
// A real store holding a brute-force-like tune of gemm at a few shapes (several results per
// shape), for the distill, rule and engine-json tests.
#include "tests/tableio/fixtures.hpp"

#include <map>
#include <string>
#include <vector>

namespace ktune::test {

// Three gemm configs: small blocks (admitted at every shape), medium, and BM=128 (admitted from
// M=65 on: "BM == 32 || BM < 2 * M").
inline constexpr const char* k_small = R"({"BM":32,"BN":64,"BK":64,"UNROLL":8,"VEC":2})";
inline constexpr const char* k_medium = R"({"BM":64,"BN":128,"BK":128,"UNROLL":4,"VEC":2})";
inline constexpr const char* k_large = R"({"BM":128,"BN":128,"BK":128,"UNROLL":8,"VEC":2})";

// One finished job at `shape` with a result per config (median ms; a negative median is a
// failed candidate), and the fastest as the key's winner.
inline void tune_shape(Store& store, const std::string& shape,
                       const std::vector<std::pair<std::string, double>>& results,
                       const DeviceInfo& device = cpu_device()) {
  REQUIRE(store.upsert_device(device).ok());
  JobRecord job;
  job.kernel = "gemm";
  job.source_hash = k_gemm_hash;
  job.shape = shape;
  job.dtype = "f32";
  job.device = device.name;
  job.fingerprint = device.fingerprint;
  job.state = JobState::done;
  auto job_id = store.create_job(job);
  REQUIRE(job_id.ok());
  std::int64_t best_id = 0;
  double best = 0;
  std::string best_config;
  for (std::size_t i = 0; i < results.size(); ++i) {
    ResultRecord r;
    r.job_id = *job_id;
    r.kernel = "gemm";
    r.source_hash = k_gemm_hash;
    r.shape = shape;
    r.dtype = "f32";
    r.fingerprint = device.fingerprint;
    r.config = results[i].first;
    r.config_index = static_cast<std::int64_t>(i);
    if (results[i].second < 0) {
      r.status = CandidateStatus::mismatch;
    } else {
      r.stats = stats_around(results[i].second, results[i].second * 0.01, 10);
    }
    r.created_at = 1'700'000'000'000 + static_cast<std::int64_t>(i);
    auto id = store.insert_result(r);
    REQUIRE(id.ok());
    if (results[i].second > 0 && (best == 0 || results[i].second < best)) {
      best = results[i].second;
      best_id = *id;
      best_config = results[i].first;
    }
  }
  WinnerRecord winner;
  winner.kernel = "gemm";
  winner.source_hash = k_gemm_hash;
  winner.shape = shape;
  winner.dtype = "f32";
  winner.fingerprint = device.fingerprint;
  winner.result_id = best_id;
  winner.job_id = *job_id;
  winner.config = best_config;
  winner.median_ms = best;
  winner.updated_at = 1'700'000'500'000;
  REQUIRE(store.upsert_winner(winner).ok());
}

// gemm at M = 32, 64, 128, 256 (N = K = 128): small blocks win below M = 100, BM=128 above;
// medium is never best. Medium (BM=64) is not admitted at M=32, large (BM=128) not below M=65.
// Unless `complete`, the small config was never measured at M=256 nor the narrow one beyond
// M=32: four cells a rule may need. Complete, the narrow config (admitted everywhere, like the
// small one) wins above M=100.
inline constexpr const char* k_narrow = R"({"BM":32,"BN":128,"BK":128,"UNROLL":4,"VEC":2})";

inline void fill_distill_store(Store& store, bool complete = false) {
  REQUIRE(store.upsert_kernel("gemm", k_gemm_hash, gemm_spec()).ok());
  using Results = std::vector<std::pair<std::string, double>>;
  tune_shape(store, "M=32,N=128,K=128", {{k_small, 1.0}, {k_narrow, 1.2}});
  Results m64{{k_small, 2.0}, {k_medium, 2.2}};
  Results m128{{k_small, 5.0}, {k_medium, 4.4}, {k_large, 4.0}};
  Results m256{{k_medium, 8.8}, {k_large, 8.0}};
  if (complete) {
    m64.emplace_back(k_narrow, 2.5);
    m128.emplace_back(k_narrow, 3.8);
    m256.emplace_back(k_narrow, 7.5);
    m256.emplace_back(k_small, 11.0);
  }
  tune_shape(store, "M=64,N=128,K=128", m64);
  tune_shape(store, "M=128,N=128,K=128", m128);
  tune_shape(store, "M=256,N=128,K=128", m256);
}

} // namespace ktune::test
