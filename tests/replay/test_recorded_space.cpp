#include "replay/recorded_space.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <string>

using ktune::replay::parse_recorded_space;
using ktune::replay::RecordFormat;

namespace {

// A Kernel Tuner cache as Kernel Tuner writes it: header, one entry per line, closing braces.
const std::string k_cache_head = R"({
"device_name": "NVIDIA A100-PCIE-40GB",
"kernel_name": "convolution_kernel",
"problem_size": [4096, 4096],
"tune_params_keys": ["block_size_x", "tile", "use_shmem"],
"tune_params": {"block_size_x": [16, 32, 48], "tile": [1, 2], "use_shmem": [0, 1]},
"objective": "time",
"cache": {
"16,1,0": {"block_size_x": 16, "tile": 1, "use_shmem": 0, "time": 3.5, "times": [3.4, 3.6], "compile_time": 900.1},
"32,1,1": {"block_size_x": 32, "tile": 1, "use_shmem": 1, "time": 1.25, "times": [1.2, 1.3], "compile_time": 700},
"48,2,1": {"block_size_x": 48, "tile": 2, "use_shmem": 1, "time": "RuntimeFailedConfig", "compile_time": 650},
"32,2,0": {"block_size_x": 32, "tile": 2, "use_shmem": 0, "time": 2.0, "times": [2.0, 2.0]},
"16,2,1": {"block_size_x": 16, "tile": 2, "use_shmem": 1, "time": "CompilationFailedConfig"},)";
const std::string k_cache_last =
    "\n\"48,1,0\": {\"block_size_x\": 48, \"tile\": 1, \"use_shmem\": 0, \"time\": 1e20},";
const std::string k_cache = k_cache_head + k_cache_last.substr(0, k_cache_last.size() - 1) + "\n}\n}\n";

const std::string k_t4 = R"({
  "schema_version": "1.0.0",
  "metadata": {"timeunit": "miliseconds"},
  "results": [
    {"timestamp": "2023-12-22 09:54:05+00:00",
     "configuration": {"zeta": 2, "alpha": 64, "mode": "fast"},
     "times": {"compilation": 918.5, "runtimes": [3.9, 3.8]},
     "invalidity": "correct", "correctness": 1,
     "measurements": [{"name": "GFLOP/s", "value": 10, "unit": ""}, {"name": "time", "value": 3.85, "unit": ""}],
     "objectives": ["time"]},
    {"timestamp": "t", "configuration": {"zeta": 1, "alpha": 128, "mode": "fast"},
     "times": {"compilation": 3055.9}, "invalidity": "runtime", "correctness": 0,
     "measurements": [{"name": "time", "value": "RuntimeFailedConfig", "unit": ""}], "objectives": ["time"]},
    {"timestamp": "t", "configuration": {"zeta": 1, "alpha": 64, "mode": "slow"},
     "invalidity": "correct", "measurements": [{"name": "time", "value": 1.5, "unit": ""}]}
  ]
})";

const std::string k_results_list = R"([[
  {"block_size_x": 32, "tile_size_x": 1, "time": 1.24},
  {"block_size_x": 32, "tile_size_x": 2, "time": 0.95},
  {"block_size_x": 64, "tile_size_x": 1, "time": 0.91, "GFLOP/s": 12.5}
], {"device_name": "Tesla K40c", "iterations": 7}])";

} // namespace

TEST_CASE("replay/recorded_space: Kernel Tuner cache", "[replay][recorded_space]") {
  auto parsed = parse_recorded_space(k_cache, "A100.json");
  REQUIRE(parsed.ok());
  const auto& r = *parsed;
  CHECK(r.format == RecordFormat::kerneltuner_cache);
  CHECK(r.kernel_name == "convolution_kernel");
  CHECK(r.device_name == "NVIDIA A100-PCIE-40GB");
  CHECK_FALSE(r.was_unterminated);
  REQUIRE(r.space.param_count() == 3);
  CHECK(r.space.params()[0].name == "block_size_x");
  CHECK(r.space.params()[1].name == "tile");
  CHECK(r.space.params()[0].values == std::vector<double>{16, 32, 48});
  CHECK(r.space.cartesian_size() == 12);
  SECTION("present configs are the space; markers and 1e20 are failures") {
    CHECK(r.space.size() == 6);
    CHECK(r.measured == 3);
    CHECK(r.failed == 3);
    CHECK(r.optimum_ms == 1.25);
    CHECK(r.config_text(r.optimum_config) == "block_size_x=32,tile=1,use_shmem=1");
    // Configs are sorted by value indices: (16,1,0) first.
    CHECK(r.config_text(0) == "block_size_x=16,tile=1,use_shmem=0");
    REQUIRE(r.time_ms[0]);
    CHECK(*r.time_ms[0] == 3.5);
    const std::vector<std::uint32_t> failed{2, 1, 1};
    const auto id = r.space.find(failed);
    REQUIRE(id);
    CHECK_FALSE(r.time_ms[*id]);
    const std::vector<std::uint32_t> absent{0, 0, 1};
    CHECK_FALSE(r.space.find(absent));
  }
}

TEST_CASE("replay/recorded_space: unterminated Kernel Tuner cache", "[replay][recorded_space]") {
  SECTION("ends after a complete entry and its comma") {
    auto parsed = parse_recorded_space(k_cache_head + k_cache_last + "\n", "run.json");
    REQUIRE(parsed.ok());
    CHECK(parsed->was_unterminated);
    CHECK(parsed->space.size() == 6);
  }
  SECTION("ends in a torn line") {
    auto parsed = parse_recorded_space(k_cache_head + "\n\"48,1,0\": {\"block_size_x\": 48, \"ti", "run.json");
    REQUIRE(parsed.ok());
    CHECK(parsed->was_unterminated);
    CHECK(parsed->space.size() == 5);
  }
  SECTION("no entry yet") {
    const std::string head = k_cache_head.substr(0, k_cache_head.find("\"cache\": {") + 10);
    auto parsed = parse_recorded_space(head + "\n", "run.json");
    REQUIRE_FALSE(parsed.ok());
    CHECK_THAT(parsed.error().message, Catch::Contains("at least one configuration"));
  }
}

TEST_CASE("replay/recorded_space: T4 results", "[replay][recorded_space]") {
  auto parsed = parse_recorded_space(k_t4, "A100_T4.json");
  REQUIRE(parsed.ok());
  const auto& r = *parsed;
  CHECK(r.format == RecordFormat::t4);
  // Params keep the file's order; values are sorted, numbers ascending, strings by text.
  REQUIRE(r.space.param_count() == 3);
  CHECK(r.space.params()[0].name == "zeta");
  CHECK(r.space.params()[1].name == "alpha");
  CHECK(r.space.params()[2].name == "mode");
  CHECK(r.space.params()[0].values == std::vector<double>{1, 2});
  CHECK(r.value_text[2] == std::vector<std::string>{"fast", "slow"});
  CHECK(r.space.params()[2].values == std::vector<double>{0, 1}); // ordinals for strings
  CHECK(r.space.size() == 3);
  CHECK(r.failed == 1);
  CHECK(r.optimum_ms == 1.5);
  CHECK(r.config_text(r.optimum_config) == "zeta=1,alpha=64,mode=slow");
  SECTION("costs: compilation plus the runtimes, known only when every result has them") {
    CHECK(r.cost_ms.empty());
    CHECK(r.cost_missing == "results[2]: no number >= 0 in 'times.compilation'");
    std::string costed = k_t4;
    costed.replace(costed.find(R"("invalidity": "correct", "measurements")"), 0, R"("times": {"compilation": 100}, )");
    auto with_costs = parse_recorded_space(costed, "A100_T4.json");
    REQUIRE(with_costs.ok());
    CHECK(with_costs->cost_missing.empty());
    // Configs in index order: (1,64,slow), (1,128,fast) failed, (2,64,fast).
    REQUIRE(with_costs->cost_ms.size() == 3);
    CHECK(with_costs->cost_ms[0] == Approx(100));
    CHECK(with_costs->cost_ms[1] == Approx(3055.9));
    CHECK(with_costs->cost_ms[2] == Approx(918.5 + 3.9 + 3.8));
  }
}

TEST_CASE("replay/recorded_space: Kernel Tuner costs", "[replay][recorded_space]") {
  SECTION("compile_time + benchmark_time of every entry, failed ones included") {
    auto parsed = parse_recorded_space(R"({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]},
"objective": "time", "cache": {
"1": {"a": 1, "time": 2.0, "compile_time": 1000, "benchmark_time": 250.5},
"2": {"a": 2, "time": "RuntimeFailedConfig", "compile_time": 800, "benchmark_time": 0}}})", "k.json");
    REQUIRE(parsed.ok());
    CHECK(parsed->cost_ms == std::vector<double>{1250.5, 800});
    CHECK(parsed->cost_missing.empty());
  }
  SECTION("an entry without benchmark_time: no costs, and which entry says why") {
    auto parsed = parse_recorded_space(k_cache, "A100.json");
    REQUIRE(parsed.ok());
    CHECK(parsed->cost_ms.empty());
    CHECK_THAT(parsed->cost_missing, Catch::StartsWith("cache entry '") && Catch::Contains("no number >= 0 in '"));
  }
  SECTION("an old results list records none") {
    auto parsed = parse_recorded_space(k_results_list, "expdist.json");
    REQUIRE(parsed.ok());
    CHECK(parsed->cost_ms.empty());
    CHECK(parsed->cost_missing == "results[0][0]: no number >= 0 in 'compile_time'");
  }
}

TEST_CASE("replay/recorded_space: old results list", "[replay][recorded_space]") {
  auto parsed = parse_recorded_space(k_results_list, "expdist.json");
  REQUIRE(parsed.ok());
  CHECK(parsed->format == RecordFormat::results_list);
  CHECK(parsed->device_name == "Tesla K40c");
  REQUIRE(parsed->space.param_count() == 2); // "time" and "GFLOP/s" are not params
  CHECK(parsed->space.params()[0].name == "block_size_x");
  CHECK(parsed->space.size() == 3);
  CHECK(parsed->space.cartesian_size() == 4);
  CHECK(parsed->optimum_ms == 0.91);
  SECTION("a bare list") {
    auto bare = parse_recorded_space(R"([{"a": 1, "time": 2.0}, {"a": 2, "time": 1.0}])", "list.json");
    REQUIRE(bare.ok());
    CHECK(bare->optimum_ms == 1.0);
  }
}

TEST_CASE("replay/recorded_space: errors name the file and the place", "[replay][recorded_space]") {
  auto expect_error = [](const std::string& text, ktune::ErrorCode code, const std::string& fragment) {
    INFO(text);
    auto parsed = parse_recorded_space(text, "f.json");
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().code == code);
    CHECK_THAT(parsed.error().message, Catch::StartsWith("f.json: ") && Catch::Contains(fragment));
  };
  SECTION("not JSON, or not a known format") {
    expect_error("", ktune::ErrorCode::bad_record, "does not parse as JSON");
    expect_error("{\"a\": ", ktune::ErrorCode::bad_record, "does not parse as JSON");
    expect_error("42", ktune::ErrorCode::bad_record, "found number");
    expect_error("{\"x\": 1}", ktune::ErrorCode::bad_record, "without either key");
  }
  SECTION("objective other than time") {
    expect_error(R"({"objective": "score", "tune_params_keys": ["m"], "tune_params": {"m": ["a"]},
                     "cache": {"a": {"m": "a", "score": 0.5}}})",
                 ktune::ErrorCode::unsupported_objective, "\"score\"");
  }
  SECTION("Kernel Tuner cache contents") {
    expect_error(R"({"tune_params": {"a": [1]}, "cache": []})", ktune::ErrorCode::bad_record, "cache: expected an object");
    expect_error(R"({"cache": {}})", ktune::ErrorCode::bad_record, "tune_params");
    expect_error(R"({"tune_params_keys": ["a"], "tune_params": {"a": [1, 1]}, "cache": {}})", ktune::ErrorCode::bad_record,
                 "listed twice");
    expect_error(R"({"tune_params_keys": ["a", "b"], "tune_params": {"a": [1]}, "cache": {}})", ktune::ErrorCode::bad_record,
                 "'b' of tune_params_keys is missing");
    expect_error(R"({"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": {"1": {"a": 2, "time": 1}}})",
                 ktune::ErrorCode::bad_record, "cache entry '1': a = 2 is not one of tune_params.a");
    expect_error(R"({"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": {"1": {"a": 1}}})", ktune::ErrorCode::bad_record,
                 "expected a field 'time'");
    expect_error(R"({"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": {"1": {"a": 1, "time": -2}}})",
                 ktune::ErrorCode::bad_record, "expected a number > 0");
    expect_error(R"({"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": {"1": {"a": 1, "time": [1]}}})",
                 ktune::ErrorCode::bad_record, "found array");
    expect_error(R"({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]},
                     "cache": {"1": {"a": 1, "time": "RuntimeFailedConfig"}}})",
                 ktune::ErrorCode::bad_record, "only 1 failed");
  }
  SECTION("values come from the key when an entry lacks the field") {
    auto parsed = parse_recorded_space(
        R"({"tune_params_keys": ["a", "b"], "tune_params": {"a": [1, 2], "b": ["x", "y"]},
            "cache": {"2,y": {"time": 1.5}, "1,x": {"a": 1, "b": "x", "time": 2}}})",
        "f.json");
    REQUIRE(parsed.ok());
    CHECK(parsed->config_text(parsed->optimum_config) == "a=2,b=y");
    expect_error(R"({"tune_params_keys": ["a", "b"], "tune_params": {"a": [1], "b": [1]}, "cache": {"1": {"time": 1}}})",
                 ktune::ErrorCode::bad_record, "its key has 1 values, expected 2");
  }
  SECTION("T4 and list contents") {
    expect_error(R"({"results": [{"configuration": {"a": 1}, "invalidity": "correct", "measurements": []}]})",
                 ktune::ErrorCode::bad_record, "results[0]: expected a measurement named \"time\"");
    expect_error(R"({"results": [{"configuration": {"a": 1}, "measurements": [{"name": "time", "value": 1}]},
                                 {"configuration": {"b": 1}, "measurements": [{"name": "time", "value": 1}]}]})",
                 ktune::ErrorCode::bad_record, "results[1].configuration: expected the parameters of results[0]");
    expect_error(R"({"results": [{"configuration": {"a": 1}, "measurements": [{"name": "time", "value": 1}]},
                                 {"configuration": {"a": 1}, "measurements": [{"name": "time", "value": 2}]}]})",
                 ktune::ErrorCode::bad_record, "repeats the configuration of");
    expect_error(R"({"results": [{"configuration": {"a": [1]}}]})", ktune::ErrorCode::bad_record, "expected a number, boolean or string");
    expect_error(R"([[{"a": 1, "time": 1}, {"a": 1}]])", ktune::ErrorCode::bad_record, "results[0][1]: expected a field 'time'");
    expect_error(R"([])", ktune::ErrorCode::bad_record, "at least one configuration");
    expect_error(R"([3])", ktune::ErrorCode::bad_record, "results[0]: expected an object, found number");
  }
}

TEST_CASE("replay/recorded_space: hostile input never crashes", "[replay][recorded_space]") {
  SECTION("deep nesting") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK_FALSE(parse_recorded_space(deep, "deep.json").ok());
    const std::string open_only(100000, '{');
    CHECK_FALSE(parse_recorded_space(open_only, "deep.json").ok());
  }
  SECTION("deep nesting inside a value an error message quotes") {
    // Quoting the value (its JSON dump) used to recurse once per level and overflow the stack.
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    for (const std::string& text :
         {R"({"tune_params_keys": ["a"], "tune_params": {"a": [1]}, "cache": {"1": {"a": 1, "time": )" + deep + "}}}",
          R"({"tune_params_keys": ["a"], "tune_params": {"a": [)" + deep + "]}, \"cache\": {}}",
          R"({"schema_version": "1.0.0", "results": [{"configuration": {"a": )" + deep + "}}]}"}) {
      auto parsed = parse_recorded_space(text, "deep.json");
      REQUIRE_FALSE(parsed.ok());
      CHECK(parsed.error().code == ktune::ErrorCode::bad_record);
      CHECK_THAT(parsed.error().message,
                 Catch::StartsWith("deep.json: ") && Catch::Contains("at most 32 levels of nested arrays and objects, found 1000"));
    }
    // Brackets inside strings do not count.
    auto brackets = parse_recorded_space(
        R"([[{"a": 1, "time": 2.0, "note": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"{{{{"}], {}])", "list.json");
    CHECK(brackets.ok());
  }
  SECTION("truncations and byte flips of valid files") {
    std::mt19937_64 rng(11);
    for (const std::string* text : {&k_cache, &k_t4, &k_results_list}) {
      for (std::size_t cut = 0; cut < text->size(); cut += 7) (void)parse_recorded_space(text->substr(0, cut), "cut.json");
      for (int i = 0; i < 300; ++i) {
        std::string mutated = *text;
        const std::size_t at = rng() % mutated.size();
        mutated[at] = static_cast<char>(rng() % 256);
        (void)parse_recorded_space(mutated, "flip.json");
      }
    }
  }
  SECTION("huge declared spaces") {
    std::string params;
    std::string keys;
    for (int i = 0; i < 70; ++i) {
      params += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\": [1, 2]";
      keys += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\"";
    }
    auto parsed = parse_recorded_space("{\"tune_params_keys\": [" + keys + "], \"tune_params\": {" + params +
                                           "}, \"cache\": {\"x\": {\"time\": 1}}}",
                                       "huge.json");
    REQUIRE_FALSE(parsed.ok());
  }
}
