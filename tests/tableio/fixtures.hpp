#pragma once
// Shared test data for the table tests: a real store filled through Store's API, and rows.
#include "tests/support/paths.hpp"
#include "db/store.hpp"
#include "tableio/table.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace ktune::test {

inline std::string read_source_file(const std::string& relative) {
  std::ifstream in(ktune::test::source_dir() + "/" + relative);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The shipped gemm spec: params BM, BN, BK, UNROLL, VEC (not alphabetical).
inline std::string gemm_spec() { return read_source_file("kernels_src/gemm/kernel.toml"); }

inline DeviceInfo cpu_device(const std::string& model = "Test CPU 3000") {
  DeviceInfo device;
  device.name = "cpu";
  device.details = {{"kind", "cpu"}, {"model", model}, {"cores", 8},
                    {"compiler", "g++ (Debian 12.2.0-14) 12.2.0"}};
  device.fingerprint = "fp-" + model;
  return device;
}

inline DeviceInfo cuda_device() {
  DeviceInfo device;
  device.name = "cuda:0";
  device.details = {{"kind", "cuda"}, {"name", "NVIDIA H100"}, {"nvrtc_version", "12.4"}};
  device.fingerprint = "cudafp0123456789";
  return device;
}

inline SampleStats stats_around(double median_ms, double stddev_ms, std::size_t n) {
  SampleStats s;
  s.n = n;
  s.median_ms = median_ms;
  s.mean_ms = median_ms;
  s.min_ms = median_ms - stddev_ms;
  s.max_ms = median_ms + 2 * stddev_ms;
  s.stddev_ms = stddev_ms;
  s.q1_ms = median_ms - stddev_ms / 2;
  s.q3_ms = median_ms + stddev_ms / 2;
  return s;
}

struct StoredWinner {
  std::int64_t job_id = 0, result_id = 0;
};

// A finished tune of one key: a job, a losing and a winning result, the winner.
inline StoredWinner tune_key(Store& store, const std::string& kernel, const std::string& hash,
                             const std::string& shape, const std::string& dtype,
                             const DeviceInfo& device, const std::string& winning_config,
                             double median_ms, std::int64_t measured_at_ms) {
  REQUIRE(store.upsert_device(device).ok());
  JobRecord job;
  job.kernel = kernel;
  job.source_hash = hash;
  job.shape = shape;
  job.dtype = dtype;
  job.device = device.name;
  job.fingerprint = device.fingerprint;
  job.state = JobState::done;
  auto job_id = store.create_job(job);
  REQUIRE(job_id.ok());

  ResultRecord loser;
  loser.job_id = *job_id;
  loser.kernel = kernel;
  loser.source_hash = hash;
  loser.shape = shape;
  loser.dtype = dtype;
  loser.fingerprint = device.fingerprint;
  loser.config = R"({"BM":32,"BN":64,"BK":64,"UNROLL":2,"VEC":1})";
  loser.stats = stats_around(median_ms * 3, median_ms * 0.01, 10);
  loser.created_at = measured_at_ms - 1000;
  REQUIRE(store.insert_result(loser).ok());

  ResultRecord result = loser;
  result.config = winning_config;
  result.config_index = 1;
  result.stats = stats_around(median_ms, median_ms * 0.01, 10);
  result.gflops = 100.0 / median_ms;
  result.gbps = 7.5;
  result.compile_ms = 250;
  result.created_at = measured_at_ms;
  auto result_id = store.insert_result(result);
  REQUIRE(result_id.ok());

  WinnerRecord winner;
  winner.kernel = kernel;
  winner.source_hash = hash;
  winner.shape = shape;
  winner.dtype = dtype;
  winner.fingerprint = device.fingerprint;
  winner.result_id = *result_id;
  winner.job_id = *job_id;
  winner.config = winning_config;
  winner.median_ms = median_ms;
  winner.gflops = result.gflops;
  winner.updated_at = measured_at_ms + 5;
  REQUIRE(store.upsert_winner(winner).ok());
  return {*job_id, *result_id};
}

inline constexpr const char* k_gemm_hash = "gemmhash00112233";
inline constexpr const char* k_config_a = R"({"BM":64,"BN":128,"BK":128,"UNROLL":4,"VEC":2})";
inline constexpr const char* k_config_b = R"({"BM":128,"BN":256,"BK":64,"UNROLL":8,"VEC":1})";

// A store with three gemm winners (two CPU shapes, one CUDA shape) and one reduce_sum winner.
inline void fill_store(Store& store) {
  REQUIRE(store.upsert_kernel("gemm", k_gemm_hash, gemm_spec()).ok());
  tune_key(store, "gemm", k_gemm_hash, "M=256,N=256,K=256", "f32", cpu_device(), k_config_a,
           1.25, 1'700'000'000'000);
  tune_key(store, "gemm", k_gemm_hash, "M=512,N=512,K=512", "f32", cpu_device(), k_config_b,
           9.5, 1'700'000'100'000);
  tune_key(store, "gemm", k_gemm_hash, "M=4096,N=4096,K=4096", "f16", cuda_device(), k_config_b,
           3.0, 1'700'000'200'000);
  tune_key(store, "reduce_sum", "reducehash", "N=1048576", "f64", cpu_device(),
           R"({"BLOCK":256})", 0.5, 1'700'000'300'000);
}

// A row with every field set.
inline tableio::TableRow make_row(const std::string& shape, const std::string& config,
                                  double median_ms, std::int64_t time_ms,
                                  const std::string& fingerprint = "fp-Test CPU 3000") {
  tableio::TableRow row;
  row.kernel = "gemm";
  row.shape = shape;
  row.dtype = "f32";
  row.fingerprint = fingerprint;
  row.source_hash = k_gemm_hash;
  row.config = nlohmann::ordered_json::parse(config);
  row.median_ms = median_ms;
  row.stats = stats_around(median_ms, median_ms * 0.01, 10);
  row.gflops = 42.5;
  row.gbps = 3.25;
  row.compile_ms = 120;
  row.device_name = "cpu";
  row.device = cpu_device().details;
  row.toolchain = "g++ (Debian 12.2.0-14) 12.2.0";
  row.time_ms = time_ms;
  row.host = "build-host";
  return row;
}

inline tableio::Table make_table(std::vector<tableio::TableRow> rows) {
  tableio::Table table;
  table.rows = std::move(rows);
  table.host = "build-host";
  table.exported_at_ms = 1'700'000'900'000;
  REQUIRE(table.normalize().ok());
  return table;
}

// Field-by-field equality of two rows, with Catch2 naming the first difference.
inline void require_same_row(const tableio::TableRow& a, const tableio::TableRow& b) {
  REQUIRE(a.key() == b.key());
  REQUIRE(a.config.dump() == b.config.dump());
  REQUIRE(a.median_ms == b.median_ms);
  REQUIRE(a.stats.n == b.stats.n);
  REQUIRE(a.stats.min_ms == b.stats.min_ms);
  REQUIRE(a.stats.max_ms == b.stats.max_ms);
  REQUIRE(a.stats.mean_ms == b.stats.mean_ms);
  REQUIRE(a.stats.stddev_ms == b.stats.stddev_ms);
  REQUIRE(a.stats.q1_ms == b.stats.q1_ms);
  REQUIRE(a.stats.q3_ms == b.stats.q3_ms);
  REQUIRE(a.gflops == b.gflops);
  REQUIRE(a.gbps == b.gbps);
  REQUIRE(a.compile_ms == b.compile_ms);
  REQUIRE(a.device_name == b.device_name);
  REQUIRE(a.device == b.device);
  REQUIRE(a.toolchain == b.toolchain);
  REQUIRE(a.time_ms == b.time_ms);
  REQUIRE(a.host == b.host);
}

} // namespace ktune::test
