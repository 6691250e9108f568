#include "tableio/engine_json.hpp"
#include "tableio/formats.hpp"

#include "tests/support/paths.hpp"
#include "tests/tableio/distill_fixtures.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace ktune;
using namespace ktune::test;
using nlohmann::ordered_json;

namespace {

// gemm at M = 16, 64, 256 with N = K = 128, and one shape of another (N, K).
tableio::Table engine_table() {
  auto table = make_table({make_row("M=16,N=128,K=128", k_small, 0.5, 1),
                           make_row("M=64,N=128,K=128", k_small, 1.5, 2),
                           make_row("M=256,N=128,K=128", k_large, 6.0, 3),
                           make_row("M=32,N=64,K=64", k_small, 0.2, 4)});
  table.kernels.push_back({"gemm", k_gemm_hash, gemm_spec()});
  return table;
}

// A rule of the same key: M below 91 takes small, from 91 on large then small.
tableio::RuleDocument engine_rule() {
  tableio::RuleDocument doc;
  doc.key = {"gemm", "f32", cpu_device().fingerprint, k_gemm_hash, "cpu"};
  doc.rule.dims = {"M", "N", "K"};
  doc.rule.params = {"BM", "BN", "BK", "UNROLL", "VEC"};
  doc.rule.configs = {{32, 64, 64, 8, 2}, {128, 128, 128, 8, 2}};
  tableio::RuleNode root;
  root.dim = 0;
  root.below = 91;
  root.left = 1;
  root.right = 2;
  tableio::RuleNode left, right;
  left.ranking = {0, 1};
  right.ranking = {1, 0};
  doc.rule.nodes = {root, left, right};
  doc.loso.regret.shapes = 3;
  doc.loso.regret.geomean = 1.01;
  return doc;
}

const tableio::EngineFile& file_named(const std::vector<tableio::EngineFile>& files, const std::string& name) {
  for (const auto& f : files) {
    if (f.name == name) return f;
  }
  FAIL("no file " << name);
  return files.front();
}

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The interpreters users are told to use: the default python3, and Debian's where it is another.
std::vector<std::string> interpreters() {
  std::vector<std::string> out{"python3"};
  if (std::filesystem::exists("/usr/bin/python3")) out.emplace_back("/usr/bin/python3");
  return out;
}

// What client/python's engine_tables reader answers for each value, as JSON.
ordered_json python_answers(const std::string& python, const TempDir& dir, const std::string& file,
                            const std::vector<int>& values) {
  std::string script = "import json, sys\nfrom ktune_client.engine_tables import EngineTable\n"
                       "t = EngineTable.load(sys.argv[1])\nprint(json.dumps([t.config(v) for v in (";
  for (int v : values) script += std::to_string(v) + ",";
  script += ")]))\n";
  dir.write("read.py", script);
  const std::string out = dir.str() + "/out";
  const int ran = run("PYTHONPATH='" + source_path("/client/python") + "' " + python + " '" + dir.str() +
                      "/read.py' '" + (dir.path() / file).string() + "' > '" + out + "' 2>&1");
  INFO(python << ": " << slurp(out));
  REQUIRE(ran == 0);
  return ordered_json::parse(slurp(out));
}

} // namespace

TEST_CASE("engine-json: one file per kernel, fixed dims and device, keyed by the dim",
          "[tableio][engine]") {
  auto files = tableio::write_engine_json(engine_table(), {engine_rule()}, {"M", "9.9.9"});
  REQUIRE(files.ok());
  REQUIRE(files->size() == 2);
  const auto& file = file_named(*files, "gemm,N=128,K=128,dtype=f32,device_name=Test_CPU_3000.json");
  file_named(*files, "gemm,N=64,K=64,dtype=f32,device_name=Test_CPU_3000.json");
  const auto doc = ordered_json::parse(file.text);
  std::vector<std::string> keys;
  for (auto it = doc.begin(); it != doc.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"16", "64", "256", "metadata"});
  CHECK(doc["256"] == ordered_json::parse(k_large));
  const auto& meta = doc["metadata"];
  CHECK(meta["ktune_version"] == "9.9.9");
  CHECK(meta["source_hash"] == k_gemm_hash);
  CHECK(meta["fingerprint"] == cpu_device().fingerprint);
  CHECK(meta["toolchain"] == "g++ (Debian 12.2.0-14) 12.2.0");
  CHECK(meta["driver"].is_null());
  CHECK(meta["fixed"] == ordered_json::parse(R"({"N":128,"K":128})"));
  CHECK(meta["entries"]["64"]["median_ms"] == 1.5);
  const auto& lookup = meta["lookup"];
  REQUIRE(lookup["between_keys"] == "buckets");
  REQUIRE(lookup["buckets"].size() == 2);
  CHECK(lookup["buckets"][0]["from"] == 1);
  CHECK(lookup["buckets"][0]["below"] == 91);
  CHECK(lookup["buckets"][0]["config"] == ordered_json::parse(k_small));
  CHECK(lookup["buckets"][1]["from"] == 91);
  CHECK(lookup["buckets"][1]["below"].is_null());
  CHECK(lookup["buckets"][1]["config"] == ordered_json::parse(k_large));

  SECTION("read back, the rows are the table's") {
    auto back = tableio::read_table(file.text, "engine.json");
    REQUIRE(back.ok());
    REQUIRE(back->rows.size() == 3);
    const auto table = engine_table();
    for (const auto& row : back->rows) {
      const auto* original = table.find(row.key());
      REQUIRE(original != nullptr);
      CHECK(row.config == original->config);
      CHECK(row.median_ms == original->median_ms);
      CHECK(row.time_ms == original->time_ms);
      CHECK(row.device_name == "cpu");
    }
  }
  SECTION("the Python reader answers by the file's rule, as an engine would") {
    TempDir dir;
    dir.write(file.name, file.text);
    const std::vector<int> values{1, 16, 50, 64, 90, 91, 200, 256, 100000};
    for (const std::string& python : interpreters()) {
      const auto got = python_answers(python, dir, file.name, values);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const int v = values[i];
        const char* expected = v == 256 ? k_large : v == 16 || v == 64 ? k_small : v < 91 ? k_small : k_large;
        INFO(python << ", M=" << v);
        CHECK(got[i] == ordered_json::parse(expected));
      }
    }
  }
}

TEST_CASE("engine-json: a bucket takes the first config the kernel admits across it",
          "[tableio][engine]") {
  // The rule puts large first everywhere; BM=128 is not admitted below M=65, so the lower
  // bucket (which holds the keys 16 and 64) states small.
  auto rule = engine_rule();
  rule.rule.nodes[1].ranking = {1, 0};
  auto files = tableio::write_engine_json(engine_table(), {rule}, {"M", "9.9.9"});
  REQUIRE(files.ok());
  const auto doc = ordered_json::parse(
      file_named(*files, "gemm,N=128,K=128,dtype=f32,device_name=Test_CPU_3000.json").text);
  const auto& buckets = doc["metadata"]["lookup"]["buckets"];
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0]["config"] == ordered_json::parse(k_small));
}

TEST_CASE("engine-json without a rule: the nearest key in log space", "[tableio][engine]") {
  auto files = tableio::write_engine_json(engine_table(), {}, {"M", "9.9.9"});
  REQUIRE(files.ok());
  const auto& file = file_named(*files, "gemm,N=128,K=128,dtype=f32,device_name=Test_CPU_3000.json");
  const auto doc = ordered_json::parse(file.text);
  CHECK(doc["metadata"]["lookup"]["between_keys"] == "nearest");
  TempDir dir;
  dir.write(file.name, file.text);
  // 128 is as near 64 as 256 in log space: the smaller key; 129 is nearer 256.
  for (const std::string& python : interpreters()) {
    INFO(python);
    const auto got = python_answers(python, dir, file.name, {1, 32, 128, 129, 100000});
    CHECK(got[0] == ordered_json::parse(k_small));
    CHECK(got[1] == ordered_json::parse(k_small));
    CHECK(got[2] == ordered_json::parse(k_small));
    CHECK(got[3] == ordered_json::parse(k_large));
    CHECK(got[4] == ordered_json::parse(k_large));
  }
}

TEST_CASE("engine-json refuses what it cannot write or read", "[tableio][engine]") {
  SECTION("a dim the kernel does not have") {
    auto files = tableio::write_engine_json(engine_table(), {}, {"B", "9.9.9"});
    REQUIRE_FALSE(files.ok());
    CHECK_THAT(files.error().message, Catch::Contains("has no dim B"));
  }
  SECTION("two devices of one model would share a file name") {
    auto table = engine_table();
    auto other = make_row("M=16,N=128,K=128", k_small, 0.4, 5, "fp-other-compiler");
    table.rows.push_back(other);
    REQUIRE(table.normalize().ok());
    auto files = tableio::write_engine_json(table, {}, {"M", "9.9.9"});
    REQUIRE_FALSE(files.ok());
    CHECK_THAT(files.error().message, Catch::Contains("--device"));
  }
  SECTION("a key that is no value of the dim") {
    auto files = tableio::write_engine_json(engine_table(), {}, {"M", "9.9.9"});
    REQUIRE(files.ok());
    auto doc = ordered_json::parse(files->front().text);
    doc["many"] = ordered_json::parse(k_small);
    auto back = tableio::read_table(doc.dump(), "e.json");
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("e.json: \"many\""));
  }
}
