// The shipped CPU kernel families: their spaces have the intended size, and a sample of the
// admitted configs compiles warning-free and computes the right answer, ragged shapes included.
#include "tests/support/paths.hpp"
#include <catch2/catch.hpp>

#include "compiler/host_compiler.hpp"
#include "jobs/kernel_registry.hpp"
#include "core/param_space.hpp"
#include "tests/support/temp_dir.hpp"

#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <vector>

using ktune::CandidateStatus;
using ktune::Config;

namespace {

const std::string k_kernels_dir = ktune::test::source_dir() + "/kernels_src";

ktune::LoadedKernel load_family(const std::string& name) {
  auto kernel = ktune::load_kernel(k_kernels_dir + "/" + name + "/kernel.toml");
  if (!kernel.ok()) FAIL(kernel.error().message);
  return *kernel;
}

std::vector<Config> admitted(const ktune::LoadedKernel& kernel, const std::string& shape_text) {
  auto shape = ktune::Shape::parse(shape_text);
  REQUIRE(shape.ok());
  auto conformed = ktune::conform_shape(*shape, kernel.spec.shape_dims, kernel.spec.name);
  REQUIRE(conformed.ok());
  auto space = ktune::ParamSpace::create(kernel.spec, *conformed);
  REQUIRE(space.ok());
  auto configs = space->enumerate();
  REQUIRE(configs.ok());
  return *configs;
}

// Up to `count` configs spread evenly over `configs`, first and last included.
std::vector<Config> sample_evenly(const std::vector<Config>& configs, std::size_t count) {
  if (configs.size() <= count) return configs;
  std::vector<Config> sample;
  for (std::size_t i = 0; i < count; ++i)
    sample.push_back(configs[i * (configs.size() - 1) / (count - 1)]);
  return sample;
}

// The shared object of one config, opened; checks that the compiler printed nothing.
class Compiled {
public:
  Compiled(ktune::HostCompiler& compiler, const ktune::LoadedKernel& kernel, const Config& config,
           const std::string& dtype, const std::string& cache_dir) {
    auto job = ktune::make_compile_job(kernel, config, dtype, cache_dir);
    REQUIRE(job.ok());
    job->extra_flags.push_back("-Wall");
    job->extra_flags.push_back("-Wextra");
    auto outcome = compiler.compile(*job);
    INFO(kernel.spec.name << " " << ktune::config_to_string(config) << " " << dtype);
    INFO(outcome.log);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.log.empty());
    m_handle = ::dlopen(outcome.artifact_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(m_handle != nullptr);
    CHECK(outcome.entry_symbol == kernel.spec.entry + "_k" + outcome.cache_key.substr(0, 16));
    m_entry = reinterpret_cast<void (*)(void**)>(::dlsym(m_handle, outcome.entry_symbol.c_str()));
    REQUIRE(m_entry != nullptr);
  }
  ~Compiled() {
    if (m_handle != nullptr) ::dlclose(m_handle);
  }
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;

  void operator()(void** args) const { m_entry(args); }

private:
  void* m_handle = nullptr;
  void (*m_entry)(void**) = nullptr;
};

template <class T>
std::vector<T> pseudo_random(std::size_t count, std::uint32_t seed) {
  std::vector<T> values(count);
  std::uint32_t state = seed;
  for (auto& value : values) {
    state = state * 1664525u + 1013904223u;
    value = static_cast<T>(static_cast<double>(state >> 8) / double(1 << 24) * 2.0 - 1.0);
  }
  return values;
}

// Runs gemm at M x N x K and returns the largest error against a double-precision reference,
// relative to the sum of the magnitudes of the products (the scale of the rounding error).
template <class T>
double gemm_error(const Compiled& gemm, std::int64_t m, std::int64_t n, std::int64_t k) {
  const auto a = pseudo_random<T>(static_cast<std::size_t>(m * k), 1);
  const auto b = pseudo_random<T>(static_cast<std::size_t>(k * n), 2);
  std::vector<T> c(static_cast<std::size_t>(m * n), T(12345));
  void* args[] = {const_cast<T*>(a.data()), const_cast<T*>(b.data()), c.data(), &m, &n, &k};
  gemm(args);
  double worst = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double expected = 0, scale = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double product = double(a[i * k + p]) * double(b[p * n + j]);
        expected += product;
        scale += std::fabs(product);
      }
      const double error = std::fabs(double(c[i * n + j]) - expected) / scale;
      worst = std::max(worst, error);
    }
  }
  return worst;
}

// The error of reduce_sum over N elements, relative to the sum of their magnitudes.
template <class T>
double reduce_error(const Compiled& reduce, std::int64_t n) {
  const auto x = pseudo_random<T>(static_cast<std::size_t>(n), 3);
  T out = T(12345);
  void* args[] = {const_cast<T*>(x.data()), &out, &n};
  reduce(args);
  double expected = 0, scale = 0;
  for (const T value : x) {
    expected += double(value);
    scale += std::fabs(double(value));
  }
  return std::fabs(double(out) - expected) / scale;
}

} // namespace

TEST_CASE("gemm and reduce_sum spaces have a tunable size", "[compiler]") {
  const auto gemm = load_family("gemm");
  const auto large = admitted(gemm, "M=256,N=256,K=256");
  CHECK(large.size() >= 64);
  CHECK(large.size() <= 150);
  const auto small = admitted(gemm, "M=8,N=8,K=8");
  CHECK_FALSE(small.empty());
  CHECK(small.size() < large.size());

  const auto reduce = load_family("reduce_sum");
  CHECK(admitted(reduce, "N=1000000").size() >= 20);
  CHECK_FALSE(admitted(reduce, "N=1").empty());
}

TEST_CASE("gemm configs compile warning-free and compute C = A * B", "[compiler]") {
  ktune::test::TempDir dir;
  ktune::HostCompiler compiler;
  const auto gemm = load_family("gemm");
  const auto configs = sample_evenly(admitted(gemm, "M=64,N=64,K=64"), 8);
  REQUIRE(configs.size() >= 2);
  for (const auto& config : configs) {
    INFO(ktune::config_to_string(config));
    Compiled kernel(compiler, gemm, config, "f32", dir.str());
    CHECK(gemm_error<float>(kernel, 64, 64, 64) < 1e-5);
    CHECK(gemm_error<float>(kernel, 37, 29, 45) < 1e-5);   // partial blocks and tiles
    CHECK(gemm_error<float>(kernel, 1, 1, 1) < 1e-6);
  }

  SECTION("f64 with the default config") {
    Compiled kernel(compiler, gemm, gemm.spec.default_config, "f64", dir.str());
    CHECK(gemm_error<double>(kernel, 70, 130, 150) < 1e-12);
  }
}

TEST_CASE("reduce_sum configs compile warning-free and sum the vector", "[compiler]") {
  ktune::test::TempDir dir;
  ktune::HostCompiler compiler;
  const auto reduce = load_family("reduce_sum");
  const auto configs = sample_evenly(admitted(reduce, "N=100000"), 8);
  REQUIRE(configs.size() >= 2);
  for (const auto& config : configs) {
    INFO(ktune::config_to_string(config));
    Compiled kernel(compiler, reduce, config, "f32", dir.str());
    CHECK(reduce_error<float>(kernel, 100000) < 1e-5);
    CHECK(reduce_error<float>(kernel, 1003) < 1e-5);       // a partial chunk and lane tail
    CHECK(reduce_error<float>(kernel, 1) < 1e-7);
  }

  SECTION("f64 with the default config") {
    Compiled kernel(compiler, reduce, reduce.spec.default_config, "f64", dir.str());
    CHECK(reduce_error<double>(kernel, 100003) < 1e-12);
  }
}
