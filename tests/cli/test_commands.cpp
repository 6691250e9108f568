#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/job_view.hpp"
#include "tests/cli/fake_daemon.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <sstream>

using ktune::test::FakeDaemon;
using ktune::test::FakeResponse;
using nlohmann::json;

namespace {

// A fake ktuned answering each op with a canned result (or error, when the value has "error").
class CannedDaemon {
public:
  explicit CannedDaemon(const ktune::test::TempDir& dir)
      : m_daemon(dir.str() + "/k.sock", [this](const std::string& line) { return answer(line); }) {}

  std::map<std::string, json> results;
  std::map<std::string, std::vector<json>> events;

  [[nodiscard]] const std::string& socket() const { return m_daemon.socket(); }
  [[nodiscard]] json last_request() const { return json::parse(m_daemon.received().back()); }
  [[nodiscard]] std::vector<json> requests() const {
    std::vector<json> all;
    for (const auto& line : m_daemon.received()) all.push_back(json::parse(line));
    return all;
  }

private:
  FakeResponse answer(const std::string& line) {
    std::string op = json::parse(line).value("op", "");
    FakeResponse response;
    for (const auto& data : events[op]) response.lines.push_back(FakeDaemon::event(line, data));
    auto it = results.find(op);
    if (it == results.end())
      response.lines.push_back(FakeDaemon::error(line, "unknown_op", "no canned reply for " + op));
    else if (it->second.contains("error"))
      response.lines.push_back(FakeDaemon::error(line, it->second["error"]["code"],
                                                 it->second["error"]["message"]));
    else
      response.lines.push_back(FakeDaemon::ok(line, it->second));
    return response;
  }

  FakeDaemon m_daemon;
};

struct Run {
  int code;
  std::string out, err;
};

Run run_cli(const CannedDaemon& daemon, std::vector<std::string> args) {
  std::vector<std::string> full{"ktune", "--socket", daemon.socket()};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (const auto& a : full) argv.push_back(a.c_str());
  std::ostringstream out, err;
  ktune::cli::Output io{out, err, false};
  int code = ktune::cli::run(static_cast<int>(argv.size()), argv.data(), io);
  return {code, out.str(), err.str()};
}

const json k_job = {{"id", 7},          {"kernel", "gemm"},   {"shape", "M=64,N=64,K=64"},
                    {"dtype", "f32"},   {"device", "cpu"},    {"strategy", "exhaustive"},
                    {"state", "done"},  {"total", 3},         {"done", 3},
                    {"failed", 1},      {"error", nullptr},   {"created_at", 1700000000},
                    {"started_at", 1700000001}, {"finished_at", 1700000013}};
const json k_winner = {{"config", {{"BM", 64}, {"BN", 32}}}, {"median_ms", 1.2345}, {"gflops", 27.24}};

} // namespace

TEST_CASE("formatting helpers", "[cli]") {
  using namespace ktune::cli;
  SECTION("configs") {
    CHECK(format_config(json{{"BM", 64}, {"BN", 32}}, ",") == "BM=64,BN=32");
    CHECK(format_config(json{{"BM", 64}, {"MODE", "fast"}}, " ") == "BM=64 MODE=fast");
    CHECK(format_config(json(), ",") == "-");
    CHECK(format_config(json::object(), ",") == "-");
  }
  SECTION("times and rates") {
    CHECK(format_ms(1.2345) == "1.234");
    CHECK(format_ms(0.01234) == "0.0123");
    CHECK(format_ms(2500) == "2500.0");
    CHECK(format_gflops(27.24) == "27.2");
    CHECK(format_gflops(0.5) == "0.5");
    CHECK(format_gflops(0) == "-");
  }
  SECTION("progress line") {
    json data = {{"done", 5}, {"total", 27}, {"failed", 1}, {"best_config", {{"BM", 64}}},
                 {"best_median_ms", 1.0}, {"best_gflops", 12.34}};
    CHECK(ProgressPrinter::line(data) == "[5/27] failed 1  best: BM=64 median 1.000 ms, 12.3 GFLOP/s");
    data["best_gflops"] = 0;
    CHECK(ProgressPrinter::line(data) == "[5/27] failed 1  best: BM=64 median 1.000 ms");
    data["best_config"] = nullptr;
    CHECK(ProgressPrinter::line(data) == "[5/27] failed 1  best: -");
  }
}

TEST_CASE("ProgressPrinter", "[cli]") {
  using ktune::cli::ProgressPrinter;
  auto data = [](int done) { return json{{"done", done}, {"total", 100}, {"failed", 0}}; };

  SECTION("off a terminal, prints at each further 10% and at the end") {
    std::ostringstream err;
    ProgressPrinter p(err, false);
    for (int done = 1; done <= 100; ++done) p.update(data(done));
    p.finish();
    std::string text = err.str();
    auto lines = std::count(text.begin(), text.end(), '\n');
    CHECK(lines >= 10);
    CHECK(lines <= 20);
    CHECK(text.find('\r') == std::string::npos);
    CHECK_THAT(text, Catch::EndsWith("[100/100] failed 0  best: -\n"));
  }

  SECTION("on a terminal, rewrites one line and ends it on finish") {
    std::ostringstream err;
    ProgressPrinter p(err, true);
    p.update(data(1));
    p.update(data(2));
    p.finish();
    CHECK(err.str() == "\r[1/100] failed 0  best: -\x1b[K\r[2/100] failed 0  best: -\x1b[K\n");
  }
}

TEST_CASE("commands against a fake daemon", "[cli]") {
  ktune::test::TempDir dir;
  CannedDaemon daemon(dir);

  SECTION("query prints an exact winner and exits 0") {
    daemon.results["lookup"] = {{"rung", "exact"}, {"exact", true},
                                {"config", {{"BM", 64}, {"BN", 32}}}, {"median_ms", 1.5},
                                {"gflops", 20.0}, {"job", 7}, {"reason", nullptr}};
    auto r = run_cli(daemon, {"query", "gemm", "--shape", "M=64,N=64,K=64"});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::StartsWith("BM=64 BN=32") && Catch::Contains("1.500 ms") &&
                          Catch::Contains("20.0 GFLOP/s"));
    json req = daemon.last_request();
    CHECK(req["op"] == "lookup");
    CHECK(req["kernel"] == "gemm");
    CHECK(req["shape"] == "M=64,N=64,K=64");
    CHECK(req["dtype"] == "f32");
    CHECK(req["device"] == "cpu");
  }

  SECTION("query on a miss prints the default and exits 3, also with --json") {
    daemon.results["lookup"] = {{"rung", "default"}, {"exact", false},
                                {"config", {{"BM", 64}}}, {"reason", "not_tuned"}};
    auto r = run_cli(daemon, {"query", "gemm", "--shape", "M=8", "--dtype", "f64"});
    CHECK(r.code == 3);
    CHECK(r.out == "no tuned winner for gemm M=8, f64, cpu (not_tuned); the kernel's default: BM=64\n");
    auto j = run_cli(daemon, {"--json", "query", "gemm", "--shape", "M=8"});
    CHECK(j.code == 3);
    CHECK(json::parse(j.out)["rung"] == "default");
  }

  SECTION("an error reply is printed as code and message, exit 1") {
    daemon.results["lookup"] = {{"error", {{"code", "unknown_kernel"}, {"message", "no kernel 'x'"}}}};
    auto r = run_cli(daemon, {"query", "x", "--shape", "N=1"});
    CHECK(r.code == 1);
    CHECK(r.err == "ktune: unknown_kernel: no kernel 'x'\n");
    CHECK(r.out.empty());
  }

  SECTION("tune without --wait prints the queued job") {
    daemon.results["tune"] = {{"job", 7}, {"total", 27}, {"state", "queued"}};
    auto r = run_cli(daemon, {"tune", "gemm", "--shape", "M=64,N=64,K=64", "--budget", "5"});
    CHECK(r.code == 0);
    CHECK(r.out == "job 7 queued (27 candidates)\n");
    json req = daemon.last_request();
    CHECK(req["budget"] == 5);
    CHECK(req["wait"] == false);
    CHECK(req["strategy"] == "exhaustive");

    r = run_cli(daemon, {"tune", "gemm", "--shape", "M=64,N=64,K=64", "--budget", "1.5s"});
    CHECK(r.code == 0);
    req = daemon.last_request();
    CHECK(req["budget_s"] == 1.5);
    CHECK_FALSE(req.contains("budget"));
    CHECK_FALSE(req.contains("budget_fraction"));
    r = run_cli(daemon, {"tune", "gemm", "--shape", "M=64,N=64,K=64", "--budget", "0s"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("60s"));
  }

  SECTION("tune --wait shows progress on stderr and the winner on stdout") {
    daemon.events["tune"] = {
        {{"job", 7}, {"done", 1}, {"total", 3}, {"failed", 0}, {"best_config", {{"BM", 64}}},
         {"best_median_ms", 2.0}, {"best_gflops", 10.0}},
        {{"job", 7}, {"done", 3}, {"total", 3}, {"failed", 1}, {"best_config", {{"BM", 64}}},
         {"best_median_ms", 1.2}, {"best_gflops", 27.2}}};
    daemon.results["tune"] = {{"job", k_job}, {"winner", k_winner}};
    auto r = run_cli(daemon, {"tune", "gemm", "--shape", "M=64,N=64,K=64", "--wait"});
    CHECK(r.code == 0);
    // The progress line's best and the winner line use the same words.
    CHECK_THAT(r.err, Catch::Contains("[1/3] failed 0  best: BM=64 median 2.000 ms, 10.0 GFLOP/s") &&
                          Catch::Contains("[3/3] failed 1  best: BM=64 median 1.200 ms, 27.2 GFLOP/s"));
    CHECK(r.out ==
          "winner: BM=64,BN=32 median 1.234 ms, 27.2 GFLOP/s\njob 7 done: 3 candidates, 1 failed\n");
    const auto received = daemon.requests();
    REQUIRE_FALSE(received.empty());
    CHECK(received.front()["op"] == "tune");
    CHECK(received.front()["wait"] == true);
  }

  SECTION("tune --wait exits 1 when the job failed") {
    json job = k_job;
    job["state"] = "failed";
    job["error"] = "reference config failed to compile";
    daemon.results["tune"] = {{"job", job}, {"winner", nullptr}};
    auto r = run_cli(daemon, {"tune", "gemm", "--shape", "M=64", "--wait"});
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("job 7 failed: reference config failed to compile"));
  }

  SECTION("job shows the search's record: when it found its best, its prior and what it did") {
    json job = k_job;
    job["strategy"] = "bayes";
    job["best_at"] = 2;
    job["prior"] = {{"sources", json::array({{{"shape", "M=32"}}, {{"shape", "M=128"}}})},
                    {"results", 144},
                    {"trusted", true},
                    {"favourite_rank", 1}};
    daemon.results["job"] = {{"job", job}, {"winner", k_winner}, {"results", json::array()}};
    auto r = run_cli(daemon, {"job", "7"});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("search    best at candidate 2; prior of 2 earlier tunes (144 results), "
                                      "trusted to the end, its favourite ranked 1\n"));
    job["prior"]["trusted"] = false;
    job["prior"]["favourite_rank"] = nullptr;
    daemon.results["job"]["job"] = job;
    r = run_cli(daemon, {"job", "7"});
    CHECK_THAT(r.out, Catch::Contains("(144 results), distrusted (it disagreed with the results here)\n"));
    job["prior"] = nullptr;
    daemon.results["job"]["job"] = job;
    r = run_cli(daemon, {"job", "7"});
    CHECK_THAT(r.out, Catch::Contains("search    best at candidate 2; no prior\n"));
    job["strategy"] = "exhaustive";
    job["best_at"] = nullptr;
    daemon.results["job"]["job"] = job;
    r = run_cli(daemon, {"job", "7"});
    CHECK_THAT(r.out, !Catch::Contains("search "));
  }

  SECTION("job prints the header and candidates in config order, the winner starred") {
    daemon.results["job"] = {
        {"job", k_job},
        {"winner", k_winner},
        {"results",
         {{{"config", {{"BM", 64}, {"BN", 32}}}, {"config_index", 2}, {"status", "ok"},
           {"reason", ""}, {"median_ms", 1.2345}, {"gflops", 27.24}},
          {{"config", {{"BM", 32}, {"BN", 32}}}, {"config_index", 0}, {"status", "ok"},
           {"reason", ""}, {"median_ms", 2.5}, {"gflops", 13.1}},
          {{"config", {{"BM", 128}, {"BN", 32}}}, {"config_index", 1}, {"status", "compile_error"},
           {"reason", "kernel.cpp:3: error: boom\nmore"}, {"median_ms", nullptr}, {"gflops", 0}}}}};
    auto r = run_cli(daemon, {"job", "7"});
    CHECK(r.code == 0);
    CHECK(daemon.last_request()["job"] == 7);
    CHECK_THAT(r.out, Catch::StartsWith("job 7: gemm M=64,N=64,K=64, f32, cpu\n"));
    CHECK_THAT(r.out, Catch::Contains("state     done (exhaustive)") &&
                          Catch::Contains("progress  3/3 done, 1 failed") &&
                          Catch::Contains("(took 12.0 s)"));
    auto first = r.out.find("BM=32,BN=32");
    auto second = r.out.find("BM=128,BN=32");
    auto third = r.out.find("* BM=64,BN=32");
    REQUIRE(first != std::string::npos);
    REQUIRE(second != std::string::npos);
    REQUIRE(third != std::string::npos);
    CHECK(first < second);
    CHECK(second < third);
    CHECK_THAT(r.out, Catch::Contains("compile_error") &&
                          Catch::Contains("kernel.cpp:3: error: boom ...") &&
                          Catch::Contains("CONFIG") && Catch::Contains("MEDIAN(ms)"));
  }

  SECTION("job --top K --sort median: the fastest K, failures last") {
    daemon.results["job"] = {
        {"job", k_job},
        {"winner", k_winner},
        {"results",
         {{{"config", {{"BM", 64}, {"BN", 32}}}, {"config_index", 2}, {"status", "ok"},
           {"median_ms", 1.2345}, {"gflops", 27.24}},
          {{"config", {{"BM", 32}, {"BN", 32}}}, {"config_index", 0}, {"status", "ok"},
           {"median_ms", 2.5}, {"gflops", 13.1}},
          {{"config", {{"BM", 128}, {"BN", 32}}}, {"config_index", 1}, {"status", "crash"},
           {"median_ms", nullptr}}}}};
    auto r = run_cli(daemon, {"job", "7", "--top", "2", "--sort", "median"});
    CHECK(r.code == 0);
    const auto fastest = r.out.find("* BM=64,BN=32");
    const auto next = r.out.find("BM=32,BN=32");
    REQUIRE(fastest != std::string::npos);
    REQUIRE(next != std::string::npos);
    CHECK(fastest < next);
    CHECK(r.out.find("BM=128") == std::string::npos);
    CHECK_THAT(r.out, Catch::Contains("(2 of 3 candidates"));
    auto by_status = run_cli(daemon, {"--json", "job", "7", "--sort", "status", "--top", "3"});
    const json rows = json::parse(by_status.out)["results"];
    REQUIRE(rows.size() == 3);
    CHECK(rows[2]["status"] == "crash");
    auto bad = run_cli(daemon, {"job", "7", "--sort", "speed"});
    CHECK(bad.code == 2);
  }

  SECTION("job ids: a clear message for a word") {
    auto r = run_cli(daemon, {"job", "abc"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("expected a job id") && Catch::Contains("'abc'"));
  }

  SECTION("timestamps in text output are ISO 8601") {
    daemon.results["job"] = {{"job", k_job}, {"winner", k_winner}, {"results", json::array()}};
    auto r = run_cli(daemon, {"job", "7"});
    CHECK(std::regex_search(r.out, std::regex(R"(created   \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d)")));
  }

  SECTION("a tie-break that chose a slower median is said") {
    daemon.results["tune"] = {{"job", k_job}, {"winner", k_winner}};
    daemon.results["job"] = {
        {"job", k_job},
        {"winner", k_winner},
        {"results",
         {{{"config", {{"BM", 64}, {"BN", 32}}}, {"status", "ok"}, {"tied", true},
           {"median_ms", 1.2345}, {"gflops", 27.24}},
          {{"config", {{"BM", 32}, {"BN", 32}}}, {"status", "ok"}, {"tied", true},
           {"median_ms", 1.2}, {"gflops", 28.0}}}}};
    auto r = run_cli(daemon, {"tune", "gemm", "--shape", "M=64,N=64,K=64", "--wait"});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("tie: BM=32,BN=32 median 1.200 ms, 28.0 GFLOP/s is within the "
                                      "tie margin; the tie-break"));
  }

  SECTION("--json errors are one JSON object on stdout") {
    daemon.results["lookup"] = {{"error", {{"code", "unknown_kernel"}, {"message", "unknown kernel 'gem'"}}}};
    daemon.results["kernels"] = {{"kernels", {{{"name", "gemm"}}, {{"name", "reduce_sum"}}}}};
    auto r = run_cli(daemon, {"--json", "query", "gem", "--shape", "M=1"});
    CHECK(r.code == 1);
    const json error = json::parse(r.out);
    CHECK(error["error"]["code"] == "unknown_kernel");
    CHECK_THAT(error["error"]["message"].get<std::string>(), Catch::Contains("did you mean 'gemm'?"));
    auto text = run_cli(daemon, {"query", "gem", "--shape", "M=1"});
    CHECK_THAT(text.err, Catch::Contains("unknown kernel 'gem' (did you mean 'gemm'?)"));
    auto usage = run_cli(daemon, {"--json", "tune", "gemm"});
    CHECK(usage.code == 2);
    CHECK(json::parse(usage.out)["error"]["code"] == "usage");
  }

  SECTION("unknown commands get the nearest names") {
    auto r = run_cli(daemon, {"tnue"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("unknown command 'tnue'") && Catch::Contains("did you mean 'tune'"));
    auto j = run_cli(daemon, {"--json", "jbos"});
    CHECK(j.code == 2);
    CHECK_THAT(json::parse(j.out)["error"]["message"].get<std::string>(), Catch::Contains("'jobs'"));
  }

  SECTION("completion scripts come from the CLI definition") {
    for (const char* shell : {"bash", "zsh", "fish"}) {
      auto r = run_cli(daemon, {"completion", shell});
      CHECK(r.code == 0);
      CHECK_THAT(r.out, Catch::Contains("tune") && Catch::Contains("shape") &&
                            Catch::Contains("compile-check") && Catch::Contains("sort"));
    }
  }

  SECTION("jobs prints one row per job; --json prints the result object") {
    daemon.results["jobs"] = {{"jobs", {k_job}}};
    auto r = run_cli(daemon, {"jobs", "--limit", "5"});
    CHECK(r.code == 0);
    CHECK(daemon.last_request()["limit"] == 5);
    CHECK_THAT(r.out, Catch::StartsWith("ID  KERNEL") && Catch::Contains("DONE/TOTAL") &&
                          Catch::Contains(" 7  gemm    M=64,N=64,K=64  f32    cpu     done"));
    auto j = run_cli(daemon, {"jobs", "--json"});
    CHECK(j.code == 0);
    CHECK(json::parse(j.out) == daemon.results["jobs"]);
  }

  SECTION("kernels prints the table and the broken specs") {
    daemon.results["kernels"] = {
        {"kernels",
         {{{"name", "gemm"}, {"language", "cpp"}, {"shape", {"M", "N", "K"}},
           {"dtypes", {"f32", "f64"}}, {"params", {{"BM", {32, 64}}, {"BN", {64}}}},
           {"space_size", 2}, {"source_hash", "ab12"}}}},
        {"broken", {{{"path", "/k/bad/kernel.toml"}, {"error", "missing [kernel].name"}}}}};
    auto r = run_cli(daemon, {"kernels"});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("NAME  LANGUAGE  SHAPE  DTYPES   PARAMS       SPACE") &&
                          Catch::Contains("gemm  cpp       M,N,K  f32,f64  BM(2),BN(1)      2") &&
                          Catch::Contains("/k/bad/kernel.toml: missing [kernel].name"));
  }

  SECTION("daemon status prints the stats") {
    daemon.results["stats"] = {{"pid", 4242}, {"version", "0.1.0"}, {"uptime_s", 3725},
                               {"connections", 1}, {"jobs_queued", 2}, {"jobs_running", 1},
                               {"workers", 3}, {"db", "/x/ktune.db"}, {"socket", daemon.socket()}};
    auto r = run_cli(daemon, {"daemon", "status"});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::StartsWith("ktuned is running (pid 4242, version 0.1.0)") &&
                          Catch::Contains("1h 02m 05s") &&
                          Catch::Contains("2 queued, 1 running") && Catch::Contains("/x/ktune.db"));
  }

  SECTION("global options are accepted after the command too") {
    daemon.results["jobs"] = {{"jobs", json::array()}};
    auto r = run_cli(daemon, {"jobs", "--json"});
    CHECK(r.code == 0);
    CHECK(json::parse(r.out)["jobs"].empty());
  }
}

TEST_CASE("commands without a daemon", "[cli]") {
  // These cases check the message printed when auto-start (cli/autostart.hpp) is turned off.
  ::setenv("KTUNE_NO_AUTOSTART", "1", 1);
  ktune::test::TempDir dir;
  const std::string socket = dir.str() + "/none.sock";
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> full{"ktune", "--socket", socket};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<const char*> argv;
    for (const auto& a : full) argv.push_back(a.c_str());
    std::ostringstream out, err;
    ktune::cli::Output io{out, err, false};
    int code = ktune::cli::run(static_cast<int>(argv.size()), argv.data(), io);
    return Run{code, out.str(), err.str()};
  };

  SECTION("every daemon command says how to start it and exits 1") {
    for (auto args : std::vector<std::vector<std::string>>{
             {"jobs"}, {"kernels"}, {"job", "1"}, {"query", "gemm", "--shape", "M=1"},
             {"tune", "gemm", "--shape", "M=1"}}) {
      auto r = run(args);
      CHECK(r.code == 1);
      CHECK(r.err == "ktune: ktuned is not running (socket " + socket +
                         "); start it with `ktune daemon start`\n");
    }
  }

  SECTION("daemon stop succeeds, daemon status fails") {
    auto stop = run({"daemon", "stop"});
    CHECK(stop.code == 0);
    CHECK_THAT(stop.out, Catch::Contains("not running"));
    auto status = run({"daemon", "status"});
    CHECK(status.code == 1);
    CHECK_THAT(status.err, Catch::Contains("ktuned is not running"));
  }

  SECTION("usage errors exit 2 and name the problem") {
    auto r = run({"tune", "gemm"});
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains("--shape"));
    auto bad = run({"job", "abc"});
    CHECK(bad.code == 2);
  }
}

TEST_CASE("parameters print in the order ktuned sent them (the kernel spec's order)", "[cli]") {
  ktune::test::TempDir dir;
  FakeDaemon daemon(dir.str() + "/k.sock", [](const std::string& line) {
    FakeResponse response;
    response.lines.push_back(R"({"v":1,"id":)" + FakeDaemon::id_of(line).dump() +
                             R"(,"ok":true,"result":{"rung":"exact","exact":true,)"
                             R"("config":{"BM":64,"BK":8,"BN":32},"median_ms":1.5,"gflops":2.0,"job":3}})");
    return response;
  });
  std::vector<const char*> argv{"ktune", "--socket", daemon.socket().c_str(), "query", "gemm",
                                "--shape", "M=1,N=1,K=1"};
  std::ostringstream out, err;
  ktune::cli::Output io{out, err, false};
  CHECK(ktune::cli::run(static_cast<int>(argv.size()), argv.data(), io) == 0);
  CHECK_THAT(out.str(), Catch::StartsWith("BM=64 BK=8 BN=32"));
}

TEST_CASE("the tune summary says when the finals chose a winner other than the progress line's best",
          "[cli]") {
  using ordered = nlohmann::ordered_json;
  const ordered best = ordered::parse(R"({"BM":64,"BN":64})");
  const ordered winner = ordered::parse(R"({"config":{"BM":32,"BN":64},"median_ms":0.0257})");
  ordered results = ordered::parse(R"([
    {"config":{"BN":64,"BM":64},"status":"ok","median_ms":0.0262,"remeasured":true},
    {"config":{"BM":32,"BN":64},"status":"ok","median_ms":0.0257,"remeasured":true}])");
  const std::string line = ktune::cli::finals_line(best, winner, results);
  CHECK_THAT(line, Catch::StartsWith("finals: the search's best BM=64,BN=64 measured 0.0262 ms") &&
                       Catch::Contains("winner was faster there"));
  // The best is the winner, or no finals measured it again: nothing to explain.
  CHECK(ktune::cli::finals_line(winner["config"], winner, results).empty());
  results[0]["remeasured"] = false;
  CHECK(ktune::cli::finals_line(best, winner, results).empty());
}
