#include "replay/replay_command.hpp"

#include "tests/support/temp_dir.hpp"

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sstream>

using ktune::replay::ReplayCommandOptions;
using ktune::replay::run_replay_command;

namespace {

// 4 x 3 configs, one failed, (3, 2) absent; optimum 1.0 ms at a=8, b=2... written as KT writes it.
std::string cache_text() {
  std::string text = R"({"device_name": "GPU", "kernel_name": "k", "tune_params_keys": ["a", "b"],
"tune_params": {"a": [1, 2, 4, 8], "b": [1, 2, 3]}, "objective": "time", "cache": {
)";
  const int a_values[] = {1, 2, 4, 8};
  bool first = true;
  for (int ai = 0; ai < 4; ++ai) {
    for (int b = 1; b <= 3; ++b) {
      if (ai == 3 && b == 3) continue;
      const int a = a_values[ai];
      const std::string time = (ai == 0 && b == 3) ? "\"RuntimeFailedConfig\""
                                                  : std::to_string(1.0 + (3 - ai) * 0.5 + std::abs(b - 2) * 0.25);
      text += std::string(first ? "" : ",\n") + "\"" + std::to_string(a) + "," + std::to_string(b) +
              "\": {\"a\": " + std::to_string(a) + ", \"b\": " + std::to_string(b) + ", \"time\": " + time + "}";
      first = false;
    }
  }
  return text + "\n}\n}\n";
}

// The same space with costs: every config compiles in 1000 ms and benchmarks in 500 ms, the
// failed one (a=1, b=3) costs its compile only.
std::string costed_cache_text() {
  std::string text = cache_text();
  std::size_t at = 0;
  while ((at = text.find("\"time\": ", at)) != std::string::npos) {
    const bool failed = text.compare(at + 8, 10, "\"RuntimeFa") == 0;
    const std::string cost = std::string("\"compile_time\": 1000, \"benchmark_time\": ") + (failed ? "0" : "500") + ", ";
    text.insert(at, cost);
    at += cost.size() + 8;
  }
  return text;
}

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome run(const ReplayCommandOptions& options) {
  std::ostringstream out;
  std::ostringstream err;
  const int code = run_replay_command(options, out, err);
  return {code, out.str(), err.str()};
}

} // namespace

TEST_CASE("replay/replay_command: table and JSON", "[replay][replay_command]") {
  ktune::test::TempDir dir;
  const std::string file = dir.write("k.json", cache_text()).string();

  SECTION("--json prints one object") {
    ReplayCommandOptions options;
    options.file = file;
    options.strategy = "exhaustive";
    options.budget = "11";
    options.repeats = 2;
    options.json = true;
    const Outcome o = run(options);
    REQUIRE(o.code == 0);
    CHECK(o.err.empty());
    const auto j = nlohmann::json::parse(o.out);
    CHECK(j["file"] == file);
    CHECK(j["strategy"] == "exhaustive");
    CHECK(j["budget"] == 11);
    CHECK(j["budget_basis"] == "valid_configs");
    CHECK(j["space_size"] == 12);
    CHECK(j["configs"] == 11);
    CHECK(j["valid_configs"] == 10);
    CHECK(j["failed_configs"] == 1);
    CHECK(j["prior"] == nlohmann::json::array());
    CHECK(j["prior_results"] == 0);
    CHECK(j["optimum_ms"] == 1.0);
    CHECK(j["mean_fraction"] == 1.0);
    CHECK(j["min_fraction"] == 1.0);
    CHECK(j["repeats"] == 2);
  }
  SECTION("the table shows each budget step") {
    ReplayCommandOptions options;
    options.file = file;
    options.strategy = "random";
    options.budget = "6";
    options.repeats = 3;
    options.steps = 3;
    const Outcome o = run(options);
    REQUIRE(o.code == 0);
    CHECK_THAT(o.out, Catch::Contains("11 configs of 12 (10 valid: measured, 1 failed)"));
    CHECK_THAT(o.out, Catch::Contains("optimum    1 ms  a=8,b=2"));
    CHECK_THAT(o.out, Catch::Contains("EVALS"));
    // Rows for 2, 4 and 6 evaluations.
    CHECK_THAT(o.out, Catch::Contains("\n     2 ") && Catch::Contains("\n     4 ") && Catch::Contains("\n     6 "));
  }
  SECTION("a percentage counts the valid configs, not the failed ones") {
    ReplayCommandOptions options;
    options.file = file;
    options.strategy = "random";
    options.budget = "100%";
    options.json = true;
    const Outcome o = run(options);
    REQUIRE(o.code == 0);
    CHECK(nlohmann::json::parse(o.out)["budget"] == 10);
  }
  SECTION("--prior: a recording of the same kernel on another device") {
    std::string other = cache_text();
    other.replace(other.find("\"GPU\""), 5, "\"GPU2\"");
    ReplayCommandOptions options;
    options.file = file;
    options.prior_files = {dir.write("other.json", other).string()};
    options.strategy = "bayes";
    options.budget = "1";
    options.repeats = 3;
    options.json = true;
    Outcome o = run(options);
    REQUIRE(o.code == 0);
    const auto j = nlohmann::json::parse(o.out);
    CHECK(j["prior"] == nlohmann::json::array({options.prior_files[0]}));
    CHECK(j["prior_results"] == 11);
    CHECK(j["mean_fraction"] == 1.0); // its optimum is the same config: evaluated first

    options.json = false;
    o = run(options);
    REQUIRE(o.code == 0);
    CHECK_THAT(o.out, Catch::Contains("prior      " + options.prior_files[0] + " (11 configs of this space)"));

    options.prior_files = {dir.write("another.json", R"({"tune_params_keys": ["m"], "tune_params": {"m": [1]},
"objective": "time", "cache": {"1": {"m": 1, "time": 1.0}}})").string()};
    o = run(options);
    CHECK(o.code == 2);
    CHECK_THAT(o.err, Catch::Contains("bad_prior") && Catch::Contains("another.json"));
  }
  SECTION("a time budget charges each evaluation its recorded compile + benchmark time") {
    ReplayCommandOptions options;
    options.file = dir.write("costed.json", costed_cache_text()).string();
    options.strategy = "exhaustive"; // index order: (1,1) 1.5 s, (1,2) 1.5 s, (1,3) failed 1 s, (2,1) ...
    options.budget = "4s";
    options.repeats = 2;
    options.json = true;
    Outcome o = run(options);
    REQUIRE(o.code == 0);
    auto j = nlohmann::json::parse(o.out);
    CHECK(j["budget_kind"] == "simulated_time");
    CHECK(j["budget_s"] == 4.0);
    CHECK(j["budget"].is_null());
    CHECK(j["budget_basis"] == "compile_and_benchmark_time");
    // 1.5 s and 3 s are below 4 s: the third evaluation starts and takes the run to 4 s.
    CHECK(j["evaluations"] == 3.0);
    CHECK(j["min_evaluations"] == 3);
    CHECK(j["max_evaluations"] == 3);
    CHECK(j["failed_evaluations"] == 1.0);
    CHECK(j["random_failed_evaluations"].get<double>() == Approx(3.0 / 11.0));
    CHECK(j["failures_avoided"].get<double>() == Approx(3.0 / 11.0 - 1.0));

    options.budget = "4.001s"; // the fourth evaluation starts at 4 s, before the budget is used up
    j = nlohmann::json::parse(run(options).out);
    CHECK(j["evaluations"] == 4.0);
    options.budget = "1000s"; // more than the whole space costs: every config once
    j = nlohmann::json::parse(run(options).out);
    CHECK(j["evaluations"] == 11.0);
    CHECK(j["mean_fraction"] == 1.0);

    options.json = false;
    options.budget = "6s";
    options.steps = 2;
    o = run(options);
    REQUIRE(o.code == 0);
    CHECK_THAT(o.out, Catch::Contains("budget 6.0 s of recorded compile + benchmark time (5.0 evaluations"));
    // At 3 s two evaluations have started... and the third one, at 3 s, has not.
    CHECK_THAT(o.out, Catch::Contains("\n    3.0     2.0 ") && Catch::Contains("\n    6.0     5.0 "));

    options.file = file; // records no costs
    options.json = true;
    o = run(options);
    CHECK(o.code == 2);
    CHECK_THAT(o.err, Catch::StartsWith("ktune: no_cost: k.json") && Catch::Contains("'compile_time'"));
    options.budget = "0s";
    o = run(options);
    CHECK(o.code == 2);
    CHECK_THAT(o.err, Catch::StartsWith("ktune: bad_budget: "));
  }
  SECTION("evaluation budgets say so, with the failures uniform sampling would make") {
    ReplayCommandOptions options;
    options.file = file;
    options.strategy = "exhaustive"; // index order: the failed config is the third
    options.budget = "3";
    options.json = true;
    const auto j = nlohmann::json::parse(run(options).out);
    CHECK(j["budget_kind"] == "evaluations");
    CHECK(j["budget_s"].is_null());
    CHECK(j["evaluations"] == 3.0);
    CHECK(j["failed_evaluations"] == 1.0);
    CHECK(j["random_failed_evaluations"].get<double>() == Approx(3.0 / 11.0));
  }
  SECTION("errors and exit codes") {
    ReplayCommandOptions options;
    options.file = (dir.path() / "missing.json").string();
    Outcome o = run(options);
    CHECK(o.code == 1);
    CHECK_THAT(o.err, Catch::StartsWith("ktune: io_error: ") && Catch::Contains("missing.json"));

    options.file = dir.write("score.json", R"({"objective": "score", "tune_params": {"m": [1]}, "cache": {}})").string();
    o = run(options);
    CHECK(o.code == 1);
    CHECK_THAT(o.err, Catch::Contains("unsupported_objective"));

    options.file = file;
    options.budget = "12 evaluations";
    o = run(options);
    CHECK(o.code == 2);
    CHECK_THAT(o.err, Catch::Contains("bad_budget"));

    options.budget = "5";
    options.strategy = "tabu";
    o = run(options);
    CHECK(o.code == 2);
    CHECK_THAT(o.err, Catch::Contains("unknown_strategy"));
  }
}

TEST_CASE("replay/replay_command: registered on a CLI11 app", "[replay][replay_command]") {
  ktune::test::TempDir dir;
  const std::string file = dir.write("k.json", cache_text()).string();
  auto parse_and_run = [&](std::vector<std::string> args, bool& parsed, Outcome& outcome) {
    CLI::App app{"test", "ktune"};
    app.fallthrough();
    bool global_json = false;
    app.add_flag("--json", global_json, "JSON");
    ktune::replay::ReplayCommand command(app);
    std::vector<const char*> argv{"ktune"};
    for (const auto& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    parsed = command.parsed();
    std::ostringstream out;
    std::ostringstream err;
    if (parsed) outcome = {command.run(global_json, out, err), out.str(), err.str()};
  };
  bool parsed = false;
  Outcome outcome{};
  SECTION("options after the file, --json on the subcommand") {
    parse_and_run({"replay", file, "--strategy", "genetic", "--budget", "50%", "--repeats", "2", "--seed", "3", "--json"},
                  parsed, outcome);
    REQUIRE(parsed);
    REQUIRE(outcome.code == 0);
    const auto j = nlohmann::json::parse(outcome.out);
    CHECK(j["strategy"] == "genetic");
    CHECK(j["budget"] == 5);
    CHECK(j["seed"] == 3);
  }
  SECTION("the front end's own --json") {
    parse_and_run({"--json", "replay", file, "--budget", "3"}, parsed, outcome);
    REQUIRE(parsed);
    CHECK(nlohmann::json::parse(outcome.out)["budget"] == 3);
  }
  SECTION("unknown strategies are usage errors of the parser") {
    CHECK_THROWS_AS(parse_and_run({"replay", file, "--strategy", "tabu"}, parsed, outcome), CLI::ValidationError);
  }
  SECTION("another command leaves it alone") {
    CLI::App app{"test", "ktune"};
    ktune::replay::ReplayCommand command(app);
    app.add_subcommand("jobs", "list jobs");
    const char* argv[] = {"ktune", "jobs"};
    app.parse(2, argv);
    CHECK_FALSE(command.parsed());
  }
}
