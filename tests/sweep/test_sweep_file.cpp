#include "tests/support/paths.hpp"
#include "sweep/sweep_file.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>

using ktune::sweep::load_sweep;
using ktune::sweep::parse_shard;
using ktune::sweep::parse_sweep;
using ktune::sweep::shard_jobs;

TEST_CASE("sweep files expand to devices x dtypes x shapes in file order", "[sweep]") {
  auto sweep = parse_sweep(R"(
[sweep]
name = "nightly"
priority = -20

[[kernel]]
name = "gemm"
dtypes = ["f32", "f64"]
strategy = "random"
budget = "5%"
[kernel.shapes]
M = [256, 512]
N = { from = 256, to = 768, step = 256 }
K = 64

[[kernel]]
name = "reduce_sum"
budget = 30
[kernel.shapes]
N = { from = 1024, to = 16384, times = 4 }
)", "nightly.toml");
  INFO((sweep ? std::string() : sweep.error().message));
  REQUIRE(sweep.ok());
  CHECK(sweep->name == "nightly");
  CHECK(sweep->priority == -20);
  REQUIRE(sweep->jobs.size() == 2 * 2 * 3 + 3);
  CHECK(sweep->jobs[0].shape == "M=256,N=256,K=64");
  CHECK(sweep->jobs[1].shape == "M=256,N=512,K=64");
  CHECK(sweep->jobs[3].shape == "M=512,N=256,K=64");
  CHECK(sweep->jobs[0].dtype == "f32");
  CHECK(sweep->jobs[6].dtype == "f64");
  CHECK(sweep->jobs[0].device == "cpu");
  CHECK(sweep->jobs[0].strategy == "random");
  REQUIRE(sweep->jobs[0].budget_fraction);
  CHECK(*sweep->jobs[0].budget_fraction == Approx(0.05));
  CHECK(sweep->jobs[12].kernel == "reduce_sum");
  CHECK(sweep->jobs[12].strategy == "exhaustive");
  CHECK(sweep->jobs[12].budget == 30);
  CHECK(sweep->jobs[12].shape == "N=1024");
  CHECK(sweep->jobs[13].shape == "N=4096");
  CHECK(sweep->jobs[14].shape == "N=16384");
  for (std::size_t i = 0; i < sweep->jobs.size(); ++i) CHECK(sweep->jobs[i].number == i);
}

TEST_CASE("shards split the jobs exactly once, deterministically", "[sweep]") {
  auto sweep = parse_sweep("[[kernel]]\nname = \"gemm\"\n[kernel.shapes]\nM = [1, 2, 3, 4, 5, 6, 7]\n",
                           "s.toml");
  REQUIRE(sweep.ok());
  CHECK(sweep->name == "s");
  for (std::size_t count : {1u, 2u, 3u, 7u, 9u}) {
    std::multiset<std::size_t> seen;
    for (std::size_t index = 1; index <= count; ++index) {
      auto shard = parse_shard(std::to_string(index) + "/" + std::to_string(count));
      REQUIRE(shard.ok());
      for (const auto& job : shard_jobs(*sweep, *shard)) seen.insert(job.number);
    }
    CHECK(seen.size() == 7);
    CHECK(std::set<std::size_t>(seen.begin(), seen.end()).size() == 7);
  }
  CHECK(shard_jobs(*sweep, *parse_shard("2/3")).front().shape == "M=2");
  for (const char* bad : {"0/2", "3/2", "1", "a/b", "1/0", "1/2x", ""}) {
    INFO(bad);
    auto shard = parse_shard(bad);
    REQUIRE_FALSE(shard.ok());
    CHECK(shard.error().code == ktune::ErrorCode::bad_shard);
  }
}

TEST_CASE("broken sweep files are errors naming the file, the table and the key", "[sweep]") {
  const auto error = [](const std::string& text) {
    auto sweep = parse_sweep(text, "bad.toml");
    REQUIRE_FALSE(sweep.ok());
    CHECK(sweep.error().code == ktune::ErrorCode::sweep_error);
    CHECK_THAT(sweep.error().message, Catch::Contains("bad.toml"));
    return sweep.error().message;
  };
  CHECK_THAT(error("[[kernel]]\n[kernel.shapes]\nM = [1]\n"), Catch::Contains("name is required"));
  CHECK_THAT(error("[[kernel]]\nname = \"gemm\"\n"), Catch::Contains("shapes is required"));
  CHECK_THAT(error("[[kernel]]\nname = \"gemm\"\n[kernel.shapes]\nM = []\n"), Catch::Contains("empty"));
  CHECK_THAT(error("[[kernel]]\nname = \"gemm\"\n[kernel.shapes]\nM = { from = 4, to = 8, times = 1 }\n"),
             Catch::Contains("times"));
  CHECK_THAT(error("[[kernel]]\nname = \"gemm\"\n[kernel.shapes]\nM = { from = 8, to = 4, step = 1 }\n"),
             Catch::Contains("to is below from"));
  CHECK_THAT(error("[[kernel]]\nname = \"gemm\"\nbudget = \"150%\"\n[kernel.shapes]\nM = [1]\n"),
             Catch::Contains("budget"));
  CHECK_THAT(error("[[kernel]]\nname = \"gemm\"\nshape = 1\n[kernel.shapes]\nM = [1]\n"),
             Catch::Contains("unknown key"));
  CHECK_THAT(error("[sweep]\npriority = 1000\n[[kernel]]\nname = \"g\"\n[kernel.shapes]\nM = [1]\n"),
             Catch::Contains("priority"));
  CHECK_THAT(error("[sweep]\nname = \"x\"\n"), Catch::Contains("no kernel"));
  CHECK_THAT(error("[[kernel]]\nname = \"g\"\n[kernel.shapes]\nM = { from = 1, to = 1000000, step = 1 }\n"),
             Catch::Contains("100000"));
  CHECK_THAT(error("[[kernel]\n"), Catch::Contains("bad.toml:1"));
}

TEST_CASE("the shipped sweep files parse", "[sweep]") {
  for (const char* name : {"nightly.toml", "cpu.toml"}) {
    auto sweep = load_sweep(ktune::test::source_dir() + "/configs/sweeps/" + name);
    INFO((sweep ? std::string() : sweep.error().message));
    CHECK(sweep.ok());
  }
}
