// daemon/winner_index: the in-memory winners and the fallback ladder over them.
#include "daemon/winner_index.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace ktune;
using namespace ktune::daemon;

namespace {

WinnerRecord winner(const std::string& shape, const std::string& config,
                    const std::string& source_hash = "h1", const std::string& dtype = "f32",
                    const std::string& fingerprint = "fp", const std::string& kernel = "gemm") {
  WinnerRecord w;
  w.kernel = kernel;
  w.source_hash = source_hash;
  w.shape = shape;
  w.dtype = dtype;
  w.fingerprint = fingerprint;
  w.config = config;
  w.median_ms = 1.5;
  w.job_id = 7;
  return w;
}

CachedKernel gemm() {
  CachedKernel k;
  k.name = "gemm";
  k.source_hash = "h1";
  k.dims = {"M", "N", "K"};
  k.dtypes = {"f32", "f64"};
  k.default_config = R"({"BM":64})";
  return k;
}

} // namespace

TEST_CASE("winner index: the ladder") {
  WinnerIndex index;
  const CachedKernel kernel = gemm();

  SECTION("an empty index answers the default: the device was never tuned") {
    const LadderAnswer a = climb_ladder(index, kernel, "M=32,N=32,K=32", "f32", "fp");
    CHECK(a.rung == Rung::fallback_default);
    CHECK(*a.config == R"({"BM":64})");
    CHECK(a.reason == "device_never_tuned");
  }

  SECTION("exact, then the nearest shape in log space, ties to the shape that sorts first") {
    index.put(winner("M=32,N=32,K=32", R"({"BM":32})"));
    index.put(winner("M=512,N=512,K=512", R"({"BM":128})"));
    index.put(winner("M=128,N=128,K=128", R"({"BM":96})"));
    CHECK(index.size() == 3);
    const LadderAnswer exact = climb_ladder(index, kernel, "M=32,N=32,K=32", "f32", "fp");
    CHECK(exact.rung == Rung::exact);
    CHECK(*exact.config == R"({"BM":32})");
    CHECK(exact.reason.empty());

    // 64 is as far from 32 as from 128 in log space; 300 is nearer 512 than 128.
    const LadderAnswer tie = climb_ladder(index, kernel, "M=64,N=64,K=64", "f32", "fp");
    CHECK(tie.rung == Rung::nearest);
    CHECK(tie.winner->shape == "M=128,N=128,K=128");
    const LadderAnswer far = climb_ladder(index, kernel, "M=300,N=300,K=300", "f32", "fp");
    CHECK(far.winner->shape == "M=512,N=512,K=512");
    CHECK(far.reason == "shape_not_tuned");
  }

  SECTION("reasons for the default rung") {
    index.put(winner("M=32,N=32,K=32", R"({"BM":32})", "old"));
    const LadderAnswer changed = climb_ladder(index, kernel, "M=32,N=32,K=32", "f32", "fp");
    CHECK(changed.rung == Rung::fallback_default);
    CHECK(changed.reason == "source_changed");
    CHECK(climb_ladder(index, kernel, "M=32,N=32,K=32", "f32", "other").reason ==
          "device_never_tuned");
    index.put(winner("M=32,N=32,K=32", R"({"BM":32})", "h1", "f32", "fp2", "reduce_sum"));
    CHECK(climb_ladder(index, kernel, "M=32,N=32,K=32", "f32", "fp2").reason ==
          "no_results_for_kernel");
    CHECK(climb_ladder(index, kernel, "M=32,N=32,K=32", "f64", "fp").reason == "dtype_not_tuned");
  }

  SECTION("put replaces the winner of the same key") {
    index.put(winner("M=32,N=32,K=32", R"({"BM":32})"));
    index.put(winner("M=32,N=32,K=32", R"({"BM":64})"));
    CHECK(index.size() == 1);
    CHECK(*climb_ladder(index, kernel, "M=32,N=32,K=32", "f32", "fp").config == R"({"BM":64})");
  }
}

TEST_CASE("winner index: shapes and result text") {
  CHECK(shape_log_dims("M=1,N=8").size() == 2);
  CHECK(shape_log_dims("M=x").empty());
  CHECK(shape_log_dims("M=0").empty());
  CHECK(shape_distance(shape_log_dims("M=2"), shape_log_dims("M=8")) ==
        Approx(std::log(4.0)));
  CHECK(std::isinf(shape_distance(shape_log_dims("M=2"), shape_log_dims("M=2,N=2"))));

  WinnerIndex index;
  index.put(winner("M=32,N=32,K=32", R"({"BM":32})"));
  std::string out;
  append_lookup_result(out, climb_ladder(index, gemm(), "M=16,N=32,K=32", "f32", "fp"), 12);
  const auto json = nlohmann::json::parse(out);
  CHECK(json.at("rung") == "nearest");
  CHECK(json.at("exact") == false);
  CHECK(json.at("from_shape") == "M=32,N=32,K=32");
  CHECK(json.at("config").at("BM") == 32);
  CHECK(json.at("median_ms") == 1.5);
  CHECK(json.at("job") == 7);
  CHECK(json.at("tune_job") == 12);
}
