#include "compiler/nvrtc_compiler.hpp"

#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace ktune;
using Catch::Matchers::Contains;

namespace {

const std::string k_scale_source = R"(extern "C" __global__ void scale(KTUNE_DTYPE* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= FACTOR;
}
)";

std::unique_ptr<NvrtcCompiler> make_compiler() {
  auto compiler = NvrtcCompiler::create();
  REQUIRE(compiler.ok());
  return std::move(compiler).value();
}

CompileJob scale_job(const test::TempDir& dir, const std::string& arch) {
  CompileJob job;
  job.kernel = "scale";
  job.language = "cuda";
  job.source_path = dir.write("src/kernel.cu", k_scale_source).string();
  job.include_dirs = {(dir.path() / "src").string()};
  job.defines = {{"FACTOR", 3}};
  job.dtype = "f32";
  job.source_hash = "hash-of-scale";
  job.cache_dir = (dir.path() / "cache").string();
  job.arch = arch;
  return job;
}

std::string head(const std::string& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

} // namespace

TEST_CASE("nvrtc compiles a kernel to CUBIN for sm_80 and sm_90, then serves the cache", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  CHECK_FALSE(compiler->version().empty());

  for (const std::string arch : {"sm_80", "sm_90"}) {
    INFO(arch);
    const CompileJob job = scale_job(dir, arch);
    const NvrtcCompileResult first = compiler->compile_with_resources(job);
    INFO(first.outcome.log);
    REQUIRE(first.outcome.status == CandidateStatus::ok);
    CHECK_FALSE(first.outcome.cached);
    CHECK(first.outcome.compile_ms > 0);
    CHECK(first.outcome.artifact_path == cuda_artifact_path(job.cache_dir, first.outcome.cache_key));
    CHECK(first.outcome.artifact_path.find("/" + first.outcome.cache_key.substr(0, 2) + "/") !=
          std::string::npos);
    CHECK(head(first.outcome.artifact_path, 4) ==
          "\x7f"
          "ELF");
    CHECK_THAT(first.outcome.log, Contains("Compiling entry function 'scale' for '" + arch + "'"));
    REQUIRE(first.kernels.size() == 1);
    CHECK(first.kernels[0].name == "scale");
    CHECK(first.kernels[0].registers > 0);
    CHECK(first.kernels[0].spill_store_bytes == 0);

    const auto j = first.to_json();
    CHECK(j.at("status") == "ok");
    CHECK(j.at("kernels").at(0).at("name") == "scale");
    CHECK(j.at("kernels").at(0).at("registers") == first.kernels[0].registers);

    const NvrtcCompileResult second = compiler->compile_with_resources(job);
    REQUIRE(second.outcome.status == CandidateStatus::ok);
    CHECK(second.outcome.cached);
    CHECK(second.outcome.artifact_path == first.outcome.artifact_path);
    REQUIRE(second.kernels.size() == 1);
    CHECK(second.kernels[0].registers == first.kernels[0].registers);
    CHECK(second.kernels[0].spill_store_bytes == -1); // no ptxas report without a compile
  }
  // No temp files left behind.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path() / "cache")) {
    CHECK(entry.path().string().find(".tmp.") == std::string::npos);
  }
}

TEST_CASE("the cache key covers what changes the CUBIN", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  const CompileJob base = scale_job(dir, "sm_90");
  const std::string key = compiler->cache_key(base);
  CHECK(key.size() == 32);

  CompileJob other_arch = base;
  other_arch.arch = "sm_80";
  CompileJob other_define = base;
  other_define.defines = {{"FACTOR", 4}};
  CompileJob other_dtype = base;
  other_dtype.dtype = "f64";
  CompileJob other_flags = base;
  other_flags.extra_flags = {"--use_fast_math"};
  CompileJob other_source = base;
  other_source.source_hash = "another-hash";
  for (const CompileJob* changed : {&other_arch, &other_define, &other_dtype, &other_flags, &other_source}) {
    CHECK(compiler->cache_key(*changed) != key);
  }

  CompileJob reordered = base;
  reordered.defines = {{"B", 2}, {"A", 1}};
  CompileJob ordered = base;
  ordered.defines = {{"A", 1}, {"B", 2}};
  CHECK(compiler->cache_key(reordered) == compiler->cache_key(ordered));
}

TEST_CASE("a compile error is compile_error with nvrtc's log naming the line", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  CompileJob job = scale_job(dir, "sm_90");
  job.source_path = dir.write("broken/kernel.cu",
                              "extern \"C\" __global__ void scale(float* x, int n) {\n"
                              "  int i = threadIdx.x;\n"
                              "  x[i] = undeclared_name;\n"
                              "}\n")
                        .string();
  job.source_hash = "hash-of-broken";
  const CompileOutcome outcome = compiler->compile(job);
  CHECK(outcome.status == CandidateStatus::compile_error);
  CHECK(outcome.artifact_path.empty());
  CHECK_THAT(outcome.log, Contains(job.source_path + "(3): error") && Contains("undeclared_name"));
  CHECK(outcome.log.rfind(job.source_path + "(3): error", 0) == 0); // the first line is the error
  CHECK_FALSE(std::filesystem::exists(cuda_artifact_path(job.cache_dir, outcome.cache_key)));
}

TEST_CASE("jobs nvrtc cannot build are compile_error with the reason", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  const CompileJob base = scale_job(dir, "sm_90");

  SECTION("a C++ job") {
    CompileJob job = base;
    job.language = "cpp";
    const CompileOutcome outcome = compiler->compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Contains("language 'cuda'") && Contains("'cpp'"));
  }
  SECTION("no arch") {
    CompileJob job = base;
    job.arch.clear();
    CHECK_THAT(compiler->compile(job).log, Contains("needs an arch (e.g. sm_90)"));
  }
  SECTION("a malformed arch") {
    CompileJob job = base;
    job.arch = "compute_90";
    CHECK_THAT(compiler->compile(job).log, Contains("arch 'compute_90'"));
  }
  SECTION("an arch this nvrtc does not support") {
    CompileJob job = base;
    job.arch = "sm_10";
    const CompileOutcome outcome = compiler->compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Contains("'sm_10' is not supported by nvrtc") && Contains("sm_90"));
  }
  SECTION("an unknown dtype") {
    CompileJob job = base;
    job.dtype = "q8";
    CHECK_THAT(compiler->compile(job).log, Contains("dtype 'q8'"));
  }
  SECTION("a define that is not an identifier") {
    CompileJob job = base;
    job.defines = {{"FACTOR=1 -DX", 1}};
    CHECK_THAT(compiler->compile(job).log, Contains("is not a C identifier"));
  }
  SECTION("an option nvrtc rejects") {
    CompileJob job = base;
    job.extra_flags = {"--no-such-option"};
    const CompileOutcome outcome = compiler->compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Contains("NVRTC_ERROR_INVALID_OPTION"));
  }
  SECTION("a missing source") {
    CompileJob job = base;
    job.source_path = (dir.path() / "missing.cu").string();
    job.source_hash = "hash-of-missing";
    CHECK_THAT(compiler->compile(job).log, Contains("cannot read source " + job.source_path));
  }
}

TEST_CASE("a corrupt cached file is compiled again", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  const CompileJob job = scale_job(dir, "sm_90");
  const std::string path = cuda_artifact_path(job.cache_dir, compiler->cache_key(job));
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "not a cubin";
  const CompileOutcome outcome = compiler->compile(job);
  REQUIRE(outcome.status == CandidateStatus::ok);
  CHECK_FALSE(outcome.cached);
  CHECK(head(path, 4) ==
        "\x7f"
        "ELF");
}

TEST_CASE("nvrtc options", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  CompileJob job = scale_job(dir, "sm_90");
  job.extra_flags = {"--use_fast_math"};
  auto options = compiler->options(job);
  REQUIRE(options.ok());
  const auto has = [&](const std::string& o) {
    return std::find(options->begin(), options->end(), o) != options->end();
  };
  CHECK(options->front() == "--gpu-architecture=sm_90");
  CHECK(has("-std=c++17"));
  CHECK(has("-DKTUNE_DTYPE=float"));
  CHECK(has("-DKTUNE_DTYPE_F32=1"));
  CHECK(has("-DFACTOR=3"));
  CHECK(has("-I" + job.include_dirs[0]));
  CHECK(options->back() == "--use_fast_math");
  CHECK(cuda_dtype_c_type("i64").value() == "long long");
  CHECK(cuda_dtype_c_type("f16").value() == "__half");
  CHECK(is_cuda_arch("sm_90a"));
  CHECK(is_cuda_arch("sm_100f"));
  CHECK_FALSE(is_cuda_arch("sm_"));
  CHECK_FALSE(is_cuda_arch("sm_90x"));
}

TEST_CASE("the toolkit's CCCL headers (<cuda/std/...>, CUB) are found", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  CompileJob job = scale_job(dir, "sm_90");
  job.source_path = dir.write("cccl/kernel.cu",
                              "#include <cuda/std/type_traits>\n"
                              "#include <cub/warp/warp_reduce.cuh>\n"
                              "static_assert(cuda::std::is_same_v<KTUNE_DTYPE, float>, \"f32\");\n"
                              "extern \"C\" __global__ void scale(KTUNE_DTYPE* x, int n) {\n"
                              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "  if (i < n) x[i] *= FACTOR;\n"
                              "}\n")
                        .string();
  job.source_hash = "hash-of-cccl";
  const CompileOutcome outcome = compiler->compile(job);
  INFO(outcome.log);
  CHECK(outcome.status == CandidateStatus::ok);
}

TEST_CASE("f16 and bf16 jobs get their type's header without including it", "[cuda]") {
  test::TempDir dir;
  auto compiler = make_compiler();
  for (const auto& [dtype, convert] : {std::pair{"f16", "__float2half"}, std::pair{"bf16", "__float2bfloat16"}}) {
    INFO(dtype);
    CompileJob job = scale_job(dir, "sm_90");
    job.dtype = dtype;
    job.source_path = dir.write(std::string(dtype) + "/kernel.cu",
                                std::string("extern \"C\" __global__ void scale(KTUNE_DTYPE* x, int n) {\n"
                                            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                            "  if (i < n) x[i] = x[i] * ") +
                                    convert + "(1.0f * FACTOR);\n}\n")
                          .string();
    job.source_hash = std::string("hash-of-") + dtype;
    const CompileOutcome outcome = compiler->compile(job);
    INFO(outcome.log);
    CHECK(outcome.status == CandidateStatus::ok);
  }
}
