#include "tableio/table.hpp"

#include "tests/tableio/fixtures.hpp"

#include <catch2/catch.hpp>

using namespace ktune;
using namespace ktune::test;
using tableio::load_table;

TEST_CASE("load_table builds one row per winner from a read-only store", "[tableio]") {
  TempDir dir;
  const std::string path = dir.str() + "/ktune.db";
  {
    auto store = Store::open(path, OpenMode::read_write);
    REQUIRE(store.ok());
    fill_store(*store);
  }
  auto store = Store::open(path, OpenMode::read_only);
  REQUIRE(store.ok());

  SECTION("every winner, with stats, device, toolchain, time and host") {
    auto table = load_table(*store, {}, "exporter");
    REQUIRE(table.ok());
    REQUIRE(table->rows.size() == 4);
    REQUIRE(table->host == "exporter");
    const auto* row = table->find({"gemm", "M=256,N=256,K=256", "f32", "fp-Test CPU 3000",
                                   k_gemm_hash});
    REQUIRE(row != nullptr);
    // The store's canonical order (spec order), not alphabetical.
    REQUIRE(row->config_text() == k_config_a);
    REQUIRE(row->median_ms == 1.25);
    REQUIRE(row->stats.n == 10);
    REQUIRE(row->stats.stddev_ms == Approx(0.0125));
    REQUIRE(row->gflops == Approx(80.0));
    REQUIRE(row->gbps == 7.5);
    REQUIRE(row->compile_ms == 250);
    REQUIRE(row->device_name == "cpu");
    REQUIRE(row->device.at("model") == "Test CPU 3000");
    REQUIRE(row->toolchain == "g++ (Debian 12.2.0-14) 12.2.0");
    REQUIRE(row->time_ms == 1'700'000'000'000);  // when the result was measured
    REQUIRE(row->host == "exporter");

    const auto* cuda = table->find({"gemm", "M=4096,N=4096,K=4096", "f16", "cudafp0123456789",
                                    k_gemm_hash});
    REQUIRE(cuda != nullptr);
    REQUIRE(cuda->toolchain == "12.4");
    REQUIRE(cuda->device_name == "cuda:0");

    // Rows come sorted by key; the gemm spec travels with the table.
    for (std::size_t i = 1; i < table->rows.size(); ++i) {
      REQUIRE(table->rows[i - 1].key() < table->rows[i].key());
    }
    REQUIRE(table->kernels.size() == 1);
    REQUIRE(table->kernels[0].name == "gemm");
    REQUIRE(table->kernels[0].spec_text == gemm_spec());
  }

  SECTION("configs stored in another order come out in the spec's order") {
    auto writable = Store::open(path, OpenMode::read_write);
    REQUIRE(writable.ok());
    auto winner = writable->find_winner("gemm", k_gemm_hash, "M=256,N=256,K=256", "f32",
                                        "fp-Test CPU 3000");
    REQUIRE(winner.ok());
    WinnerRecord sorted = **winner;
    sorted.config = R"({"BK":128,"BM":64,"BN":128,"UNROLL":4,"VEC":2})";
    REQUIRE(writable->upsert_winner(sorted).ok());
    auto table = load_table(*store, {"gemm", "cpu"}, "h");
    REQUIRE(table.ok());
    REQUIRE(table->rows[0].config_text() == k_config_a);
  }
  SECTION("filtered by kernel") {
    auto table = load_table(*store, {"reduce_sum", ""}, "h");
    REQUIRE(table.ok());
    REQUIRE(table->rows.size() == 1);
    REQUIRE(table->rows[0].kernel == "reduce_sum");
    REQUIRE(table->kernels.empty());  // no spec stored for it
  }

  SECTION("filtered by device name or fingerprint prefix") {
    auto by_name = load_table(*store, {"", "cuda:0"}, "h");
    REQUIRE(by_name.ok());
    REQUIRE(by_name->rows.size() == 1);
    REQUIRE(by_name->rows[0].fingerprint == "cudafp0123456789");

    auto by_prefix = load_table(*store, {"gemm", "fp-Test"}, "h");
    REQUIRE(by_prefix.ok());
    REQUIRE(by_prefix->rows.size() == 2);

    auto none = load_table(*store, {"", "cuda:7"}, "h");
    REQUIRE(none.ok());
    REQUIRE(none->rows.empty());
  }

  SECTION("the default host is this machine's name") {
    auto table = load_table(*store, {});
    REQUIRE(table.ok());
    REQUIRE(table->host == tableio::local_host_name());
    REQUIRE_FALSE(table->host.empty());
  }
}

TEST_CASE("load_table on a winner whose result row is unknown keeps the winner's numbers",
          "[tableio]") {
  TempDir dir;
  auto store = Store::open(dir.str() + "/ktune.db", OpenMode::read_write);
  REQUIRE(store.ok());
  WinnerRecord winner;
  winner.kernel = "gemm";
  winner.source_hash = "h";
  winner.shape = "M=1,N=1,K=1";
  winner.dtype = "f32";
  winner.fingerprint = "nodevice";
  winner.config = R"({"BM":32})";
  winner.median_ms = 2.5;
  winner.gflops = 9;
  winner.updated_at = 1234;
  REQUIRE(store->upsert_winner(winner).ok());
  auto table = load_table(*store, {}, "h");
  REQUIRE(table.ok());
  REQUIRE(table->rows.size() == 1);
  const auto& row = table->rows[0];
  REQUIRE(row.stats.n == 0);
  REQUIRE(row.median_ms == 2.5);
  REQUIRE(row.gflops == 9);
  REQUIRE(row.time_ms == 1234);
  REQUIRE(row.device_name.empty());
  REQUIRE(row.toolchain.empty());
}

TEST_CASE("Table::normalize sorts rows and refuses a duplicate key", "[tableio]") {
  tableio::Table table;
  table.rows = {make_row("M=2,N=2,K=2", k_config_a, 1, 1), make_row("M=1,N=1,K=1", k_config_a, 1, 1)};
  REQUIRE(table.normalize().ok());
  REQUIRE(table.rows[0].shape == "M=1,N=1,K=1");
  table.rows.push_back(make_row("M=1,N=1,K=1", k_config_b, 2, 2));
  auto again = table.normalize();
  REQUIRE_FALSE(again.ok());
  REQUIRE(again.error().code == ktune::ErrorCode::invalid_table);
  REQUIRE_THAT(again.error().message, Catch::Contains("M=1,N=1,K=1"));
}

TEST_CASE("reorder_config follows the spec's params order", "[tableio]") {
  const auto sorted = nlohmann::ordered_json::parse(R"({"BK":1,"BM":2,"BN":3,"EXTRA":4})");
  const auto order = tableio::spec_param_order(gemm_spec());
  REQUIRE(order == std::vector<std::string>{"BM", "BN", "BK", "UNROLL", "VEC"});
  REQUIRE(tableio::reorder_config(sorted, order).dump() == R"({"BM":2,"BN":3,"BK":1,"EXTRA":4})");
  REQUIRE(tableio::spec_param_order("not toml [").empty());
  REQUIRE(tableio::same_config(sorted, tableio::reorder_config(sorted, order)));
  REQUIRE_FALSE(tableio::same_config(sorted, nlohmann::ordered_json::parse(R"({"BK":1})")));
}
