#pragma once
// A store holding finished tuning jobs for the report tests: a gemm-like job of 18 candidates
// (three parameters) with ok, pruned, tied and failed results inserted out of config order, a
// timing breakdown, its device and its winner; and a second, smaller job of another shape.
#include "db/store.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ktune::test {

template <class T>
T must(Result<T> r) {
  if (!r) FAIL(ktune::describe(r.error()));
  return std::move(r).value();
}
inline void must(Result<void> r) {
  if (!r) FAIL(ktune::describe(r.error()));
}

struct SampleJobs {
  std::int64_t first = 0, second = 0;
  std::int64_t first_results = 0;
};

inline JobRecord sample_job(const std::string& shape, std::int64_t total) {
  JobRecord job;
  job.kernel = "gemm";
  job.source_hash = "5f0c3a9e77d14b2c9a1e0d3b6c8f2e41";
  job.shape = shape;
  job.dtype = "f32";
  job.device = "cpu";
  job.fingerprint = "c3b1f0e2d4a59687";
  job.strategy = "random";
  job.budget = total;
  job.seed = 7;
  job.state = JobState::running;
  job.total = total;
  job.created_at = 1'763'779'767'123;
  return job;
}

// The candidate time of config (bm, bn, unroll): larger tiles and more unrolling are faster.
inline double sample_time_ms(int bm, int bn, int unroll) {
  return 0.05 + 6.4 / (bm * 0.5 + bn) + 0.8 / unroll + 0.01 * ((bm * 7 + bn * 3 + unroll) % 5);
}

constexpr int k_sample_bms[] = {16, 32, 64};
constexpr int k_sample_bns[] = {8, 16};
constexpr int k_sample_unrolls[] = {1, 2, 4};

// A result of the first job's key; status and times are the caller's.
inline ResultRecord sample_result(std::int64_t job, const std::string& shape, int bm, int bn, int unroll,
                                  int index) {
  ResultRecord r;
  r.job_id = job;
  r.kernel = "gemm";
  r.source_hash = "5f0c3a9e77d14b2c9a1e0d3b6c8f2e41";
  r.shape = shape;
  r.dtype = "f32";
  r.fingerprint = "c3b1f0e2d4a59687";
  r.config = "{\"BM\":" + std::to_string(bm) + ",\"BN\":" + std::to_string(bn) +
             ",\"UNROLL\":" + std::to_string(unroll) + "}";
  r.config_index = index;
  return r;
}

// Config `index` of the first job: two compile errors (5, 11), a mismatch (16), a timeout (9),
// the rest measured (pruned above 0.9 ms).
inline ResultRecord first_job_result(std::int64_t job, int index) {
  const int bm = k_sample_bms[index / 6], bn = k_sample_bns[(index / 3) % 2], unroll = k_sample_unrolls[index % 3];
  ResultRecord r = sample_result(job, "M=256,N=256,K=256", bm, bn, unroll, index);
  r.compile_ms = 400 + 10.0 * index;
  if (index == 5 || index == 11) {
    r.status = CandidateStatus::compile_error;
    r.reason = "error: 'tile' was not declared in this scope </script>";
    r.log = "kernel.cpp:12:5: error: 'tile' was not declared in this scope\n   12 |     tile[i] = 0;";
  } else if (index == 16) {
    r.status = CandidateStatus::mismatch;
    r.reason = "element 17: 3.5 vs 3.25";
  } else if (index == 9) {
    r.status = CandidateStatus::timeout;
    r.reason = "killed after 2 s";
  } else {
    const double t = sample_time_ms(bm, bn, unroll);
    r.stats.n = 20;
    r.stats.median_ms = t;
    r.stats.min_ms = t * 0.97;
    r.stats.max_ms = t * 1.1;
    r.stats.mean_ms = t * 1.01;
    r.stats.stddev_ms = t * 0.02;
    r.stats.q1_ms = t * 0.99;
    r.stats.q3_ms = t * 1.02;
    r.gflops = 2.0 * 256 * 256 * 256 / (t * 1e6);
    r.pruned = t > 0.9;
  }
  return r;
}

// The job's winner row as the store's winner of its key.
inline void store_sample_winner(Store& store, std::int64_t job, std::int64_t winner_id) {
  for (const auto& row : must(store.job_results(job))) {
    if (row.id != winner_id) continue;
    WinnerRecord w;
    w.kernel = row.kernel;
    w.source_hash = row.source_hash;
    w.shape = row.shape;
    w.dtype = row.dtype;
    w.fingerprint = row.fingerprint;
    w.result_id = row.id;
    w.job_id = job;
    w.config = row.config;
    w.median_ms = row.stats.median_ms;
    w.gflops = row.gflops;
    must(store.upsert_winner(w));
  }
}

// The first job: 18 candidates inserted out of config order (as a random search's are), the
// fastest unpruned one tied and the winner, a timing breakdown, done.
inline void write_first_sample_job(Store& store, SampleJobs& ids) {
  ids.first = must(store.create_job(sample_job("M=256,N=256,K=256", 18)));
  must(store.set_job_state(ids.first, JobState::running));
  const int order[] = {7, 2, 15, 0, 11, 4, 17, 9, 13, 1, 6, 16, 3, 10, 14, 5, 12, 8};
  std::int64_t best_id = 0;
  double best_ms = 1e9;
  std::int64_t failed = 0;
  for (const int index : order) {
    const ResultRecord r = first_job_result(ids.first, index);
    const std::int64_t id = must(store.insert_result(r));
    ++ids.first_results;
    if (r.status != CandidateStatus::ok) {
      ++failed;
    } else if (!r.pruned && r.stats.median_ms < best_ms) {
      best_ms = r.stats.median_ms;
      best_id = id;
    }
    must(store.update_job_progress(ids.first, ids.first_results, failed));
  }
  must(store.mark_ties(ids.first, {best_id}));
  store_sample_winner(store, ids.first, best_id);
  JobTiming timing;
  timing.queue_ms = 0.4;
  timing.compile_ms = 1510.25;
  timing.bench_ms = 2230.75;
  timing.overhead_ms = 3.5;
  timing.compile_sum_ms = 7622.0;
  timing.bench_sum_ms = 2231.5;
  timing.compiles = 18;
  must(store.set_job_timing(ids.first, timing));
  must(store.set_job_state(ids.first, JobState::done));
}

// The second job of the sweep: another shape, every candidate ok.
inline void write_second_sample_job(Store& store, SampleJobs& ids) {
  ids.second = must(store.create_job(sample_job("M=512,N=512,K=512", 4)));
  must(store.set_job_state(ids.second, JobState::running));
  for (int index = 0; index < 4; ++index) {
    const int bm = k_sample_bms[index % 3], unroll = k_sample_unrolls[index % 2];
    ResultRecord r = sample_result(ids.second, "M=512,N=512,K=512", bm, 8, unroll, index);
    r.stats.n = 12;
    r.stats.median_ms = 8.0 * sample_time_ms(bm, 8, unroll);
    r.stats.q1_ms = r.stats.median_ms * 0.98;
    r.stats.q3_ms = r.stats.median_ms * 1.03;
    must(store.insert_result(r));
  }
  must(store.update_job_progress(ids.second, 4, 0));
  must(store.set_job_state(ids.second, JobState::done));
}

// Writes the two jobs into `store` (opened read-write) and returns their ids.
inline SampleJobs write_sample_jobs(Store& store) {
  DeviceInfo device;
  device.name = "cpu";
  device.fingerprint = "c3b1f0e2d4a59687";
  device.details = {{"kind", "cpu"}, {"model", "Example CPU @ 3.0GHz <fast>"}, {"cores", 2}};
  must(store.upsert_device(device));
  must(store.upsert_kernel("gemm", "5f0c3a9e77d14b2c9a1e0d3b6c8f2e41", "[kernel]\nname = \"gemm\"\n"));
  SampleJobs ids;
  write_first_sample_job(store, ids);
  write_second_sample_job(store, ids);
  return ids;
}

} // namespace ktune::test
