#pragma once
// Measurement behind one interface. A BenchJob is self-contained (it travels to the bench worker
// as JSON): every expression is already evaluated by the daemon.
#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/result.hpp"
#include "core/stats.hpp"
#include "core/status.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ktune {

struct BenchArg {
  std::string name;
  std::string kind;            // in | out | inout | scalar
  std::string dtype;           // f32 f64 i32 i64
  std::int64_t count = 0;      // elements (buffers)
  std::string init = "uniform";// uniform | zero | ones | index (buffers)
  double value = 0;            // scalars (converted to dtype)
};

struct MeasureSettings {
  int min_samples = 10;
  int max_samples = 1000;
  double target_rsd = 0.01;    // stop when stddev/mean falls under this ...
  double min_time_s = 0.05;    // ... with at least this much measured time
  double max_time_s = 15.0;    // hard cap on measured time
  double warmup_ms = 25.0;
  bool flush_cache = true;     // flush the LLC between samples
  std::uint64_t seed = 42;     // buffer initialisation

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static MeasureSettings from_json(const nlohmann::json& j); // missing = default
};

struct BenchJob {
  std::string kernel;
  std::string entry;           // extern "C" symbol
  std::string artifact_path;   // the candidate
  std::string reference_path;  // the reference config's artifact ("" = no check)
  std::string shape;           // for messages and buffer-cache keys
  std::vector<BenchArg> args;  // in spec order
  double flops = 0;            // per run, 0 = unknown
  double bytes = 0;
  double rtol = 1e-3, atol = 1e-5;
  bool inplace = false;
  MeasureSettings settings;

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static Result<BenchJob> from_json(const nlohmann::json& j);
};

struct BenchOutcome {
  CandidateStatus status = CandidateStatus::ok;  // ok | mismatch | runtime_error | launch_error
  std::string reason;          // one line: "max abs error 0.5 at C[17] (rtol 1e-3)"
  SampleStats stats;
  double gflops = 0;           // flops / median, 0 when flops unknown
  double gbps = 0;

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static Result<BenchOutcome> from_json(const nlohmann::json& j);
};

// Evaluates the spec's arg counts/values and metrics for (shape, config, dtype) into a BenchJob.
// Scalar args without a dtype are i64; buffer args without one take the job's dtype.
// Errors: bad_expression / bad_shape naming the arg and expression (e.g. a negative count).
[[nodiscard]] Result<BenchJob> make_bench_job(const KernelSpec& spec, const Shape& shape,
                                              const Config& config, const std::string& dtype,
                                              const std::string& artifact_path,
                                              const std::string& reference_path,
                                              const MeasureSettings& settings);

class Runner {
public:
  virtual ~Runner() = default;
  // Runs one candidate: checks its output against the reference, then measures it.
  // A crash inside the candidate kills the calling process: runners run in a worker.
  [[nodiscard]] virtual BenchOutcome run(const BenchJob& job) = 0;
};

} // namespace ktune
