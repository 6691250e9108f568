// NvrtcCompiler::compile_batch: several configs per nvrtc program, split on failure, one cache
// entry per config, per-config resources, precompiled headers.
#include "tests/support/paths.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "core/param_space.hpp"
#include "jobs/kernel_registry.hpp"

#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

using namespace ktune;
using Catch::Matchers::Contains;

namespace {

// A family-like source whose config FACTOR = 3 does not compile; a helper kernel of its own in
// every config, so a config's kernels are more than its entry.
const std::string k_source = R"(#if FACTOR == 3
#error "FACTOR 3 is refused"
#endif
#define SCALE_BY FACTOR
namespace {
__device__ KTUNE_DTYPE times(KTUNE_DTYPE v) { return v * static_cast<KTUNE_DTYPE>(SCALE_BY); }
}
__global__ void helper(KTUNE_DTYPE* x) { x[threadIdx.x] = times(x[threadIdx.x]); }
extern "C" __global__ void scale(KTUNE_DTYPE* x, int n) {
  __shared__ KTUNE_DTYPE tile[32 * FACTOR];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x % (32 * FACTOR)] = i < n ? x[i] : KTUNE_DTYPE(0);
  __syncthreads();
  if (i < n) x[i] = times(tile[(threadIdx.x + 1) % (32 * FACTOR)]);
}
)";

std::unique_ptr<NvrtcCompiler> make_compiler() {
  auto compiler = NvrtcCompiler::create();
  REQUIRE(compiler.ok());
  return std::move(compiler).value();
}

CompileJob job_for(const test::TempDir& dir, int factor, const std::string& source = k_source,
                   const std::string& name = "scale") {
  CompileJob job;
  job.kernel = name;
  job.language = "cuda";
  job.source_path = dir.write(name + "/kernel.cu", source).string();
  job.include_dirs = {(dir.path() / name).string()};
  job.defines = {{"FACTOR", factor}};
  job.dtype = "f32";
  job.entry = "scale";
  job.source_hash = "hash-of-" + name;
  job.cache_dir = (dir.path() / "cache").string();
  job.arch = "sm_90";
  return job;
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_ino;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

TEST_CASE("compile_batch builds configs in one program, renamed, one cache entry each", "[cuda][batch]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  std::vector<CompileJob> jobs;
  for (const int factor : {1, 2, 4, 5}) jobs.push_back(job_for(dir, factor));

  const auto results = compiler->compile_batch(jobs);
  REQUIRE(results.size() == jobs.size());
  std::set<std::string> symbols, paths;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const CompileOutcome& outcome = results[i].outcome;
    INFO(outcome.log);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.batch_size == 4);
    CHECK_FALSE(outcome.cached);
    CHECK(outcome.cache_key == compiler->cache_key(jobs[i]));
    CHECK(outcome.artifact_path == cuda_artifact_path(jobs[i].cache_dir, outcome.cache_key));
    CHECK(outcome.entry_symbol == "scale_k" + outcome.cache_key.substr(0, 16));
    CHECK(outcome.batch_error.empty());
    symbols.insert(outcome.entry_symbol);
    paths.insert(outcome.artifact_path);
    // The config's kernels: its entry and its own helper, not the other configs'.
    REQUIRE(results[i].kernels.size() == 2);
    CHECK(results[i].kernels[0].name != results[i].kernels[1].name);
    CHECK((results[i].kernels[0].name == outcome.entry_symbol || results[i].kernels[1].name == outcome.entry_symbol));
    CHECK(outcome.shared_bytes == 32 * 4 * static_cast<int>(jobs[i].defines[0].second));
  }
  CHECK(symbols.size() == 4);
  CHECK(paths.size() == 4);
  // One CUBIN, linked to every key.
  CHECK(inode_of(results[0].outcome.artifact_path) == inode_of(results[3].outcome.artifact_path));
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path() / "cache")) {
    CHECK(entry.path().string().find(".tmp.") == std::string::npos);
  }

  SECTION("a re-run and a partly cached batch compile nothing twice") {
    std::vector<CompileJob> more = jobs;
    more.push_back(job_for(dir, 6));
    more.push_back(job_for(dir, 7));
    const auto again = compiler->compile_batch(more);
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      CHECK(again[i].outcome.cached);
      CHECK(again[i].outcome.batch_size == 0);
      CHECK(again[i].outcome.registers == results[i].outcome.registers);
      CHECK(again[i].kernels.size() == 2);  // its own kernels only, out of the shared CUBIN
    }
    for (std::size_t i = jobs.size(); i < more.size(); ++i) {
      CHECK(again[i].outcome.status == CandidateStatus::ok);
      CHECK_FALSE(again[i].outcome.cached);
      CHECK(again[i].outcome.batch_size == 2);
    }
  }
  SECTION("a single compile of a config finds it as the batch left it") {
    const CompileOutcome alone = compiler->compile(jobs[2]);
    CHECK(alone.cached);
    CHECK(alone.entry_symbol == results[2].outcome.entry_symbol);
    CHECK(alone.artifact_path == results[2].outcome.artifact_path);
  }
}

TEST_CASE("a config that does not compile fails alone, and the rest of its batch is ok", "[cuda][batch]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  std::vector<CompileJob> jobs;
  for (const int factor : {1, 2, 3, 4, 5, 6, 7, 8}) jobs.push_back(job_for(dir, factor));
  const auto results = compiler->compile_batch(jobs);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const CompileOutcome& outcome = results[i].outcome;
    INFO("FACTOR " << jobs[i].defines[0].second << "\n" << outcome.log);
    CHECK(outcome.batch_error.empty());
    if (jobs[i].defines[0].second == 3) {
      CHECK(outcome.status == CandidateStatus::compile_error);
      CHECK(outcome.batch_size == 1);
      CHECK_THAT(outcome.log, Contains(jobs[i].source_path + "(2): catastrophic error") && Contains("FACTOR 3 is refused"));
      CHECK(outcome.infra.empty());
      CHECK_FALSE(std::filesystem::exists(cuda_artifact_path(jobs[i].cache_dir, outcome.cache_key)));
    } else {
      CHECK(outcome.status == CandidateStatus::ok);
      CHECK(outcome.batch_size >= 1);
    }
  }
  // The halves without the failing config stayed together.
  CHECK(results[7].outcome.batch_size == 4);
}

TEST_CASE("configs that fail only together are compiled alone and say why", "[cuda][batch]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  // A second extern "C" function: one symbol per config, which clash in one program.
  const std::string source = k_source + "extern \"C\" __global__ void unrenamed(KTUNE_DTYPE* x) { x[0] = 1; }\n";
  std::vector<CompileJob> jobs;
  for (const int factor : {1, 2}) jobs.push_back(job_for(dir, factor, source, "clash"));
  const auto results = compiler->compile_batch(jobs);
  for (const auto& result : results) {
    INFO(result.outcome.log);
    CHECK(result.outcome.status == CandidateStatus::ok);
    CHECK(result.outcome.batch_size == 1);
    CHECK_THAT(result.outcome.batch_error, Contains("a batch of 2 configs failed"));
  }
}

TEST_CASE("a source that cannot share a program compiles alone under its own entry name", "[cuda][batch]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  std::vector<CompileJob> jobs;
  for (const int factor : {1, 2}) {
    jobs.push_back(job_for(dir, factor, "#pragma once\n" + k_source, "once"));
  }
  const auto results = compiler->compile_batch(jobs);
  for (const auto& result : results) {
    INFO(result.outcome.log);
    CHECK(result.outcome.status == CandidateStatus::ok);
    CHECK(result.outcome.batch_size == 1);
    CHECK(result.outcome.entry_symbol.empty());
    CHECK_THAT(result.outcome.batch_error, Contains("pragma once"));
  }
}

TEST_CASE("resources per config match one-config programs over every config of reduce_sum", "[cuda][batch]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  auto kernel = load_kernel(ktune::test::source_dir() + "/kernels_src/cuda/reduce_sum/kernel.toml");
  REQUIRE(kernel.ok());
  auto space = ParamSpace::create(kernel->spec, Shape::parse("N=16777216").value());
  REQUIRE(space.ok());
  const auto configs = space->enumerate();
  REQUIRE(configs.ok());
  REQUIRE(configs->size() >= 50);

  std::vector<CompileJob> batched, alone;
  for (const Config& config : *configs) {
    auto job = make_compile_job(*kernel, config, "f32", (dir.path() / "cache").string());
    REQUIRE(job.ok());
    job->arch = "sm_90";
    batched.push_back(*job);
    job->entry.clear();  // nothing to rename: one program of its own, the config on the command line
    alone.push_back(*job);
  }
  std::vector<NvrtcCompileResult> from_batches;
  for (std::size_t i = 0; i < batched.size(); i += 8) {
    const std::vector<CompileJob> unit(batched.begin() + static_cast<std::ptrdiff_t>(i),
                                       batched.begin() + static_cast<std::ptrdiff_t>(std::min(i + 8, batched.size())));
    for (auto& result : compiler->compile_batch(unit)) from_batches.push_back(std::move(result));
  }
  for (std::size_t i = 0; i < alone.size(); ++i) {
    INFO(config_to_string((*configs)[i]));
    const NvrtcCompileResult single = compiler->compile_with_resources(alone[i]);
    const CompileOutcome& in_batch = from_batches[i].outcome;
    REQUIRE(single.outcome.status == CandidateStatus::ok);
    REQUIRE(in_batch.status == CandidateStatus::ok);
    CHECK(in_batch.batch_size > 1);
    CHECK(single.outcome.entry_symbol.empty());
    CHECK(in_batch.registers == single.outcome.registers);
    CHECK(in_batch.spills == single.outcome.spills);
    CHECK(in_batch.shared_bytes == single.outcome.shared_bytes);
    REQUIRE(from_batches[i].kernels.size() == 1);
    CHECK(from_batches[i].kernels[0].stack_bytes == single.kernels.at(0).stack_bytes);
  }
}

TEST_CASE("an f16 unit is compiled with a precompiled header, to the same CUBIN", "[cuda][batch][pch]") {
  test::TempDir dir;
  const std::string source = "#include <cuda_bf16.h>\n" + k_source;
  const auto f16_job = [&](int factor, const std::string& cache) {
    CompileJob job = job_for(dir, factor, source, "half");
    job.dtype = "f16";
    job.cache_dir = (dir.path() / cache).string();
    return job;
  };
  auto compiler = make_compiler();
  const auto first = compiler->compile_batch({f16_job(1, "a"), f16_job(2, "a")});
  const auto second = compiler->compile_batch({f16_job(4, "a"), f16_job(5, "a")});
  for (const auto* results : {&first, &second}) {
    for (const auto& result : *results) {
      INFO(result.outcome.log);
      REQUIRE(result.outcome.status == CandidateStatus::ok);
      CHECK(result.outcome.log.find("precompiled header") == std::string::npos);
    }
  }
  const auto counts = compiler->pch_counts();
  CHECK(counts.created == 1);
  CHECK(counts.used == 1);
  CHECK(counts.failed == 0);
  // The PCH lives on as an open descriptor only: nothing of this process's is left on disk.
  const char* tmp = std::getenv("TMPDIR");
  const std::string mine = "ktune-pch." + std::to_string(::getpid()) + ".";
  for (const auto& entry : std::filesystem::directory_iterator(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp")) {
    CHECK(entry.path().filename().string().rfind(mine, 0) != 0);
  }

  // The same unit in a compiler that has no PCH yet (its compile creates one, never uses one).
  auto fresh = make_compiler();
  const auto without = fresh->compile_batch({f16_job(4, "b"), f16_job(5, "b")});
  REQUIRE(without[0].outcome.status == CandidateStatus::ok);
  CHECK(fresh->pch_counts().used == 0);
  CHECK(bytes_of(without[0].outcome.artifact_path) == bytes_of(second[0].outcome.artifact_path));
}
