#include "tableio/formats.hpp"

#include "tests/tableio/fixtures.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using namespace ktune;
using namespace ktune::test;
using nlohmann::ordered_json;

namespace {

tableio::Table sample_table() {
  auto table = make_table({make_row("M=256,N=256,K=256", k_config_a, 1.25, 1'700'000'000'123),
                           make_row("M=512,N=512,K=512", k_config_b, 9.5, 1'700'000'100'000,
                                    "cudafp0123456789")});
  table.rows[1].stats = {};  // one row without statistics
  table.rows[1].device_name = "cuda:0";
  table.rows[1].device = cuda_device().details;
  table.rows[1].toolchain = "12.4";
  table.kernels.push_back({"gemm", k_gemm_hash, "[kernel]\nname = \"gemm\"\n"});
  return table;
}

void require_same_table(const tableio::Table& a, const tableio::Table& b) {
  REQUIRE(a.rows.size() == b.rows.size());
  for (std::size_t i = 0; i < a.rows.size(); ++i) require_same_row(a.rows[i], b.rows[i]);
}

std::string edited(const std::string& text, const std::string& from, const std::string& to) {
  std::string out = text;
  const auto pos = out.find(from);
  REQUIRE(pos != std::string::npos);
  out.replace(pos, from.size(), to);
  return out;
}

} // namespace

TEST_CASE("json export reads back to the same table", "[tableio]") {
  const auto table = sample_table();
  const std::string text = tableio::write_json(table);
  auto back = tableio::read_json(text, "winners.json");
  REQUIRE(back.ok());
  require_same_table(table, *back);
  REQUIRE(back->host == "build-host");
  REQUIRE(back->exported_at_ms == 1'700'000'900'000);
  REQUIRE(back->kernels.size() == 1);
  REQUIRE(back->kernels[0].spec_text == table.kernels[0].spec_text);
  // Params keep their order through the file (BM before BK).
  REQUIRE(text.find("\"BM\": 64") < text.find("\"BK\": 128"));
  REQUIRE(back->rows[0].config_text() == k_config_a);
  // The schema names itself and its version.
  const auto doc = ordered_json::parse(text);
  REQUIRE(doc.at("format") == "ktune-table");
  REQUIRE(doc.at("schema_version") == tableio::k_table_schema_version);
  REQUIRE_FALSE(doc.at("rows")[1].contains("stats"));
  REQUIRE_FALSE(doc.contains("provenance"));  // none recorded, none written
}

TEST_CASE("a table's provenance is written and read back", "[tableio]") {
  auto table = sample_table();
  table.provenance = {{"kind", "fleet-shard"}, {"shard", "2/4"}, {"node", "gpu-07"},
                      {"slurm", {{"job_id", "13"}, {"array_job_id", "12"}, {"array_task_id", "2"}}}};
  auto back = tableio::read_json(tableio::write_json(table), "shard-2.json");
  REQUIRE(back.ok());
  REQUIRE(back->provenance == table.provenance);
  auto doc = tableio::table_to_json(table);
  doc["provenance"] = "gpu-07";
  const auto bad = tableio::table_from_json(doc, "shard-2.json");
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.error().message, Catch::Contains("shard-2.json: provenance: expected an object"));
}

TEST_CASE("json reader errors name the file, the row and the field", "[tableio]") {
  const std::string text = tableio::write_json(sample_table());

  SECTION("a field of the wrong type") {
    auto bad = tableio::read_json(edited(text, "\"median_ms\": 9.5", "\"median_ms\": \"fast\""),
                                  "w.json");
    REQUIRE_FALSE(bad.ok());
    REQUIRE(bad.error().code == ktune::ErrorCode::invalid_table);
    REQUIRE_THAT(bad.error().message,
                 Catch::StartsWith("w.json: rows[1].median_ms: expected a number, found string"));
  }
  SECTION("a missing field") {
    auto bad = tableio::read_json(edited(text, "\"dtype\": \"f32\",", ""), "w.json");
    REQUIRE_FALSE(bad.ok());
    REQUIRE_THAT(bad.error().message, Catch::StartsWith("w.json: rows[0].dtype: missing"));
  }
  SECTION("a nested stats field") {
    auto bad = tableio::read_json(edited(text, "\"n\": 10", "\"n\": -3"), "w.json");
    REQUIRE_FALSE(bad.ok());
    REQUIRE_THAT(bad.error().message, Catch::StartsWith("w.json: rows[0].stats.n: expected an integer"));
  }
  SECTION("a config value that is not a scalar") {
    auto bad = tableio::read_json(edited(text, "\"VEC\": 2", "\"VEC\": [2]"), "w.json");
    REQUIRE_FALSE(bad.ok());
    REQUIRE_THAT(bad.error().message, Catch::StartsWith("w.json: rows[0].config.VEC:"));
  }
  SECTION("another schema version") {
    auto bad = tableio::read_json(edited(text, "\"schema_version\": 1", "\"schema_version\": 7"),
                                  "w.json");
    REQUIRE_FALSE(bad.ok());
    REQUIRE_THAT(bad.error().message,
                 Catch::StartsWith("w.json: schema_version: expected 1, found 7"));
  }
  SECTION("two rows with one key") {
    auto doc = ordered_json::parse(text);
    doc["rows"].push_back(doc["rows"][0]);
    auto bad = tableio::table_from_json(doc, "request");
    REQUIRE_FALSE(bad.ok());
    REQUIRE_THAT(bad.error().message, Catch::Contains("same key"));
  }
  SECTION("not JSON") {
    auto bad = tableio::read_json("{\"format\": ", "w.json");
    REQUIRE_FALSE(bad.ok());
    REQUIRE_THAT(bad.error().message, Catch::StartsWith("w.json: not JSON"));
  }
}

TEST_CASE("csv export has a header and one quoted line per row", "[tableio]") {
  const std::string csv = tableio::write_csv(sample_table());
  std::istringstream lines(csv);
  std::string header, first, second, extra;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  REQUIRE_FALSE(std::getline(lines, extra));
  REQUIRE_THAT(header, Catch::StartsWith("kernel,shape,dtype,device,fingerprint,source_hash,config,"
                                         "median_ms,n,"));
  // Shapes and configs hold commas and quotes: quoted, quotes doubled.
  REQUIRE_THAT(first, Catch::StartsWith("gemm,\"M=256,N=256,K=256\",f32,cpu,fp-Test CPU 3000,"
                                        "gemmhash00112233,"
                                        "\"{\"\"BM\"\":64,\"\"BN\"\":128,\"\"BK\"\":128,"
                                        "\"\"UNROLL\"\":4,\"\"VEC\"\":2}\",1.25,10,"));
  REQUIRE_THAT(first, Catch::Contains("Test CPU 3000,g++ (Debian 12.2.0-14) 12.2.0,1700000000123,"
                                      "build-host\r"));
  REQUIRE_THAT(second, Catch::Contains(",9.5,0,0,0,0,0,0,0,42.5,3.25,120,NVIDIA H100,12.4,"));
}

TEST_CASE("t4 export follows the T4 schema and reads back to the same table", "[tableio]") {
  const auto table = sample_table();
  const std::string text = tableio::write_t4(table);
  const auto doc = ordered_json::parse(text);
  REQUIRE(doc.at("schema_version") == "1.0.0");
  REQUIRE(doc.at("metadata").at("timeunit") == "miliseconds");
  const auto& result = doc.at("results").at(0);
  REQUIRE(result.at("timestamp") == "2023-11-14 22:13:20.123000+00:00");
  REQUIRE(result.at("configuration").dump() == k_config_a);
  REQUIRE(result.at("invalidity") == "correct");
  REQUIRE(result.at("correctness") == 1);
  REQUIRE(result.at("measurements").at(0).at("name") == "time");
  REQUIRE(result.at("measurements").at(0).at("value") == 1.25);
  REQUIRE(result.at("objectives") == ordered_json::array({"time"}));

  auto back = tableio::read_t4(text, "w.t4.json");
  REQUIRE(back.ok());
  require_same_table(table, *back);
  REQUIRE(back->kernels.size() == 1);
  REQUIRE(back->host == "build-host");

  auto detected = tableio::read_table(text, "w.t4.json");
  REQUIRE(detected.ok());
  REQUIRE(detected->rows.size() == 2);
}

namespace {

// Three results in the layout of the Kernel Tuner T4 files (shared dataset): two correct, one
// failed at run time.
constexpr const char* k_foreign_t4 = R"({
  "metadata": {"timeunit": "miliseconds"},
  "results": [
    {"timestamp": "2023-12-22 09:54:05.502007+00:00",
     "configuration": {"block_size_x": 16, "block_size_y": 1, "use_shmem": 0},
     "times": {"compilation": 918.5, "framework": 105.2, "search_algorithm": 0, "validation": 0,
               "runtimes": [3.97, 3.87, 3.88, 3.86]},
     "invalidity": "correct", "correctness": 1,
     "measurements": [{"name": "time", "value": 3.895, "unit": ""}],
     "objectives": ["time"]},
    {"timestamp": "2023-12-22 10:33:52.030910+00:00",
     "configuration": {"block_size_x": 32, "block_size_y": 16, "use_shmem": 1},
     "times": {"compilation": 3055.9, "framework": 2.1, "search_algorithm": 0, "validation": 0},
     "invalidity": "runtime", "correctness": 0,
     "measurements": [{"name": "time", "value": "RuntimeFailedConfig", "unit": ""}],
     "objectives": ["time"]},
    {"timestamp": "2023-12-22 10:00:00+00:00",
     "configuration": {"block_size_x": 64, "block_size_y": 2, "use_shmem": 1},
     "times": {"compilation": 700, "framework": 1, "search_algorithm": 0, "validation": 0,
               "runtimes": [0.56, 0.55, 0.554]},
     "invalidity": "correct", "correctness": 1,
     "measurements": [{"name": "time", "value": 0.5546666, "unit": ""},
                      {"name": "GFLOP/s", "value": 1234.5, "unit": ""}],
     "objectives": ["time"]}
  ],
  "schema_version": "1.0.0"
})";

} // namespace

TEST_CASE("a T4 file from elsewhere becomes one winner of the given key", "[tableio]") {
  SECTION("the best correct result wins, with statistics from its runtimes") {
    tableio::T4Defaults key;
    key.kernel = "convolution";
    key.shape = "W=4096,H=4096";
    key.device_name = "a100";
    key.host = "lab";
    auto table = tableio::read_table(k_foreign_t4, "A100_T4.json", key);
    REQUIRE(table.ok());
    REQUIRE(table->rows.size() == 1);
    const auto& row = table->rows[0];
    REQUIRE(row.kernel == "convolution");
    REQUIRE(row.shape == "W=4096,H=4096");
    REQUIRE(row.dtype == "f32");
    REQUIRE(row.device_name == "a100");
    REQUIRE_FALSE(row.fingerprint.empty());
    REQUIRE(row.source_hash.empty());
    REQUIRE(row.config.dump() == R"({"block_size_x":64,"block_size_y":2,"use_shmem":1})");
    REQUIRE(row.stats.n == 3);
    REQUIRE(row.median_ms == Approx(0.554));
    REQUIRE(row.gflops == 1234.5);
    REQUIRE(row.compile_ms == 700);
    REQUIRE(row.time_ms == 1'703'239'200'000);
    REQUIRE(row.host == "lab");

    // The derived fingerprint depends on the device name only.
    auto again = tableio::read_t4(k_foreign_t4, "x", key);
    REQUIRE(again.ok());
    REQUIRE(again->rows[0].fingerprint == row.fingerprint);
    key.device_name = "mi250x";
    auto other = tableio::read_t4(k_foreign_t4, "x", key);
    REQUIRE(other.ok());
    REQUIRE(other->rows[0].fingerprint != row.fingerprint);
  }
  SECTION("without a key it is refused, saying what to give") {
    auto table = tableio::read_table(k_foreign_t4, "A100_T4.json");
    REQUIRE_FALSE(table.ok());
    REQUIRE_THAT(table.error().message, Catch::StartsWith("A100_T4.json: "));
    REQUIRE_THAT(table.error().message, Catch::Contains("--kernel"));
  }
  SECTION("a bad result names its index and field") {
    std::string text = k_foreign_t4;
    text = edited(text, "\"2023-12-22 10:00:00+00:00\"", "\"yesterday\"");
    tableio::T4Defaults key;
    key.kernel = "k";
    key.shape = "N=1";
    auto table = tableio::read_t4(text, "f.json", key);
    REQUIRE_FALSE(table.ok());
    REQUIRE_THAT(table.error().message, Catch::StartsWith("f.json: results[2].timestamp: expected"));
  }
  SECTION("neither format") {
    auto table = tableio::read_table("[1, 2]", "f.json");
    REQUIRE_FALSE(table.ok());
    REQUIRE_THAT(table.error().message, Catch::Contains("expected a ktune table"));
  }
}

TEST_CASE("formats parse by name", "[tableio]") {
  for (auto format : {tableio::Format::json, tableio::Format::csv, tableio::Format::cpp_header,
                      tableio::Format::t4}) {
    REQUIRE(tableio::parse_format(tableio::to_string(format)) == format);
  }
  REQUIRE_FALSE(tableio::parse_format("xml"));
}
