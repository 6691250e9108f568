#include "cli/table_commands.hpp"

#include "tableio/formats.hpp"
#include "tests/tableio/fixtures.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>

#include <sstream>

using namespace ktune;
using namespace ktune::test;
using nlohmann::json;

namespace {

struct Captured {
  std::ostringstream out, err;
  cli::Output io{out, err, false};
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

TEST_CASE("ktune export reads the store read-only and writes each format", "[tableio][cli]") {
  TempDir dir;
  const std::string db = dir.str() + "/ktune.db";
  {
    auto store = Store::open(db, OpenMode::read_write);
    REQUIRE(store.ok());
    fill_store(*store);
  }

  SECTION("json to stdout, filtered by kernel") {
    Captured c;
    cli::ExportOptions options;
    options.db = db;
    options.kernel = "reduce_sum";
    REQUIRE(cli::export_table(options, c.io) == cli::k_exit_ok);
    auto table = tableio::read_json(c.out.str(), "stdout");
    REQUIRE(table.ok());
    REQUIRE(table->rows.size() == 1);
    REQUIRE(table->exported_at_ms > 0);
  }
  SECTION("every format to a file") {
    for (const char* format : {"json", "csv", "cpp-header", "t4"}) {
      Captured c;
      cli::ExportOptions options;
      options.db = db;
      options.kernel = "gemm";
      options.format = format;
      options.output = dir.str() + "/out." + format;
      INFO(format << ": " << c.err.str());
      REQUIRE(cli::export_table(options, c.io) == cli::k_exit_ok);
      REQUIRE(c.out.str().empty());
      REQUIRE_THAT(c.err.str(), Catch::Contains("exported 3 winner(s)"));
      REQUIRE_FALSE(slurp(options.output).empty());
    }
    REQUIRE_THAT(slurp(dir.str() + "/out.cpp-header"), Catch::Contains("lookup("));
    auto t4 = tableio::read_t4(slurp(dir.str() + "/out.t4"), "out.t4");
    REQUIRE(t4.ok());
    REQUIRE(t4->rows.size() == 3);
  }
  SECTION("a missing database is an error naming it") {
    Captured c;
    cli::ExportOptions options;
    options.db = dir.str() + "/none.db";
    REQUIRE(cli::export_table(options, c.io) == cli::k_exit_error);
    REQUIRE_THAT(c.err.str(), Catch::Contains("none.db"));
  }
}

TEST_CASE("ktune import reads the file and builds one import request", "[tableio][cli]") {
  TempDir dir;
  const auto table = make_table({make_row("M=1,N=1,K=1", k_config_a, 1, 1)});
  const auto path = dir.write("winners.json", tableio::write_json(table));

  SECTION("the request decodes back to the table on the daemon side") {
    const json request = cli::import_request(table, tableio::Policy::newer);
    REQUIRE(request["op"] == "import");
    REQUIRE(request["policy"] == "newer");
    auto decoded = tableio::table_from_json(nlohmann::ordered_json(request["table"]), "request");
    REQUIRE(decoded.ok());
    REQUIRE(decoded->rows.size() == 1);
    REQUIRE(tableio::same_config(decoded->rows[0].config, table.rows[0].config));
  }
  SECTION("no daemon and autostart off: says so") {
    ::setenv("KTUNE_NO_AUTOSTART", "1", 1);  // import starts ktuned otherwise (cli/autostart.hpp)
    Captured c;
    cli::GlobalOptions global;
    global.socket = dir.str() + "/no.sock";
    cli::ImportOptions options;
    options.file = path.string();
    REQUIRE(cli::import_table_file(global, options, c.io) == cli::k_exit_error);
    ::unsetenv("KTUNE_NO_AUTOSTART");
    REQUIRE_THAT(c.err.str(), Catch::Contains("ktuned is not running"));
  }
  SECTION("a bad file: the reader's error, before any connection") {
    Captured c;
    cli::GlobalOptions global;
    global.socket = dir.str() + "/no.sock";
    cli::ImportOptions options;
    options.file = dir.write("bad.json", R"({"format":"ktune-table","schema_version":1,"rows":[{}]})").string();
    REQUIRE(cli::import_table_file(global, options, c.io) == cli::k_exit_error);
    REQUIRE_THAT(c.err.str(), Catch::Contains("bad.json: rows[0].kernel: missing"));
  }
}

TEST_CASE("the import reply prints counts and conflicts", "[tableio][cli]") {
  const json reply = json::parse(R"({"rows":3,"imported":1,"replaced":1,"kept":1,"unchanged":0,
    "policy":"faster","jobs":[4,5],"conflicts":[{"kernel":"gemm","shape":"M=1","dtype":"f32",
    "fingerprint":"abcdef0123456789","source_hash":"h",
    "kept":{"config":{"BM":64},"median_ms":1,"time_ms":1,"host":"","from":"store"},
    "dropped":{"config":{"BM":32},"median_ms":2,"time_ms":2,"host":"x","from":"import"},
    "why":"faster: existing 1 ms <= incoming 2 ms"}]})");
  std::ostringstream out;
  cli::print_import_reply(reply, out);
  REQUIRE_THAT(out.str(), Catch::StartsWith("rows 3: imported 1, replaced 1, kept 1, unchanged 0 "
                                            "(policy faster)\n"));
  REQUIRE_THAT(out.str(), Catch::Contains("BM=64 (store)"));
  REQUIRE_THAT(out.str(), Catch::Contains("BM=32 (import)"));
  REQUIRE_THAT(out.str(), Catch::Contains("abcdef012345"));
}
