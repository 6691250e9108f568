// daemon/winner_index: the in-memory winners and the fallback ladder over them; the winner
// table's ladder (core/winner_table) checked against it.
#include "daemon/winner_index.hpp"

#include "core/winner_table.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>

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

TEST_CASE("winner index: stale, the same key on this hardware under another environment") {
  WinnerIndex index;
  const CachedKernel kernel = gemm();
  const nlohmann::json hardware = {{"kind", "cpu"}, {"model", "EPYC"}, {"cores", 2}};
  nlohmann::json gcc = hardware, clang = hardware, other_board = hardware;
  gcc["compiler"] = "g++ 12.2.0";
  clang["compiler"] = "clang 14.0.6";
  other_board["model"] = "Xeon";
  index.set_identity("fp-gcc", split_device_identity(gcc));
  index.set_identity("fp-clang", split_device_identity(clang));
  index.set_identity("fp-xeon", split_device_identity(other_board));
  auto old = winner("M=64,N=64,K=64", R"({"BM":32})", "h1", "f32", "fp-gcc");
  old.updated_at = 100;
  index.put(old);
  CHECK(index.has_stale_peers("fp-clang"));
  CHECK_FALSE(index.has_stale_peers("fp-gcc"));   // its own winners are not stale
  CHECK_FALSE(index.has_stale_peers("fp-xeon"));  // another board's are not either
  CHECK_FALSE(index.has_stale_peers("fp-unknown"));

  SECTION("the old winner answers, naming where from and what changed, never the default") {
    const LadderAnswer a = climb_ladder(index, kernel, "M=64,N=64,K=64", "f32", "fp-clang");
    CHECK(a.rung == Rung::stale);
    CHECK(*a.config == R"({"BM":32})");
    CHECK(a.reason == "environment_changed");
    REQUIRE(a.stale.fingerprint != nullptr);
    CHECK(*a.stale.fingerprint == "fp-gcc");
    CHECK(*a.stale.change == "compiler: g++ 12.2.0 -> clang 14.0.6");
    std::string text;
    append_lookup_result(text, a, std::nullopt);
    const auto reply = nlohmann::json::parse(text);
    CHECK(reply.at("rung") == "stale");
    CHECK(reply.at("from_device") == "fp-gcc");
    CHECK(reply.at("change") == "compiler: g++ 12.2.0 -> clang 14.0.6");
  }
  SECTION("it comes before another shape's winner under the new environment") {
    index.put(winner("M=60,N=64,K=64", R"({"BM":96})", "h1", "f32", "fp-clang"));
    CHECK(climb_ladder(index, kernel, "M=64,N=64,K=64", "f32", "fp-clang").rung == Rung::stale);
    CHECK(climb_ladder(index, kernel, "M=61,N=64,K=64", "f32", "fp-clang").rung == Rung::nearest);
  }
  SECTION("the newest of several environments answers; the exact key wins once it is there") {
    nlohmann::json gcc13 = hardware;
    gcc13["compiler"] = "g++ 13.1.0";
    index.set_identity("fp-gcc13", split_device_identity(gcc13));
    auto newer = winner("M=64,N=64,K=64", R"({"BM":48})", "h1", "f32", "fp-gcc13");
    newer.updated_at = 200;
    index.put(newer);
    CHECK(*climb_ladder(index, kernel, "M=64,N=64,K=64", "f32", "fp-clang").config == R"({"BM":48})");
    index.put(winner("M=64,N=64,K=64", R"({"BM":16})", "h1", "f32", "fp-clang"));
    CHECK(climb_ladder(index, kernel, "M=64,N=64,K=64", "f32", "fp-clang").rung == Rung::exact);
  }
  SECTION("not stale: another board, another dtype, an edited source, an unknown device") {
    CHECK(climb_ladder(index, kernel, "M=64,N=64,K=64", "f32", "fp-xeon").rung == Rung::fallback_default);
    CHECK(climb_ladder(index, kernel, "M=64,N=64,K=64", "f64", "fp-clang").rung == Rung::fallback_default);
    CachedKernel edited = kernel;
    edited.source_hash = "h2";
    CHECK(climb_ladder(index, edited, "M=64,N=64,K=64", "f32", "fp-clang").rung == Rung::fallback_default);
    CHECK(climb_ladder(index, kernel, "M=64,N=64,K=64", "f32", "fp-unknown").rung == Rung::fallback_default);
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

TEST_CASE("winner table: answers as ktuned's ladder does, on random winners and lookups") {
  // The same winners in a WinnerIndex (ktuned's lookups) and in an encoded table (the clients'),
  // then the same lookups of both: every field of every answer agrees.
  std::mt19937 rng(37);
  auto pick = [&](std::initializer_list<const char*> items) {
    return std::string(*(items.begin() + rng() % items.size()));
  };
  auto shape = [&] {
    auto dim = [&] { return std::to_string(1 << (rng() % 12)) ; };
    return "M=" + dim() + ",N=" + dim() + ",K=" + dim();
  };
  const std::vector<std::string> fingerprints = {"fp0", "fp1", "fp2"};
  CachedKernel kernel = gemm();   // source h1, dtypes f32 f64
  for (int round = 0; round < 20; ++round) {
    WinnerIndex index;
    std::map<std::string, table::WinnerGroup> groups;
    const int winners = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < winners; ++i) {
      WinnerRecord w = winner(shape(), "{\"BM\":" + std::to_string(rng() % 256) + "}",
                              pick({"h1", "h1", "h1", "old"}), pick({"f32", "f64"}),
                              fingerprints[rng() % 2], pick({"gemm", "gemm", "reduce_sum"}));
      w.median_ms = 0.001 * static_cast<double>(rng() % 1000);
      w.job_id = i + 1;
      index.put(w);
      auto& g = groups[w.kernel + "/" + w.dtype + "/" + w.fingerprint];
      g.kernel = w.kernel;
      g.dtype = w.dtype;
      g.fingerprint = w.fingerprint;
      bool replaced = false;
      for (auto& existing : g.winners) {
        if (existing.shape == w.shape && existing.source_hash == w.source_hash) {
          existing = table::WinnerEntry{w.shape, w.source_hash, w.config, w.median_ms, 0, w.job_id};
          replaced = true;
        }
      }
      if (!replaced) {
        g.winners.push_back(table::WinnerEntry{w.shape, w.source_hash, w.config, w.median_ms, 0, w.job_id});
      }
    }
    table::TableContent content;
    for (const auto& fp : fingerprints) content.devices.push_back({fp, fp, table::Family::cpp, true});
    content.kernels.push_back({kernel.name, table::Family::cpp, kernel.source_hash, kernel.dims,
                               kernel.dtypes, true, kernel.default_config});
    std::vector<table::WinnerGroup> ordered;
    for (auto& [key, g] : groups) ordered.push_back(std::move(g));
    auto bytes = table::encode(content, ordered);
    REQUIRE(bytes.ok());
    auto view = table::TableView::open(*bytes);
    REQUIRE(view.ok());
    table::Scratch scratch;
    for (int q = 0; q < 200; ++q) {
      const std::string s = shape(), dtype = pick({"f32", "f64"}), fp = fingerprints[rng() % 3];
      const LadderAnswer expected = climb_ladder(index, kernel, s, dtype, fp);
      table::Answer got;
      INFO("round " << round << ": " << s << " " << dtype << " " << fp);
      REQUIRE(view->answer(table::Query{"gemm", s, dtype, fp}, got, scratch) ==
              table::Outcome::answered);
      CHECK(static_cast<int>(got.rung) == static_cast<int>(expected.rung));
      CHECK(got.config == *expected.config);
      CHECK(got.reason == expected.reason);
      if (expected.winner != nullptr) {
        CHECK(got.job == expected.winner->job_id);
        CHECK(got.median_ms == expected.winner->median_ms);
        if (expected.rung == Rung::nearest) CHECK(got.from_shape == expected.winner->shape);
      } else {
        CHECK(got.job == 0);
      }
    }
  }
}
