#pragma once
// What the daemon sends a bench worker and what comes back. A BenchJob is self-contained (it
// travels to the bench worker as JSON): every expression is already evaluated by the daemon
// (make_bench_job). The worker runs it through a Runner (bench/runner.hpp).
#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/result.hpp"
#include "core/stats.hpp"
#include "core/status.hpp"
#include "jobs/cuda_launch.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

// A measurement summary as JSON ({"n", "min_ms", ..., "q3_ms"}) and back; errors are
// "bad_request" naming `what` and the key.
[[nodiscard]] nlohmann::json stats_to_json(const SampleStats& stats);
[[nodiscard]] Result<SampleStats> stats_from_json(const nlohmann::json& j, std::string_view what);

struct BenchArg {
  std::string name;
  std::string kind;            // in | out | inout | scalar
  std::string dtype;           // f32 f64 i32 i64
  std::int64_t count = 0;      // elements (buffers)
  std::string init = "uniform";// buffers: as core/buffer_init.hpp parses it
  double value = 0;            // scalars (converted to dtype)
  double rtol = -1, atol = -1; // outputs: this one's tolerances; < 0 = the job's (JSON: omitted)
  std::int64_t seed = -1;      // inputs: this arg's seed; < 0 = settings.seed (JSON: omitted)
  // outputs: the file of expected values ([check] reference = "files"; raw elements of the arg's
  // dtype, or .npy); "" = none (JSON: omitted)
  std::string expected;

  [[nodiscard]] nlohmann::json to_json() const;
  // Validates kind, dtype, init and (buffers) count >= 1. Errors: "bad_request" naming
  // `field` (e.g. "args[2]") and the key.
  [[nodiscard]] static Result<BenchArg> from_json(const nlohmann::json& j,
                                                  const std::string& field = "arg");
};

struct MeasureSettings {
  int min_samples = 3;
  int max_samples = 1000;
  double target_rsd = 0.01;    // stop when stddev/mean falls under this, or ...
  double target_error = 0.01;  // ... the mean's relative standard error (rsd / sqrt(n)) does, ...
  double min_time_s = 0.05;    // ... with at least this much measured time
  double max_time_s = 15.0;    // hard cap on measured time
  double warmup_ms = 25.0;
  bool flush_cache = true;     // flush the LLC between samples
  std::uint64_t seed = 42;     // buffer initialisation
  int prune_after = 3;         // samples taken before the prune test (bench/sampler.hpp)
  double prune_factor = 2.0;   // the scheduler prunes above prune_factor x the best median; 0 = off
  // The scheduler races candidates out above (1 + race_margin) x the best median (bench/sampler.hpp);
  // 0 = off, the default until it is measured on a quiet machine.
  double race_margin = 0.30;
  // The finals (daemon/scheduler.hpp): when the search is over, the best and the candidates
  // within final_margin of it, at most `finalists` of them (0 or 1: no finals), are measured
  // again in final_rounds interleaved rounds; tie_margin decides the ties (judge_finals).
  int finalists = 32;
  double final_margin = 0.30;
  int final_rounds = 5;
  double tie_margin = 0.03;

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
  std::string reference_entry; // the symbol to call in it ("" = entry)
  std::string shape;           // for messages and buffer-cache keys
  std::vector<BenchArg> args;  // in spec order
  double flops = 0;            // per run, 0 = unknown
  double bytes = 0;
  double rtol = 1e-3, atol = 1e-5;
  bool inplace = false;
  // Host buffers: data sits `buffer_offset` bytes past a `buffer_alignment` boundary
  // ([buffers] of the spec; JSON "buffer_alignment", "buffer_offset").
  std::int64_t buffer_alignment = 64;
  std::int64_t buffer_offset = 0;
  MeasureSettings settings;
  // Stop early, recording the candidate as pruned, when the median of its first
  // settings.prune_after samples is above this (the scheduler passes prune_factor x the best
  // median so far); 0 = never (JSON "prune_above_ms").
  double prune_above_ms = 0;
  // Race the candidate against the best so far: stop early, recording it as pruned, once its
  // median is above this with 99% confidence (bench/sampler.hpp: raced). The scheduler passes
  // (1 + race_margin) x the best median; 0 = never (JSON "race_above_ms").
  double race_above_ms = 0;
  // Stop measuring the candidate, as a sure finalist, once its median is below this with 95%
  // confidence (bench/sampler.hpp: finalist). The scheduler passes (1 + final_margin) x the best
  // median while the job will hold finals; 0 = never (JSON "finalist_below_ms").
  double finalist_below_ms = 0;
  // CUDA candidates only: the candidate's launch geometry and the reference config's (absent
  // for CPU jobs). JSON "launch" and "reference_launch", CudaLaunch::to_json(), omitted when
  // absent.
  std::optional<CudaLaunch> launch;
  std::optional<CudaLaunch> reference_launch;
  int cuda_device = 0;         // CUDA candidates: the device ordinal (JSON "cuda_device")
  // CPU candidates: the threads the candidate runs ([kernel].threads evaluated at its config;
  // 0 = "all", every CPU of the lane; JSON "threads", default 1), and the CPUs the lane gives it
  // (the daemon's WorkerPool fills them in when it sends the job: the bench CPU first; JSON
  // "cpus", empty = where the worker is pinned). `oversubscribed`: the candidate asked for more
  // threads than the lane has CPUs (it is measured on all of them). docs/kernel-spec.md § Threads.
  int threads = 1;
  std::vector<int> cpus;
  bool oversubscribed = false;
  // CPU candidates: the bench worker exits after its reply (JSON "retire"), so the next request
  // is measured in a fresh process: each round of a tune's finals ends so (daemon/tune_run.hpp).
  bool retire = false;

  [[nodiscard]] nlohmann::json to_json() const;
  // Errors: "bad_request" naming the field ("args[1].dtype"). Required: kernel, entry,
  // artifact_path, args; the rest default as above.
  [[nodiscard]] static Result<BenchJob> from_json(const nlohmann::json& j);
};

// How a bench worker's stderr line about a fault in a guard page begins (bench/guarded_memory.hpp);
// ktuned adds the rest of that line to the candidate's `crash` reason.
inline constexpr std::string_view k_guard_fault_prefix = "ktune-worker: wrote outside its buffers: ";

struct BenchOutcome {
  CandidateStatus status = CandidateStatus::ok;  // ok | mismatch | runtime_error | launch_error
  std::string reason;          // one line: "max abs error 0.5 at C[17] (rtol 1e-3)"
  SampleStats stats;
  // The timed samples behind `stats`, in the order taken (float32 is ample for times in ms:
  // 7 significant digits). Empty for a failed candidate and in outcomes of older workers.
  std::vector<float> samples_ms;
  double gflops = 0;           // flops / median, 0 when flops unknown
  double gbps = 0;
  // The candidate's resources where the runner knows them (CUDA: cuFuncGetAttribute), -1 when
  // unknown (every CPU candidate; spills are never reported by the driver).
  int registers = -1;
  int spills = -1;             // spill bytes
  int shared_bytes = -1;       // static shared memory per block
  bool pruned = false;         // sampling stopped early: slower than BenchJob::prune_above_ms
  std::string stop;            // why sampling ended (SampleStop: converged, settled, capped, pruned)
  std::int64_t retaken = 0;    // samples dropped as preempted and taken again (bench/sampler.hpp)
  // The conditions the samples were taken under, where the runner records them (CUDA: the timing
  // mode, launches per sample, the spin, SM and memory clocks and clock-event reasons; docs/gpu.md
  // § Timing). An object; empty when none were recorded (every CPU candidate today).
  nlohmann::json conditions = nlohmann::json::object();
  // Why the device's machine-wide measurement lock was not held while this was measured (it
  // could not be opened or taken: worker/worker.hpp); "" when it was held or there is none.
  std::string unlocked;
  // The host's failure, not the candidate's: an artifact of the compile cache failed its check
  // before it was loaded (jobs/artifact_cache.hpp): why, and the path of that artifact (the
  // candidate's or the reference's). Nothing was measured; the daemon compiles it again and
  // never records the outcome. Empty otherwise.
  std::string infra;
  std::string infra_artifact;

  // {"status":"ok","reason":"","stats":{"n":..,"min_ms":..,"max_ms":..,"median_ms":..,
  //  "mean_ms":..,"stddev_ms":..,"q1_ms":..,"q3_ms":..},"gflops":..,"gbps":..,
  //  "registers":-1,"spills":-1,"shared_bytes":-1,"pruned":false,"stop":"converged",
  //  "retaken":0,"samples_ms":[..],"conditions":{..},"infra":"","infra_artifact":"",
  //  "unlocked":".."} (the last eleven optional: -1, false, "", 0, [], {}, "", "", ""; "unlocked"
  //  only written when not empty)
  [[nodiscard]] nlohmann::json to_json() const;
  // Errors: "bad_request" naming the field; status must be a known candidate status.
  [[nodiscard]] static Result<BenchOutcome> from_json(const nlohmann::json& j);
};

// Evaluates the spec's arg counts/values and metrics for (shape, config, dtype) into a BenchJob.
// Scalar args without a dtype are i64; buffer args without one take the job's dtype (a typed
// signature has given each arg the declared dtype already). A cpp family with a signature is
// entered through its shim (host_shim_symbol), and a reference function's shim is the
// reference_entry. Metrics also see elem_bytes, the size of one element of `dtype`.
// Expressions see the spec's shape dims and params, bound to bind(shape, config). Counts must be
// >= 1; integral scalars must evaluate to integers (and fit i32 for i32 args); absent metrics
// give 0. For a CUDA spec (language cuda) the job also carries the launch geometry of `config`
// and of spec.default_config (make_cuda_launch), whose errors it returns. Errors, each naming
// the kernel, shape, arg and expression: bad_expression (does not compile or evaluate),
// bad_shape (count < 1, value out of range), bad_dtype (unknown dtype).
[[nodiscard]] Result<BenchJob> make_bench_job(const KernelSpec& spec, const Shape& shape,
                                              const Config& config, const std::string& dtype,
                                              const std::string& artifact_path,
                                              const std::string& reference_path,
                                              const MeasureSettings& settings);

// Points a job from make_bench_job at the symbols its artifacts export (the compile outcomes'
// entry_symbol; "" = exported under the plain name): `entry_symbol` the candidate's,
// `reference_symbol` the reference's. The reference is called by its own symbol, never by the
// candidate's: a default-config reference whose compile renamed nothing keeps the plain entry.
void use_compiled_entries(BenchJob& job, const std::string& entry_symbol,
                          const std::string& reference_symbol);

} // namespace ktune
