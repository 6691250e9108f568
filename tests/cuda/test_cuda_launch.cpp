#include "jobs/cuda_launch.hpp"
#include "jobs/bench_job.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace ktune;
using Catch::Matchers::Contains;

namespace {

const std::string k_spec = R"toml(
[kernel]
name = "tiles"
language = "cuda"
source = "kernel.cu"
entry = "tiles"
shape = ["M", "N"]
dtypes = ["f32"]

[params]
BM = [16, 32, 64]
BN = [16, 32, 2048]

[launch]
grid = ["ceil_div(N, BN)", "ceil_div(M, BM)", "1"]
block = ["BN", "BM / 16", "1"]
shared_bytes = "BM * BN * 4"

[[args]]
name = "C"
kind = "out"
count = "M * N"

[default]
BM = 32
BN = 32
)toml";

KernelSpec spec_of(const std::string& text) {
  auto spec = parse_kernel_spec(text, "tiles/kernel.toml");
  REQUIRE(spec.ok());
  return std::move(spec).value();
}

Shape shape_of(const std::string& text) {
  auto shape = Shape::parse(text);
  REQUIRE(shape.ok());
  return std::move(shape).value();
}

} // namespace

TEST_CASE("launch geometry from the spec's expressions", "[cuda]") {
  const KernelSpec spec = spec_of(k_spec);
  auto launch = make_cuda_launch(spec, shape_of("M=1000,N=100"), {{"BM", 64}, {"BN", 32}});
  REQUIRE(launch.ok());
  CHECK(launch->grid[0] == 4);
  CHECK(launch->grid[1] == 16);
  CHECK(launch->grid[2] == 1);
  CHECK(launch->block[0] == 32);
  CHECK(launch->block[1] == 4);
  CHECK(launch->block[2] == 1);
  CHECK(launch->shared_bytes == 64 * 32 * 4);
  CHECK(launch->threads_per_block() == 128);
  CHECK(launch->to_string() == "grid 4x16x1, block 32x4x1, 8192 B shared");
}

TEST_CASE("launches CUDA cannot run are invalid_config", "[cuda]") {
  const KernelSpec spec = spec_of(k_spec);
  SECTION("a block dimension over 1024") {
    auto launch = make_cuda_launch(spec, shape_of("M=64,N=4096"), {{"BM", 16}, {"BN", 2048}});
    REQUIRE_FALSE(launch.ok());
    CHECK(launch.error().code == ktune::ErrorCode::bad_launch);
    CHECK_THAT(launch.error().message, Contains("[launch].block[0] 'BN' = 2048") && Contains("BN=2048"));
  }
  SECTION("a dimension below 1") {
    KernelSpec zero = spec;
    zero.launch->block[1] = "BM / 128";
    auto launch = make_cuda_launch(zero, shape_of("M=64,N=64"), {{"BM", 64}, {"BN", 32}});
    REQUIRE_FALSE(launch.ok());
    CHECK(launch.error().code == ktune::ErrorCode::bad_launch);
    CHECK_THAT(launch.error().message, Contains("[launch].block[1]") && Contains("= 0"));
  }
  SECTION("too many threads in all") {
    KernelSpec wide = spec;
    wide.launch->block[1] = "BM";
    auto launch = make_cuda_launch(wide, shape_of("M=64,N=64"), {{"BM", 64}, {"BN", 32}});
    REQUIRE_FALSE(launch.ok());
    CHECK(launch.error().code == ktune::ErrorCode::bad_launch);
    CHECK_THAT(launch.error().message, Contains("2048 threads"));
  }
  SECTION("a grid over CUDA's y limit") {
    auto launch = make_cuda_launch(spec, shape_of("M=2097152,N=64"), {{"BM", 16}, {"BN", 32}});
    REQUIRE_FALSE(launch.ok());
    CHECK(launch.error().code == ktune::ErrorCode::bad_launch);
    CHECK_THAT(launch.error().message, Contains("[launch].grid[1]") && Contains("65535"));
  }
}

TEST_CASE("launch expressions that do not evaluate are bad_expression", "[cuda]") {
  KernelSpec spec = spec_of(k_spec);
  spec.launch->grid[0] = "N / (BN - BN)";
  auto launch = make_cuda_launch(spec, shape_of("M=64,N=64"), {{"BM", 32}, {"BN", 32}});
  REQUIRE_FALSE(launch.ok());
  CHECK(launch.error().code == ktune::ErrorCode::bad_expression);
  CHECK_THAT(launch.error().message, Contains("kernel tiles at M=64,N=64") && Contains("[launch].grid[0]"));

  spec.launch.reset();
  auto missing = make_cuda_launch(spec, shape_of("M=64,N=64"), {{"BM", 32}, {"BN", 32}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ktune::ErrorCode::spec_error);
}

TEST_CASE("launch geometry to and from JSON", "[cuda]") {
  CudaLaunch launch;
  launch.grid[0] = 128;
  launch.grid[1] = 64;
  launch.block[0] = 256;
  launch.shared_bytes = 4096;
  const auto j = launch.to_json();
  CHECK(j.dump() == R"({"block":[256,1,1],"grid":[128,64,1],"shared_bytes":4096})");
  auto back = CudaLaunch::from_json(j);
  REQUIRE(back.ok());
  CHECK(back.value() == launch);

  SECTION("malformed") {
    auto not_object = CudaLaunch::from_json(nlohmann::json::array());
    REQUIRE_FALSE(not_object.ok());
    CHECK(not_object.error().code == ktune::ErrorCode::bad_request);

    auto two_dims = CudaLaunch::from_json(nlohmann::json{{"grid", {1, 1}}, {"block", {1, 1, 1}}});
    REQUIRE_FALSE(two_dims.ok());
    CHECK_THAT(two_dims.error().message, Contains("'launch.grid'"));

    auto zero =
        CudaLaunch::from_json(nlohmann::json{{"grid", {1, 0, 1}}, {"block", {1, 1, 1}}}, "reference_launch");
    REQUIRE_FALSE(zero.ok());
    CHECK_THAT(zero.error().message, Contains("'reference_launch.grid[1]'") && Contains(">= 1"));

    auto negative = CudaLaunch::from_json(
        nlohmann::json{{"grid", {1, 1, 1}}, {"block", {1, 1, 1}}, {"shared_bytes", -1}});
    REQUIRE_FALSE(negative.ok());
    CHECK_THAT(negative.error().message, Contains("shared_bytes"));

    auto no_block = CudaLaunch::from_json(nlohmann::json{{"grid", {1, 1, 1}}});
    REQUIRE_FALSE(no_block.ok());
    CHECK_THAT(no_block.error().message, Contains("'launch.block' is missing"));
  }
}

TEST_CASE("bench jobs of CUDA families carry the candidate's and the reference's launch", "[cuda]") {
  const KernelSpec spec = spec_of(k_spec);
  const Shape shape = shape_of("M=1000,N=100");
  auto job = make_bench_job(spec, shape, {{"BM", 64}, {"BN", 16}}, "f32", "/c.cubin",
                            "/r.cubin", MeasureSettings{});
  REQUIRE(job.ok());
  REQUIRE(job->launch.has_value());
  REQUIRE(job->reference_launch.has_value());
  CHECK(*job->launch == make_cuda_launch(spec, shape, {{"BM", 64}, {"BN", 16}}).value());
  CHECK(*job->reference_launch == make_cuda_launch(spec, shape, spec.default_config).value());

  SECTION("the launches and the device survive JSON") {
    job->cuda_device = 2;
    auto back = BenchJob::from_json(job->to_json());
    REQUIRE(back.ok());
    CHECK(back->launch == job->launch);
    CHECK(back->reference_launch == job->reference_launch);
    CHECK(back->cuda_device == 2);
  }
  SECTION("a CPU job has no launch and none in its JSON") {
    BenchJob cpu = *job;
    cpu.launch.reset();
    cpu.reference_launch.reset();
    const auto j = cpu.to_json();
    CHECK_FALSE(j.contains("launch"));
    CHECK_FALSE(j.contains("cuda_device"));
    auto back = BenchJob::from_json(j);
    REQUIRE(back.ok());
    CHECK_FALSE(back->launch.has_value());
  }
  SECTION("a malformed launch is a bad_request naming it") {
    auto j = job->to_json();
    j["reference_launch"]["block"] = {0, 1, 1};
    auto back = BenchJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK(back.error().code == ktune::ErrorCode::bad_request);
    CHECK_THAT(back.error().message, Contains("reference_launch"));
  }
  SECTION("a reference config that cannot launch fails the job") {
    KernelSpec broken = spec;
    broken.default_config = {{"BM", 64}, {"BN", 2048}}; // 2048 x 4 threads per block
    auto failed = make_bench_job(broken, shape, {{"BM", 64}, {"BN", 16}}, "f32", "/c.cubin",
                                 "/r.cubin", MeasureSettings{});
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.error().code == ktune::ErrorCode::bad_launch);
  }
}

TEST_CASE("bench outcomes carry the candidate's resources", "[cuda]") {
  BenchOutcome outcome;
  CHECK(outcome.registers == -1);
  outcome.registers = 40;
  outcome.spills = 0;
  outcome.shared_bytes = 8192;
  auto back = BenchOutcome::from_json(outcome.to_json());
  REQUIRE(back.ok());
  CHECK(back->registers == 40);
  CHECK(back->spills == 0);
  CHECK(back->shared_bytes == 8192);
  auto old = outcome.to_json();
  old.erase("registers");
  CHECK(BenchOutcome::from_json(old)->registers == -1);
}
