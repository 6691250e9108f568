#include "tableio/distill_input.hpp"
#include "tableio/rule_formats.hpp"

#include "tests/tableio/distill_fixtures.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace ktune;
using namespace ktune::test;

namespace {

struct Distilled {
  tableio::LoadedDistillInput loaded;
  tableio::RuleDocument doc;
};

Distilled distil_store(const TempDir& dir, bool complete, std::size_t max_configs = 2) {
  auto store = Store::open(dir.str() + "/ktune.db", OpenMode::read_write);
  REQUIRE(store.ok());
  fill_distill_store(*store, complete);
  auto key = tableio::resolve_distill_key(*store, "gemm", "f32", "cpu");
  REQUIRE(key.ok());
  auto loaded = tableio::load_distill_input(*store, *key);
  REQUIRE(loaded.ok());
  tableio::DistillOptions options;
  options.max_configs = max_configs;
  auto distilled = tableio::distill(loaded->input, options);
  REQUIRE(distilled.ok());
  auto doc = tableio::make_rule_document(*loaded, *distilled, options);
  doc.key = *key;
  doc.made_at_ms = 1'700'000'900'000;
  doc.host = "test-host";
  return {std::move(*loaded), std::move(doc)};
}

std::size_t config_of(const tableio::LoadedDistillInput& loaded, const std::string& text) {
  for (std::size_t c = 0; c < loaded.input.configs.size(); ++c) {
    if (loaded.config_text(c) == text) return c;
  }
  FAIL("no config " << text);
  return 0;
}

std::size_t shape_of(const tableio::LoadedDistillInput& loaded, const std::string& text) {
  for (std::size_t s = 0; s < loaded.input.shapes.size(); ++s) {
    if (loaded.input.shapes[s].text == text) return s;
  }
  FAIL("no shape " << text);
  return 0;
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

} // namespace

TEST_CASE("a store's per-shape results become the distill input", "[tableio][distill]") {
  TempDir dir;
  const Distilled d = distil_store(dir, false);
  const auto& in = d.loaded.input;
  CHECK(in.dims == std::vector<std::string>{"M", "N", "K"});
  CHECK(in.params == std::vector<std::string>{"BM", "BN", "BK", "UNROLL", "VEC"});
  REQUIRE(in.shapes.size() == 4);
  const std::size_t m32 = shape_of(d.loaded, "M=32,N=128,K=128");
  const std::size_t m256 = shape_of(d.loaded, "M=256,N=128,K=128");
  CHECK(in.shapes[m32].values == std::vector<std::int64_t>{32, 128, 128});
  CHECK(in.shapes[m32].winner == config_of(d.loaded, k_small));
  CHECK(in.shapes[m256].winner == config_of(d.loaded, k_large));
  const std::size_t small = config_of(d.loaded, k_small), large = config_of(d.loaded, k_large);
  CHECK(in.cells[m32][small].state == tableio::CellState::measured);
  CHECK(in.cells[m32][small].median_ms == Approx(1.0));
  CHECK(in.cells[m256][small].state == tableio::CellState::unknown);
  // Admission comes from the stored spec's constraints: BM=128 needs M > 64.
  REQUIRE(in.admits);
  CHECK_FALSE(in.admits(m32, large));
  CHECK(in.admits(m256, small));
  // The spec's [default] is a config of the input.
  REQUIRE(in.default_config);
  CHECK(d.loaded.config_text(*in.default_config) == k_medium);

  SECTION("what the rule lacks is listed: admitted cells of the pool never measured") {
    const std::size_t narrow = config_of(d.loaded, k_narrow);
    auto distilled = tableio::distill(in, {});
    REQUIRE(distilled.ok());
    std::vector<std::pair<std::size_t, std::size_t>> expected{
        {shape_of(d.loaded, "M=64,N=128,K=128"), narrow},
        {shape_of(d.loaded, "M=128,N=128,K=128"), narrow},
        {m256, small},
        {m256, narrow}};
    std::sort(expected.begin(), expected.end());
    CHECK(distilled->missing == expected);
  }
}

TEST_CASE("resolving the key to distil names what the store lacks", "[tableio][distill]") {
  TempDir dir;
  auto store = Store::open(dir.str() + "/ktune.db", OpenMode::read_write);
  REQUIRE(store.ok());
  fill_distill_store(*store, true);
  SECTION("by name and by fingerprint prefix") {
    auto by_name = tableio::resolve_distill_key(*store, "gemm", "f32", "cpu");
    REQUIRE(by_name.ok());
    CHECK(by_name->fingerprint == cpu_device().fingerprint);
    CHECK(by_name->source_hash == k_gemm_hash);
    auto by_prefix = tableio::resolve_distill_key(*store, "gemm", "f32", "fp-Test");
    REQUIRE(by_prefix.ok());
    CHECK(by_prefix->device_name == "cpu");
  }
  SECTION("errors") {
    auto kernel = tableio::resolve_distill_key(*store, "nope", "f32", "cpu");
    REQUIRE_FALSE(kernel.ok());
    CHECK(kernel.error().code == ErrorCode::not_found);
    auto dtype = tableio::resolve_distill_key(*store, "gemm", "f64", "cpu");
    REQUIRE_FALSE(dtype.ok());
    CHECK_THAT(dtype.error().message, Catch::Contains("tuned in f32 only"));
    auto device = tableio::resolve_distill_key(*store, "gemm", "f32", "cuda:0");
    REQUIRE_FALSE(device.ok());
    CHECK_THAT(device.error().message, Catch::Contains("it is tuned on cpu (fp-Test CPU"));
  }
}

TEST_CASE("a rule document survives its JSON", "[tableio][distill]") {
  TempDir dir;
  const Distilled d = distil_store(dir, true);
  const std::string text = tableio::write_rule_json(d.doc);
  auto back = tableio::read_rule_json(text, "rule.json");
  REQUIRE(back.ok());
  CHECK(tableio::write_rule_json(*back) == text);
  CHECK(back->rule.configs == d.doc.rule.configs);
  REQUIRE(back->rule.nodes.size() == d.doc.rule.nodes.size());
  CHECK(back->loso.regret.geomean == d.doc.loso.regret.geomean);
  for (const auto& shape : {"M=32,N=128,K=128", "M=100,N=128,K=128", "M=4096,N=1,K=7"}) {
    CHECK(back->ranking(shape).value() == d.doc.ranking(shape).value());
  }

  SECTION("what a reader refuses, naming the file and the field") {
    auto bad = [&](const std::string& from, const std::string& to) {
      std::string edited = text;
      const auto at = edited.find(from);
      REQUIRE(at != std::string::npos);
      edited.replace(at, from.size(), to);
      return tableio::read_rule_json(edited, "rule.json");
    };
    auto format = bad("\"ktune-rule\"", "\"ktune-table\"");
    REQUIRE_FALSE(format.ok());
    CHECK(format.error().code == ErrorCode::invalid_rule);
    CHECK_THAT(format.error().message, Catch::StartsWith("rule.json: format"));
    auto version = bad("\"schema_version\": 1", "\"schema_version\": 2");
    REQUIRE_FALSE(version.ok());
    CHECK_THAT(version.error().message, Catch::Contains("schema_version"));
    REQUIRE_FALSE(tableio::read_rule_json("[1]", "rule.json").ok());
  }
  SECTION("a child that points back is refused: every walk ends at a leaf") {
    auto j = nlohmann::ordered_json::parse(text);
    j["nodes"] = nlohmann::ordered_json::parse(R"([{"dim":"M","below":91,"left":0,"right":1},{"ranking":[0]}])");
    auto loop = tableio::read_rule_json(j.dump(), "rule.json");
    REQUIRE_FALSE(loop.ok());
    CHECK_THAT(loop.error().message, Catch::Contains("nodes[0].left"));
  }
}

TEST_CASE("the rule as a C++ header compiles and chooses as the rule does at compile time",
          "[tableio][distill][compiler]") {
  TempDir dir;
  const Distilled d = distil_store(dir, true);
  REQUIRE(d.doc.rule.leaves() >= 2);
  auto header = tableio::write_rule_cpp_header(d.doc);
  REQUIRE(header.ok());
  std::ostringstream program;
  program << "#include \"rule.hpp\"\n#include <cstdio>\nnamespace r = ktune_rule_gemm_f32;\n";
  for (std::int64_t m : {1, 32, 64, 90, 91, 100, 128, 256, 100000}) {
    const std::string shape = "M=" + std::to_string(m) + ",N=128,K=128";
    const auto ranking = d.doc.ranking(shape).value();
    program << "static_assert(r::rank(" << m << ", 128, 128).count == " << ranking.size() << ");\n"
            << "static_assert(r::choose(" << m << ", 128, 128).BM == " << ranking[0]["BM"]
            << " && r::choose(" << m << ", 128, 128).BK == " << ranking[0]["BK"] << ");\n";
  }
  program << "int main() { std::printf(\"%lld\\n\", static_cast<long long>(r::k_config_count)); }\n";
  dir.write("rule.hpp", *header);
  dir.write("main.cpp", program.str());
  const std::string log = dir.str() + "/log";
  for (const char* standard : {"c++17", "c++20"}) {
    const int compiled = run(std::string(KTUNE_TEST_CXX) + " -std=" + standard +
                             " -Wall -Wextra -Werror -pedantic -o '" + dir.str() + "/prog' '" +
                             dir.str() + "/main.cpp' > '" + log + "' 2>&1");
    INFO(slurp(log) << *header);
    REQUIRE(compiled == 0);
  }
  REQUIRE(run("'" + dir.str() + "/prog' > '" + log + "' 2>&1") == 0);
  CHECK(slurp(log) == std::to_string(d.doc.rule.configs.size()) + "\n");

  SECTION("a param named like a C++ keyword cannot be a field") {
    tableio::RuleDocument odd = d.doc;
    odd.rule.params[0] = "class";
    auto refused = tableio::write_rule_cpp_header(odd);
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message, Catch::Contains("'class'"));
  }
}

TEST_CASE("the rule as a Python module ranks as the rule does", "[tableio][distill]") {
  TempDir dir;
  const Distilled d = distil_store(dir, true);
  auto module = tableio::write_rule_python(d.doc);
  REQUIRE(module.ok());
  dir.write("gemm_rule.py", *module);
  const std::vector<std::int64_t> ms{1, 32, 90, 91, 128, 100000};
  std::string script = "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport gemm_rule\n"
                       "print(json.dumps([gemm_rule.rank(m, 128, 128) for m in (";
  for (auto m : ms) script += std::to_string(m) + ",";
  script += ")]))\n";
  dir.write("check.py", script);
  const std::string out = dir.str() + "/out";
  // The default python3 and Debian's, where it is another.
  std::vector<std::string> pythons{"python3"};
  if (std::filesystem::exists("/usr/bin/python3")) pythons.emplace_back("/usr/bin/python3");
  for (const std::string& python : pythons) {
    const int ran = run(python + " '" + dir.str() + "/check.py' '" + dir.str() + "' > '" + out + "' 2>&1");
    INFO(python << ": " << slurp(out) << *module);
    REQUIRE(ran == 0);
    const auto got = nlohmann::ordered_json::parse(slurp(out));
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const auto expected = d.doc.ranking("M=" + std::to_string(ms[i]) + ",N=128,K=128").value();
      CHECK(got[i] == nlohmann::ordered_json(expected));
    }
  }
}

TEST_CASE("a rule's file name is made of safe parts only", "[tableio][distill]") {
  tableio::DistillKey key{"gemm", "f32", "0123abcd", "hash", "cpu"};
  CHECK(tableio::rule_file_name(key).value() == "gemm.f32.0123abcd.json");
  CHECK(tableio::rules_dir_name("ktune.db") == "ktune.db-rules");
  key.kernel = "../etc";
  CHECK_FALSE(tableio::rule_file_name(key).ok());
  key.kernel = "gemm";
  key.dtype = "f/32";
  CHECK_FALSE(tableio::rule_file_name(key).ok());
}
