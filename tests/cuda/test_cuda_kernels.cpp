// The CUDA kernel families in kernels_src/cuda: specs load, spaces are as large as promised, a
// sample of admitted configs compiles for sm_90 (`ktune compile-check` compiles all of them), and
// on a GPU every family's default config computes what a plain host loop computes, also as one
// of several renamed kernels of a batched module.
#include "tests/support/paths.hpp"
#include "bench/cuda_device.hpp"
#include "bench/cuda_runner.hpp"
#include "jobs/cuda_launch.hpp"
#include "bench/host_buffers.hpp"
#include "bench/runner.hpp"
#include "jobs/kernel_registry.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "core/param_space.hpp"
#include "cuda/cuda_api.hpp"
#include "tests/cuda/gpu.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace ktune;

namespace {

struct Family {
  const char* name;
  const char* shape; // where the space is checked
  std::size_t min_configs;
  const char* small_shape; // for the GPU run: odd sizes exercise the edges
};

const Family k_families[] = {
    {"gemm", "M=4096,N=4096,K=4096", 200, "M=129,N=67,K=45"},
    {"reduce_sum", "N=16777216", 50, "N=100003"},
    {"softmax", "ROWS=4096,COLS=1024", 30, "ROWS=37,COLS=1000"},
    {"transpose", "ROWS=4096,COLS=4096", 20, "ROWS=130,COLS=77"},
};

constexpr std::size_t k_sampled_configs = 6;

std::string spec_path(const std::string& name) {
  return ktune::test::source_dir() + "/kernels_src/cuda/" + name + "/kernel.toml";
}

LoadedKernel load(const std::string& name) {
  auto kernel = load_kernel(spec_path(name));
  INFO(spec_path(name));
  REQUIRE(kernel.ok());
  return std::move(kernel).value();
}

Shape shape_of(const std::string& text) {
  auto shape = Shape::parse(text);
  REQUIRE(shape.ok());
  return std::move(shape).value();
}

// `count` configs spread evenly over `configs`, first and last included.
std::vector<Config> spread(const std::vector<Config>& configs, std::size_t count) {
  std::vector<Config> out;
  if (configs.empty()) return out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t index = count == 1 ? 0 : i * (configs.size() - 1) / (count - 1);
    if (out.empty() || out.back() != configs[index]) out.push_back(configs[index]);
  }
  return out;
}

} // namespace

TEST_CASE("CUDA families: specs, spaces and a compiled sample", "[cuda]") {
  test::TempDir dir;
  auto compiler = NvrtcCompiler::create();
  REQUIRE(compiler.ok());

  for (const Family& family : k_families) {
    INFO("family " << family.name << " at " << family.shape);
    const LoadedKernel kernel = load(family.name);
    CHECK(kernel.spec.name == family.name);
    CHECK(kernel.spec.language == Language::cuda);
    REQUIRE(kernel.spec.launch.has_value());
    CHECK_FALSE(kernel.spec.bytes.empty());

    const Shape shape = shape_of(family.shape);
    auto space = ParamSpace::create(kernel.spec, shape);
    REQUIRE(space.ok());
    auto configs = space->enumerate();
    REQUIRE(configs.ok());
    CHECK(configs->size() >= family.min_configs);
    auto default_admitted = space->admits(kernel.spec.default_config);
    REQUIRE(default_admitted.ok());
    CHECK(default_admitted.value());

    std::vector<Config> sample = spread(*configs, k_sampled_configs);
    sample.push_back(kernel.spec.default_config);
    for (const Config& config : sample) {
      INFO("config " << config_to_string(config));
      auto launch = make_cuda_launch(kernel.spec, shape, config);
      REQUIRE(launch.ok());
      CHECK(launch->threads_per_block() <= 1024);
      auto job = make_compile_job(kernel, config, "f32", (dir.path() / "cache").string());
      REQUIRE(job.ok());
      job->arch = "sm_90";
      const NvrtcCompileResult result = (*compiler)->compile_with_resources(*job);
      INFO(result.outcome.log);
      REQUIRE(result.outcome.status == CandidateStatus::ok);
      REQUIRE(result.kernels.size() == 1);
      CHECK(result.kernels[0].name == result.outcome.entry_symbol);
      CHECK(result.outcome.entry_symbol.rfind(kernel.spec.entry + "_k", 0) == 0);
      CHECK(result.kernels[0].shared_bytes <= 48 * 1024);
      CHECK(result.kernels[0].registers > 0);
    }
  }
}

namespace {

using Outputs = std::vector<std::vector<double>>; // one per arg; empty unless an output

// The outputs each family must produce, computed on the host in double.
Outputs host_reference(const std::string& family, const Shape& shape,
                       const std::vector<std::vector<double>>& in) {
  Outputs out(in.size());
  if (family == "gemm") {
    const auto m = *shape.get("M"), n = *shape.get("N"), k = *shape.get("K");
    out[2].assign(static_cast<std::size_t>(m * n), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += in[0][i * k + p] * in[1][p * n + j];
        out[2][i * n + j] = s;
      }
  } else if (family == "reduce_sum") {
    double s = 0;
    for (double v : in[0]) s += v;
    out[1] = {s};
  } else if (family == "softmax") {
    const auto rows = *shape.get("ROWS"), cols = *shape.get("COLS");
    out[1].resize(in[0].size());
    for (std::int64_t r = 0; r < rows; ++r) {
      double top = -INFINITY, sum = 0;
      for (std::int64_t c = 0; c < cols; ++c) top = std::max(top, in[0][r * cols + c]);
      for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(in[0][r * cols + c] - top);
      for (std::int64_t c = 0; c < cols; ++c)
        out[1][r * cols + c] = std::exp(in[0][r * cols + c] - top) / sum;
    }
  } else if (family == "transpose") {
    const auto rows = *shape.get("ROWS"), cols = *shape.get("COLS");
    out[1].resize(in[0].size());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) out[1][c * rows + r] = in[0][r * cols + c];
  }
  return out;
}

// Runs `artifact` once with the driver API on `job`'s seeded inputs; returns every arg's
// contents afterwards (as doubles).
std::vector<std::vector<double>> run_once(const cuda::DriverApi& drv, const std::string& artifact,
                                          const BenchJob& job, const CudaLaunch& launch,
                                          std::vector<std::vector<double>>& inputs) {
  CUdevice device = 0;
  CUcontext context = nullptr;
  KTUNE_CU(drv, cuDeviceGet(&device, 0));
  KTUNE_CU(drv, cuDevicePrimaryCtxRetain(&context, device));
  KTUNE_CU(drv, cuCtxSetCurrent(context));
  std::string image;
  {
    std::ifstream in(artifact, std::ios::binary);
    image.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  CUmodule module = nullptr;
  KTUNE_CU(drv, cuModuleLoadData(&module, image.data()));
  CUfunction function = nullptr;
  KTUNE_CU(drv, cuModuleGetFunction(&function, module, job.entry.c_str()));

  std::vector<CUdeviceptr> pointers(job.args.size(), 0);
  std::vector<std::array<unsigned char, 8>> scalars(job.args.size());
  std::vector<void*> params;
  inputs.assign(job.args.size(), {});
  for (std::size_t i = 0; i < job.args.size(); ++i) {
    const BenchArg& arg = job.args[i];
    const DType dtype = *parse_dtype(arg.dtype);
    if (arg.kind == "scalar") {
      store_element(dtype, scalars[i].data(), 0, arg.value);
      params.push_back(scalars[i].data());
      continue;
    }
    const auto count = static_cast<std::size_t>(arg.count);
    std::vector<unsigned char> host(count * dtype_bytes(dtype), 0);
    if (arg.kind != "out") {
      fill_elements(dtype, host.data(), count, *parse_init_kind(arg.init), job.settings.seed, i);
    }
    for (std::size_t e = 0; e < count; ++e) inputs[i].push_back(element_as_double(dtype, host.data(), e));
    KTUNE_CU(drv, cuMemAlloc(&pointers[i], host.size()));
    KTUNE_CU(drv, cuMemcpyHtoD(pointers[i], host.data(), host.size()));
    params.push_back(&pointers[i]);
  }
  KTUNE_CU(drv, cuLaunchKernel(function, static_cast<unsigned>(launch.grid[0]),
                               static_cast<unsigned>(launch.grid[1]), static_cast<unsigned>(launch.grid[2]),
                               static_cast<unsigned>(launch.block[0]), static_cast<unsigned>(launch.block[1]),
                               static_cast<unsigned>(launch.block[2]),
                               static_cast<unsigned>(launch.shared_bytes), nullptr, params.data(), nullptr));
  std::vector<std::vector<double>> after(job.args.size());
  for (std::size_t i = 0; i < job.args.size(); ++i) {
    const BenchArg& arg = job.args[i];
    if (arg.kind == "scalar") continue;
    const DType dtype = *parse_dtype(arg.dtype);
    const auto count = static_cast<std::size_t>(arg.count);
    std::vector<unsigned char> host(count * dtype_bytes(dtype));
    KTUNE_CU(drv, cuMemcpyDtoH(host.data(), pointers[i], host.size()));
    for (std::size_t e = 0; e < count; ++e) after[i].push_back(element_as_double(dtype, host.data(), e));
    KTUNE_CU(drv, cuMemFree(pointers[i]));
  }
  KTUNE_CU(drv, cuModuleUnload(module));
  KTUNE_CU(drv, cuDevicePrimaryCtxRelease(device));
  return after;
}

} // namespace

TEST_CASE("CUDA families: default and sampled configs match a host computation", "[cuda][gpu]") {
  test::require_cuda_device();
  auto driver = cuda::load_driver();
  REQUIRE(driver.ok());
  auto props = query_cuda_device(0);
  REQUIRE(props.ok());
  test::TempDir dir;
  auto compiler = NvrtcCompiler::create();
  REQUIRE(compiler.ok());

  for (const Family& family : k_families) {
    const LoadedKernel kernel = load(family.name);
    const Shape shape = shape_of(family.small_shape);
    auto space = ParamSpace::create(kernel.spec, shape);
    REQUIRE(space.ok());
    auto configs = space->enumerate();
    REQUIRE(configs.ok());
    std::vector<Config> sample = spread(*configs, 4);
    sample.push_back(kernel.spec.default_config);
    for (const Config& config : sample) {
      INFO("family " << family.name << " at " << family.small_shape << " config "
                     << config_to_string(config));
      auto compile_job = make_compile_job(kernel, config, "f32", (dir.path() / "cache").string());
      REQUIRE(compile_job.ok());
      compile_job->arch = cuda_arch(props->cc_major, props->cc_minor);
      const CompileOutcome compiled = (*compiler)->compile(*compile_job);
      INFO(compiled.log);
      REQUIRE(compiled.status == CandidateStatus::ok);
      auto job =
          make_bench_job(kernel.spec, shape, config, "f32", compiled.artifact_path, "", MeasureSettings{});
      REQUIRE(job.ok());
      use_compiled_entries(*job, compiled.entry_symbol, "");
      auto launch = make_cuda_launch(kernel.spec, shape, config);
      REQUIRE(launch.ok());
      std::vector<std::vector<double>> inputs;
      const auto got = run_once(*driver.value(), compiled.artifact_path, *job, *launch, inputs);
      const Outputs expected = host_reference(family.name, shape, inputs);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        if (expected[i].empty()) continue;
        REQUIRE(got[i].size() == expected[i].size());
        std::size_t wrong = 0;
        std::size_t first = 0;
        for (std::size_t e = 0; e < expected[i].size(); ++e) {
          const double tolerance = 1e-4 + 1e-4 * std::abs(expected[i][e]);
          if (!(std::abs(got[i][e] - expected[i][e]) <= tolerance)) {
            if (wrong++ == 0) first = e;
          }
        }
        INFO(job->args[i].name << "[" << first << "]: got " << got[i][first] << ", expected "
                               << expected[i][first]);
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("a batched module's renamed kernels launch and pass their checks", "[cuda][gpu]") {
  test::require_cuda_device();
  auto driver = cuda::load_driver();
  REQUIRE(driver.ok());
  auto props = query_cuda_device(0);
  REQUIRE(props.ok());
  auto runner = CudaRunner::create(0);
  REQUIRE(runner.ok());
  test::TempDir dir;
  auto compiler = NvrtcCompiler::create();
  REQUIRE(compiler.ok());
  MeasureSettings quick;
  quick.min_samples = 3;
  quick.max_samples = 5;
  quick.min_time_s = 0;
  quick.max_time_s = 0.2;
  quick.warmup_ms = 1;

  for (const Family& family : k_families) {
    const LoadedKernel kernel = load(family.name);
    const Shape shape = shape_of(family.small_shape);
    auto space = ParamSpace::create(kernel.spec, shape);
    REQUIRE(space.ok());
    auto configs = space->enumerate();
    REQUIRE(configs.ok());
    const std::vector<Config> sample = spread(*configs, 6);
    const auto job_of = [&](const Config& config) {
      auto job = make_compile_job(kernel, config, "f32", (dir.path() / "cache").string());
      REQUIRE(job.ok());
      job->arch = cuda_arch(props->cc_major, props->cc_minor);
      return *job;
    };
    std::vector<CompileJob> jobs;
    for (const Config& config : sample) jobs.push_back(job_of(config));
    const auto batch = (*compiler)->compile_batch(jobs);
    const CompileOutcome reference = (*compiler)->compile(job_of(kernel.spec.default_config));
    INFO(reference.log);
    REQUIRE(reference.status == CandidateStatus::ok);

    for (std::size_t c = 0; c < sample.size(); ++c) {
      const CompileOutcome& compiled = batch[c].outcome;
      INFO("family " << family.name << " at " << family.small_shape << " config "
                     << config_to_string(sample[c]) << "\n" << compiled.log);
      REQUIRE(compiled.status == CandidateStatus::ok);
      CHECK(compiled.batch_size == static_cast<int>(sample.size()));
      auto job = make_bench_job(kernel.spec, shape, sample[c], "f32", compiled.artifact_path,
                                reference.artifact_path, quick);
      REQUIRE(job.ok());
      use_compiled_entries(*job, compiled.entry_symbol, reference.entry_symbol);
      // The runner's own check against the reference, then the outputs against the host's.
      const CudaRunOutcome run = (*runner)->run_job(*job);
      INFO(run.outcome.reason);
      CHECK(run.outcome.status == CandidateStatus::ok);
      auto launch = make_cuda_launch(kernel.spec, shape, sample[c]);
      REQUIRE(launch.ok());
      std::vector<std::vector<double>> inputs;
      const auto got = run_once(*driver.value(), compiled.artifact_path, *job, *launch, inputs);
      const Outputs expected = host_reference(family.name, shape, inputs);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        if (expected[i].empty()) continue;
        REQUIRE(got[i].size() == expected[i].size());
        std::size_t wrong = 0;
        for (std::size_t e = 0; e < expected[i].size(); ++e) {
          if (!(std::abs(got[i][e] - expected[i][e]) <= 1e-4 + 1e-4 * std::abs(expected[i][e]))) ++wrong;
        }
        CHECK(wrong == 0);
      }
    }
  }
}
