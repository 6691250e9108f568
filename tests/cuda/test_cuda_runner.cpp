#include "bench/cuda_runner.hpp"

#include "compiler/nvrtc_compiler.hpp"
#include "tests/cuda/gpu.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ktune;
using Catch::Matchers::Contains;

namespace {

const std::string k_vadd_source = R"(
extern "C" __global__ void vadd(const float* x, const float* y, float* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef SKIP
  if (i == 17) return;
#endif
  if (i < n) z[i] = x[i] + y[i];
#ifdef WRONG
  if (i == 17) z[i] += 1.0f;
#endif
#ifdef OVERRUN
  if (i == 0) z[n] = 0.0f;
#endif
#ifdef WILD
  if (i == 0) *reinterpret_cast<float*>(16) = 1.0f;
#endif
}
extern "C" __global__ void __launch_bounds__(64) narrow(const float* x, const float* y, float* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = x[i] + y[i];
}
)";

const std::string k_inc_source = R"(
extern "C" __global__ void inc(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
)";

constexpr int k_n = 10000;

MeasureSettings quick_settings() {
  MeasureSettings s;
  s.min_samples = 3;
  s.max_samples = 8;
  s.min_time_s = 0;
  s.max_time_s = 0.5;
  s.warmup_ms = 1;
  return s;
}

std::unique_ptr<CudaRunner> make_runner() {
  auto runner = CudaRunner::create();
  REQUIRE(runner.ok());
  return std::move(runner).value();
}

// Compiles `source` for the runner's device with `defines`; returns the CUBIN's path.
std::string compile(const test::TempDir& dir, const CudaRunner& runner, const std::string& source,
                    const NamedValues& defines) {
  auto compiler = NvrtcCompiler::create();
  REQUIRE(compiler.ok());
  CompileJob job;
  job.kernel = "test";
  job.language = "cuda";
  job.source_path = dir.write("kernel.cu", source).string();
  job.defines = defines;
  job.dtype = "f32";
  job.cache_dir = (dir.path() / "cache").string();
  job.arch = cuda_arch(runner.device().cc_major, runner.device().cc_minor);
  const CompileOutcome outcome = (*compiler)->compile(job);
  INFO(outcome.log);
  REQUIRE(outcome.status == CandidateStatus::ok);
  return outcome.artifact_path;
}

BenchJob vadd_job(const std::string& artifact, const std::string& reference) {
  BenchJob job;
  job.kernel = "vadd";
  job.entry = "vadd";
  job.artifact_path = artifact;
  job.reference_path = reference;
  job.shape = "N=" + std::to_string(k_n);
  job.args = {{"X", "in", "f32", k_n, "uniform", 0},
              {"Y", "in", "f32", k_n, "uniform", 0},
              {"Z", "out", "f32", k_n, "uniform", 0},
              {"N", "scalar", "i32", 0, "uniform", static_cast<double>(k_n)}};
  job.bytes = 12.0 * k_n;
  job.settings = quick_settings();
  return job;
}

CudaLaunch linear_launch(int threads) {
  CudaLaunch launch;
  launch.grid[0] = (k_n + threads - 1) / threads;
  launch.block[0] = threads;
  return launch;
}

} // namespace

TEST_CASE("a CUDA runner without a device is no_device, not a crash", "[cuda]") {
  auto devices = list_cuda_devices();
  auto runner = CudaRunner::create();
  if (devices) {
    REQUIRE(runner.ok());
    CHECK_FALSE(runner.value()->device().name.empty());
    return;
  }
  REQUIRE_FALSE(runner.ok());
  CHECK(runner.error().code == ktune::ErrorCode::no_device);
  CHECK(runner.error().message == "cuda:0: " + devices.error().message);
  // A lane's worker sees its device as ordinal 0 and names it as the daemon does.
  auto named = CudaRunner::create(0, 0, "cuda:5");
  REQUIRE_FALSE(named.ok());
  CHECK(named.error().message == "cuda:5: " + devices.error().message);
}

TEST_CASE("CUDA runner: a correct candidate is checked and timed", "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string reference = compile(dir, *runner, k_vadd_source, {{"REFERENCE", 1}});
  const std::string candidate = compile(dir, *runner, k_vadd_source, {});
  const CudaRunOutcome result =
      runner->run_cuda(vadd_job(candidate, reference), linear_launch(128), linear_launch(256));
  INFO(result.outcome.reason);
  REQUIRE(result.outcome.status == CandidateStatus::ok);
  CHECK_FALSE(result.context_lost);
  CHECK(result.outcome.stats.n >= 3);
  CHECK(result.outcome.stats.median_ms > 0);
  CHECK(result.outcome.gbps > 0);
  REQUIRE(result.resources.has_value());
  CHECK(result.resources->registers > 0);
  CHECK(result.resources->stack_bytes == 0);
  const auto j = result.to_json();
  CHECK(j.at("status") == "ok");
  CHECK(j.at("resources").at("registers") == result.resources->registers);
  CHECK(j.at("context_lost") == false);
}

TEST_CASE("CUDA runner: a wrong candidate is mismatch naming the element", "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string reference = compile(dir, *runner, k_vadd_source, {});
  const std::string wrong = compile(dir, *runner, k_vadd_source, {{"WRONG", 1}});
  const CudaRunOutcome result =
      runner->run_cuda(vadd_job(wrong, reference), linear_launch(128), std::nullopt);
  CHECK(result.outcome.status == CandidateStatus::mismatch);
  CHECK_THAT(result.outcome.reason, Contains("Z[17]: got") && Contains("1 of 10000 elements differ"));
  // The runner goes on with the next candidate.
  const CudaRunOutcome next =
      runner->run_cuda(vadd_job(reference, reference), linear_launch(128), std::nullopt);
  CHECK(next.outcome.status == CandidateStatus::ok);
}

TEST_CASE("CUDA runner: an output element left unwritten is mismatch", "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string reference = compile(dir, *runner, k_vadd_source, {});
  const std::string skipping = compile(dir, *runner, k_vadd_source, {{"SKIP", 1}});
  const CudaRunOutcome result =
      runner->run_cuda(vadd_job(skipping, reference), linear_launch(128), std::nullopt);
  // Z[17] still holds the sentinel, a NaN, where a zero-filled buffer could have matched.
  CHECK(result.outcome.status == CandidateStatus::mismatch);
  CHECK_THAT(result.outcome.reason, Contains("Z[17]: got nan") && Contains("1 of 10000 elements differ"));
}

TEST_CASE("CUDA runner: a write past a buffer is mismatch", "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string overrun = compile(dir, *runner, k_vadd_source, {{"OVERRUN", 1}});
  const CudaRunOutcome result = runner->run_cuda(vadd_job(overrun, ""), linear_launch(128), std::nullopt);
  CHECK(result.outcome.status == CandidateStatus::mismatch);
  CHECK_THAT(result.outcome.reason, Contains("wrote past buffer end of 'Z'"));
}

TEST_CASE("CUDA runner: a block over the kernel's limit is launch_error", "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string artifact = compile(dir, *runner, k_vadd_source, {});
  BenchJob job = vadd_job(artifact, "");
  job.entry = "narrow";
  const CudaRunOutcome result = runner->run_cuda(job, linear_launch(128), std::nullopt);
  CHECK(result.outcome.status == CandidateStatus::launch_error);
  CHECK_THAT(result.outcome.reason, Contains("block of 128 threads") && Contains("at most 64"));
  CHECK_FALSE(result.context_lost);
}

TEST_CASE("CUDA runner: a missing entry or a foreign file is runtime_error", "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string artifact = compile(dir, *runner, k_vadd_source, {});
  BenchJob job = vadd_job(artifact, "");
  job.entry = "absent";
  const CudaRunOutcome missing = runner->run_cuda(job, linear_launch(128), std::nullopt);
  CHECK(missing.outcome.status == CandidateStatus::runtime_error);
  CHECK_THAT(missing.outcome.reason, Contains("no kernel 'absent'"));

  BenchJob foreign = vadd_job(dir.write("not.cubin", "text").string(), "");
  const CudaRunOutcome bad = runner->run_cuda(foreign, linear_launch(128), std::nullopt);
  CHECK(bad.outcome.status == CandidateStatus::runtime_error);
  CHECK_THAT(bad.outcome.reason, Contains("cannot load"));
}

TEST_CASE("CUDA runner: in-place kernels get fresh inputs for every launch", "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string artifact = compile(dir, *runner, k_inc_source, {});
  BenchJob job;
  job.kernel = "inc";
  job.entry = "inc";
  job.artifact_path = artifact;
  job.reference_path = artifact;
  job.shape = "N=" + std::to_string(k_n);
  job.args = {{"X", "inout", "f32", k_n, "index", 0},
              {"N", "scalar", "i32", 0, "uniform", static_cast<double>(k_n)}};
  job.inplace = true;
  job.settings = quick_settings();
  // The reference and the checked run both start from X[i] = i; a second candidate on the same
  // buffers does too.
  for (int round = 0; round < 2; ++round) {
    const CudaRunOutcome result = runner->run_cuda(job, linear_launch(256), std::nullopt);
    INFO(result.outcome.reason);
    CHECK(result.outcome.status == CandidateStatus::ok);
  }
}

TEST_CASE("CUDA runner: without launch geometry a job is runtime_error", "[cuda][gpu]") {
  test::require_cuda_device();
  auto runner = make_runner();
  const BenchOutcome outcome = runner->run(vadd_job("/nonexistent.cubin", ""));
  CHECK(outcome.status == CandidateStatus::runtime_error);
  CHECK_THAT(outcome.reason, Contains("no CUDA launch geometry"));
}

// [loses-context]: scripts/gpu-check.sh runs these last, each in its own process.
TEST_CASE("CUDA runner: an illegal address is crash and loses the context", "[cuda][gpu][loses-context]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string wild = compile(dir, *runner, k_vadd_source, {{"WILD", 1}});
  const CudaRunOutcome result = runner->run_cuda(vadd_job(wild, ""), linear_launch(128), std::nullopt);
  CHECK(result.outcome.status == CandidateStatus::crash);
  CHECK(result.context_lost);
  CHECK(runner->context_lost());
  CHECK_THAT(result.outcome.reason, Contains("CUDA_ERROR_ILLEGAL_ADDRESS"));
  const CudaRunOutcome after = runner->run_cuda(vadd_job(wild, ""), linear_launch(128), std::nullopt);
  CHECK(after.outcome.status == CandidateStatus::crash);
  CHECK_THAT(after.outcome.reason, Contains("was lost by an earlier candidate"));
}

TEST_CASE("CUDA runner: inputs from files, outputs checked against expected files",
          "[cuda][gpu]") {
  test::require_cuda_device();
  test::TempDir dir;
  auto runner = make_runner();
  const std::string artifact = compile(dir, *runner, k_vadd_source, {});
  std::vector<float> x(k_n), y(k_n), z(k_n);
  for (int i = 0; i < k_n; ++i) {
    x[i] = 1.0f / static_cast<float>(i + 3);
    y[i] = static_cast<float>(i % 7);
    z[i] = x[i] + y[i];
  }
  const auto raw = [&](const std::string& name, const std::vector<float>& values) {
    return dir.write(name, std::string(reinterpret_cast<const char*>(values.data()),
                                       values.size() * sizeof(float))).string();
  };
  BenchJob job = vadd_job(artifact, "");
  job.args[0].init = "file:" + raw("x.bin", x);
  job.args[1].init = "file:" + raw("y.bin", y);
  job.args[2].expected = raw("z.bin", z);
  const CudaRunOutcome ok = runner->run_cuda(job, linear_launch(128), std::nullopt);
  INFO(ok.outcome.reason);
  CHECK(ok.outcome.status == CandidateStatus::ok);

  z[3] += 1.0f;
  job.args[2].expected = raw("z_wrong.bin", z);
  const CudaRunOutcome wrong = runner->run_cuda(job, linear_launch(128), std::nullopt);
  CHECK(wrong.outcome.status == CandidateStatus::mismatch);
  CHECK_THAT(wrong.outcome.reason, Contains("Z[3]: got"));

  x.pop_back();
  job.args[0].init = "file:" + raw("x_short.bin", x);
  const CudaRunOutcome shorter = runner->run_cuda(job, linear_launch(128), std::nullopt);
  CHECK(shorter.outcome.status == CandidateStatus::runtime_error);
  CHECK_THAT(shorter.outcome.reason, Contains("x_short.bin: expected 10000 elements of f32"));
}
