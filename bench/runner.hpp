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

  [[nodiscard]] nlohmann::json to_json() const;
  // Validates kind, dtype, init and (buffers) count >= 1. Errors: "bad_request" naming
  // `field` (e.g. "args[2]") and the key.
  [[nodiscard]] static Result<BenchArg> from_json(const nlohmann::json& j,
                                                  const std::string& field = "arg");
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
  // Missing fields, and fields of the wrong type, keep their defaults.
  [[nodiscard]] static MeasureSettings from_json(const nlohmann::json& j);
  // Strict form (used by BenchJob::from_json): missing = default, a field of the wrong type is
  // an error ("bad_request" naming the field). A null `j` gives the defaults.
  [[nodiscard]] static Result<MeasureSettings> parse(const nlohmann::json& j);
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
  // Errors: "bad_request" naming the field ("args[1].dtype"). Required: kernel, entry,
  // artifact_path, args; the rest default as above.
  [[nodiscard]] static Result<BenchJob> from_json(const nlohmann::json& j);
};

struct BenchOutcome {
  CandidateStatus status = CandidateStatus::ok;  // ok | mismatch | runtime_error | launch_error
  std::string reason;          // one line: "max abs error 0.5 at C[17] (rtol 1e-3)"
  SampleStats stats;
  double gflops = 0;           // flops / median, 0 when flops unknown
  double gbps = 0;

  // {"status":"ok","reason":"","stats":{"n":..,"min_ms":..,"max_ms":..,"median_ms":..,
  //  "mean_ms":..,"stddev_ms":..,"q1_ms":..,"q3_ms":..},"gflops":..,"gbps":..}
  [[nodiscard]] nlohmann::json to_json() const;
  // Errors: "bad_request" naming the field; status must be a known candidate status.
  [[nodiscard]] static Result<BenchOutcome> from_json(const nlohmann::json& j);
};

// Evaluates the spec's arg counts/values and metrics for (shape, config, dtype) into a BenchJob.
// Scalar args without a dtype are i64; buffer args without one take the job's dtype.
// Expressions see the spec's shape dims and params, bound to bind(shape, config). Counts must be
// >= 1; integral scalars must evaluate to integers (and fit i32 for i32 args); absent metrics
// give 0. Errors, each naming the kernel, shape, arg and expression: bad_expression (does not
// compile or evaluate), bad_shape (count < 1, value out of range), bad_dtype (unknown dtype).
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
