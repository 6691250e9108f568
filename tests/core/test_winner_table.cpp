// core/winner_table: the published table's layout, encoded and read back through the ladder.
#include "core/winner_table.hpp"

#include <catch2/catch.hpp>

#include <cstring>

using namespace ktune;
using namespace ktune::table;

namespace {

constexpr const char* k_cpu_fp = "0123456789abcdef0123456789abcdef";
constexpr const char* k_gpu_fp = "fedcba9876543210fedcba9876543210";
constexpr const char* k_far_fp = "00ff00ff00ff00ff00ff00ff00ff00ff";

TableContent content() {
  TableContent c;
  c.generation = 7;
  c.devices = {{"cpu", k_cpu_fp, Family::cpp, true},
               {k_cpu_fp, k_cpu_fp, Family::cpp, true},
               {"cuda:0", k_gpu_fp, Family::cuda, true},
               {"cuda", k_gpu_fp, Family::cuda, true},
               {"cuda:1", "11111111111111111111111111111111", Family::cuda, true},
               {k_far_fp, k_far_fp, Family::cuda, false}};
  c.kernels = {{"gemm", Family::cpp, "h1", {"M", "N", "K"}, {"f32", "f64"}, true,
                R"({"BM":64,"BN":64})"},
               {"gemm", Family::cuda, "g1", {"M", "N", "K"}, {"f32"}, true, R"({"TILE":16})"},
               {"scan", Family::cpp, "s1", {"N"}, {"f64"}, false, R"({"B":1})"},
               {"other", Family::cpp, "o1", {"N"}, {"f32"}, true, R"({})"}};
  return c;
}

WinnerEntry w(std::string shape, std::string config, std::string source = "h1",
              std::int64_t job = 1) {
  return WinnerEntry{std::move(shape), std::move(source), std::move(config), 0.5, 10.0, job};
}

std::vector<WinnerGroup> groups() {
  return {{"gemm", "f32", k_cpu_fp,
           {w("M=32,N=32,K=32", R"({"BM":32,"BN":16})", "h1", 11),
            w("M=512,N=512,K=512", R"({"BM":128,"BN":64})", "h1", 12),
            w("M=64,N=64,K=64", R"({"BM":-3,"BN":2})", "old", 13)}},
          {"gemm", "f32", k_far_fp, {w("M=8,N=8,K=8", R"({"TILE":8})", "g1", 21)}},
          {"other", "f32", k_gpu_fp, {w("N=4", R"({})", "o1", 31)}}};
}

struct Table {
  std::vector<std::byte> bytes;
  TableView view;
  Scratch scratch;

  explicit Table(const TableContent& c = content(), const std::vector<WinnerGroup>& g = groups()) {
    auto encoded = encode(c, g);
    REQUIRE(encoded.ok());
    bytes = std::move(*encoded);
    auto opened = TableView::open(bytes);
    REQUIRE(opened.ok());
    view = *opened;
  }
  Answer ask(std::string_view shape, std::string_view dtype = "f32", std::string_view device = "cpu",
             std::string_view kernel = "gemm") {
    Answer a;
    const Outcome outcome = view.answer(Query{kernel, shape, dtype, device}, a, scratch);
    INFO(kernel << " " << shape << " " << dtype << " " << device);
    REQUIRE(outcome == Outcome::answered);
    return a;
  }
  Outcome outcome(std::string_view shape, std::string_view dtype = "f32",
                  std::string_view device = "cpu", std::string_view kernel = "gemm") {
    Answer a;
    return view.answer(Query{kernel, shape, dtype, device}, a, scratch);
  }
};

} // namespace

TEST_CASE("winner table: the ladder, as ktuned walks it", "[core][winner_table]") {
  Table t;
  CHECK(t.view.generation() == 7);
  CHECK(t.view.winner_count() == 5);
  CHECK(t.view.verify_all() == 0);
  CHECK_FALSE(t.view.superseded());

  SECTION("exact, with its winner's fields and params in the config's order") {
    const Answer a = t.ask("M=32,N=32,K=32");
    CHECK(a.rung == Rung::exact);
    CHECK(a.config == R"({"BM":32,"BN":16})");
    CHECK(a.config.data()[a.config.size()] == '\0');
    CHECK(a.reason.empty());
    CHECK(a.from_shape.empty());
    CHECK(a.job == 11);
    CHECK(a.median_ms == 0.5);
    CHECK(a.gflops == 10.0);
    REQUIRE(a.param_count == 2);
    CHECK(t.view.param(a, 0).name == "BM");
    CHECK(t.view.param(a, 0).value == 32);
    CHECK(t.view.param(a, 1).name == "BN");
    CHECK(t.view.param(a, 1).value == 16);
  }
  SECTION("a shape in another order or with spaces names the same key") {
    CHECK(t.ask("K=32,N=32,M=32").rung == Rung::exact);
    CHECK(t.ask(" M = 032 , N=32,K=32").rung == Rung::exact);
    CHECK(t.ask("M=32,N=32,K=32", "f32", k_cpu_fp).rung == Rung::exact);
  }
  SECTION("nearest: the closest tuned shape under the current source") {
    const Answer a = t.ask("M=40,N=32,K=32");
    CHECK(a.rung == Rung::nearest);
    CHECK(a.from_shape == "M=32,N=32,K=32");
    CHECK(a.reason == "shape_not_tuned");
    CHECK(a.job == 11);
    CHECK(t.ask("M=400,N=400,K=400").from_shape == "M=512,N=512,K=512");
  }
  SECTION("a winner under another source hash: source_changed") {
    const Answer a = t.ask("M=64,N=64,K=64");
    CHECK(a.rung == Rung::nearest);
    CHECK(a.reason == "source_changed");
    CHECK(a.from_shape == "M=32,N=32,K=32");
  }
  SECTION("default, with each reason") {
    const Answer other_dtype = t.ask("M=32,N=32,K=32", "f64");
    CHECK(other_dtype.rung == Rung::fallback_default);
    CHECK(other_dtype.config == R"({"BM":64,"BN":64})");
    CHECK(other_dtype.reason == "dtype_not_tuned");
    CHECK(other_dtype.job == 0);
    CHECK(t.ask("M=1,N=1,K=1", "f32", "cuda:1").reason == "device_never_tuned");
    CHECK(t.ask("M=1,N=1,K=1", "f32", "cuda:1").config == R"({"TILE":16})");
    CHECK(t.ask("M=1,N=1,K=1", "f32", "cuda:0").reason == "no_results_for_kernel");
    CHECK(t.ask("N=4", "f64", "cpu", "scan").reason == "no_results_for_kernel");
  }
  SECTION("another machine's device: its CUDA family, else the family that exists") {
    const Answer a = t.ask("M=8,N=8,K=8", "f32", k_far_fp);
    CHECK(a.rung == Rung::exact);
    CHECK(a.job == 21);
    CHECK(t.ask("N=8", "f32", k_far_fp, "scan").config == R"({"B":1})");
    CHECK(t.outcome("N=8", "f32", "cuda:0", "scan") == Outcome::unknown_kernel);
  }
  SECTION("a family without a dtype axis answers f32 with its own dtype") {
    CHECK(t.ask("N=4", "f32", "cpu", "scan").rung == Rung::fallback_default);
    CHECK(t.outcome("N=4", "f16", "cpu", "scan") == Outcome::not_accepted);
  }
  SECTION("what the table cannot vouch for goes to ktuned") {
    CHECK(t.outcome("M=32,N=32,K=32", "f32", "cuda:7") == Outcome::unknown_device);
    CHECK(t.outcome("M=32,N=32,K=32", "f32", "cpu", "nope") == Outcome::unknown_kernel);
    CHECK(t.outcome("M=32,N=32,K=32", "bf16") == Outcome::not_accepted);
    CHECK(t.outcome("M=32,N=32") == Outcome::not_accepted);
    CHECK(t.outcome("M=32,N=32,K=32,Q=1") == Outcome::not_accepted);
    CHECK(t.outcome("M=32,N=32,K=0") == Outcome::not_accepted);
    CHECK(t.outcome("M=32,N=32,K=-1") == Outcome::not_accepted);
    CHECK(t.outcome("M=32,M=32,K=1") == Outcome::not_accepted);
    CHECK(t.outcome("M=32,N=32,K=2199023255552") == Outcome::not_accepted);  // 2^41
    CHECK(t.outcome("") == Outcome::not_accepted);
  }
}

TEST_CASE("winner table: a device whose hardware has winners under another environment is marked",
          "[core][winner_table]") {
  TableContent c = content();
  c.devices[0].stale_peers = true;  // "cpu": the clients ask ktuned, which may answer stale
  Table t(c);
  t.ask("M=40,N=32,K=32", "f32", "cpu");
  CHECK((t.scratch.resolved.device_flags & k_device_stale_peers) != 0);
  t.ask("M=40,N=32,K=32", "f32", k_cpu_fp);
  CHECK((t.scratch.resolved.device_flags & k_device_stale_peers) == 0);
}

TEST_CASE("winner table: a damaged or foreign table answers nothing", "[core][winner_table]") {
  Table t;
  SECTION("a flipped byte in a record's config fails its check") {
    const std::string needle = R"({"BM":32,"BN":16})";
    auto* text = reinterpret_cast<char*>(t.bytes.data());
    const auto at = std::string_view(text, t.bytes.size()).find(needle);
    REQUIRE(at != std::string_view::npos);
    text[at + 6] = '9';
    CHECK(t.outcome("M=32,N=32,K=32") == Outcome::damaged);
    CHECK(t.view.verify_all() > 0);
  }
  SECTION("truncated, another version, a bad header check") {
    auto bytes = t.bytes;
    CHECK(TableView::open(std::span(bytes).first(bytes.size() - 8)).error().code == ErrorCode::bad_table);
    bytes[8] = std::byte{2};
    CHECK(TableView::open(bytes).error().code == ErrorCode::unknown_layout);
    bytes = t.bytes;
    bytes[16] ^= std::byte{1};  // generation, under the header check
    CHECK(TableView::open(bytes).error().code == ErrorCode::bad_table);
  }
  SECTION("the superseded word is outside the header check") {
    std::uint64_t next = 8;
    std::memcpy(t.bytes.data() + k_superseded_offset, &next, sizeof next);
    auto reopened = TableView::open(t.bytes);
    REQUIRE(reopened.ok());
    CHECK(reopened->superseded());
  }
}

TEST_CASE("winner table: encode refuses what it cannot represent", "[core][winner_table]") {
  auto c = content();
  std::vector<WinnerGroup> g = {{"gemm", "f32", k_cpu_fp, {w("M=1,N=1,K=1", R"({"BM":"x"})")}}};
  auto bad = encode(c, g);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == ErrorCode::bad_table);
  CHECK(bad.error().message.find("M=1,N=1,K=1") != std::string::npos);
  g = {{"gemm", "f32", k_cpu_fp, {w("M=x", R"({})")}}};
  CHECK_FALSE(encode(c, g).ok());
}

TEST_CASE("winner table: an empty table and the path next to the socket", "[core][winner_table]") {
  Table t(TableContent{}, {});
  CHECK(t.view.winner_count() == 0);
  CHECK(t.outcome("M=1,N=1,K=1") == Outcome::unknown_device);
  CHECK(table_path_for_socket("/run/user/1/ktune/ktuned.sock") == "/run/user/1/ktune/ktuned.table");
  CHECK(table_path_for_socket("/srv/ktune/socket") == "/srv/ktune/socket.table");
}
