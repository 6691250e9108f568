// Tables a runtime lives on, end to end with a real ktuned, ktune and store: a tune of exactly
// the given `configs`, `ktune distill` measuring the (shape, config) pairs its rule lacks, and
// `ktune export --format engine-json` read by the Python client's engine_tables and imported into
// a fresh store that then answers the same lookups.
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/integration/tool_run.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::run_tool;
using ktune::test::TempDir;
using ktune::test::ToolRun;
using nlohmann::json;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 300s;
constexpr const char* k_settings =
    "[measure]\nmin_samples = 3\nmax_samples = 10\nmax_time_s = 0.01\nmin_time_s = 0\n"
    "warmup_ms = 0\nflush_cache = false\n";

// gemm at N = K = 32 admits BN = 64 and BK = 64 only; BM = 64 from M = 33 on.
const json k_c1 = {{"BM", 32}, {"BN", 64}, {"BK", 64}, {"UNROLL", 8}, {"VEC", 2}};
const json k_c2 = {{"BM", 32}, {"BN", 64}, {"BK", 64}, {"UNROLL", 4}, {"VEC", 1}};
const json k_c3 = {{"BM", 64}, {"BN", 64}, {"BK", 64}, {"UNROLL", 8}, {"VEC", 2}};

std::string shape_at(int m) { return "M=" + std::to_string(m) + ",N=32,K=32"; }

json request(Connection& c, const json& body) {
  auto reply = c.request(body, {}, k_reply_timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  return *reply;
}

json ok_result(Connection& c, const json& body) {
  const json reply = request(c, body);
  INFO(reply.dump());
  REQUIRE(reply.value("ok", false));
  return reply.at("result");
}

json tune_given(Connection& c, int m, const json& configs) {
  return ok_result(c, {{"op", "tune"}, {"kernel", "gemm"}, {"shape", shape_at(m)}, {"device", "cpu"},
                       {"configs", configs}, {"wait", true}});
}

json lookup(Connection& c, int m) {
  return ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"}, {"shape", shape_at(m)},
                       {"dtype", "f32"}, {"device", "cpu"}});
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Instance {
  TempDir home;
  std::unique_ptr<DaemonProcess> daemon;
  std::optional<Connection> conn;

  Instance() {
    home.write("ktuned.toml", k_settings);
    daemon = std::make_unique<DaemonProcess>(
        home.str(), std::vector<std::string>{"--config", home.str() + "/ktuned.toml", "--kernel-dir",
                                             ktune::test::source_path("/kernels_src")});
    REQUIRE(daemon->wait_ready(k_start_timeout));
    auto c = Connection::connect(daemon->socket());
    REQUIRE(c.ok());
    conn.emplace(std::move(*c));
  }
  [[nodiscard]] std::string db() const { return home.str() + "/ktune.db"; }
  [[nodiscard]] ToolRun ktune(std::vector<std::string> args) const {
    args.insert(args.begin(), ktune::test::bin_path("/ktune"));
    return run_tool(args, {"PATH=/usr/bin:/bin", "KTUNE_HOME=" + home.str(), "KTUNE_NO_AUTOSTART=1"}, 300s);
  }
};

// The three shapes, each tuned with two of the three configs: (64, c2) and (256, c1) are never
// measured; c3 is not admitted at M=16.
void tune_three(Connection& c) {
  tune_given(c, 16, json::array({k_c1, k_c2}));
  tune_given(c, 64, json::array({k_c1, k_c3}));
  tune_given(c, 256, json::array({k_c2, k_c3}));
}

} // namespace

TEST_CASE("tune with configs measures exactly those, and refuses one it cannot measure",
          "[daemon][integration][distill]") {
  Instance a;
  const json summary = tune_given(*a.conn, 64, json::array({k_c3, k_c1}));
  CHECK(summary.at("job").at("state") == "done");
  CHECK(summary.at("job").at("strategy") == "configs");
  CHECK(summary.at("job").at("total") == 2);
  const json job = ok_result(*a.conn, {{"op", "job"}, {"job", summary.at("job").at("id")}});
  std::vector<json> measured;
  for (const auto& r : job.at("results")) measured.push_back(r.at("config"));
  CHECK(measured.size() == 2);
  CHECK(std::count(measured.begin(), measured.end(), k_c1) == 1);
  CHECK(std::count(measured.begin(), measured.end(), k_c3) == 1);

  SECTION("a later tune of other configs keeps the key's winner among its candidates") {
    const json again = tune_given(*a.conn, 64, json::array({k_c2}));
    CHECK(again.at("job").at("total") == 2);
  }
  SECTION("a config the constraints do not admit at the shape is refused, named") {
    const json reply = request(*a.conn, {{"op", "tune"}, {"kernel", "gemm"}, {"shape", shape_at(16)},
                                         {"configs", json::array({k_c3})}});
    REQUIRE_FALSE(reply.value("ok", true));
    CHECK(reply.at("error").at("code") == "bad_request");
    CHECK_THAT(reply.at("error").at("message").get<std::string>(), Catch::Contains("not admitted"));
  }
  SECTION("configs with a searching strategy are refused") {
    const json reply = request(*a.conn, {{"op", "tune"}, {"kernel", "gemm"}, {"shape", shape_at(16)},
                                         {"strategy", "random"}, {"configs", json::array({k_c1})}});
    REQUIRE_FALSE(reply.value("ok", true));
    CHECK_THAT(reply.at("error").at("message").get<std::string>(), Catch::Contains("exhaustive"));
  }
}

TEST_CASE("ktune distill measures what its rule lacks, then has every figure",
          "[daemon][integration][distill]") {
  Instance a;
  tune_three(*a.conn);
  const std::string rule = a.home.str() + "/rule.json";
  const ToolRun distilled = a.ktune({"distill", "gemm", "--device", "cpu", "--max-configs", "2", "-o", rule});
  INFO(distilled.output);
  REQUIRE(distilled.code == 0);
  CHECK_THAT(distilled.output, Catch::Contains("measuring"));
  const json doc = json::parse(slurp(rule));
  // Every shape has a figure, or (the methods that leave the shape out) no config the
  // constraints admit there: at M=16 only BM=32 fits, and the other shapes' winners are ties
  // measured on a busy machine, so whether a rule or a neighbour built without M=16 holds BM=32
  // is up to the clock. In sample the shape's own winner is there. Nothing is left unmeasured.
  for (const char* method : {"in_sample", "leave_one_shape_out", "nearest"}) {
    INFO(method);
    const json& regret = doc.at("regret").at(method);
    CHECK(regret.at("unknown") == 0);
    if (std::string(method) != "in_sample") {
      CHECK(regret.at("shapes").get<int>() + regret.at("no_choice").get<int>() == 3);
    } else {
      CHECK(regret.at("shapes") == 3);
    }
  }
  // Stored beside the database, where export finds it.
  bool stored = false;
  for (const auto& entry : std::filesystem::directory_iterator(a.db() + "-rules")) {
    stored = stored || entry.path().extension() == ".json";
  }
  CHECK(stored);
  // The pairs it lacked were measured by jobs of exactly those configs.
  const ToolRun again = a.ktune({"--json", "distill", "gemm", "--device", "cpu", "--max-configs", "2",
                                 "--no-measure"});
  INFO(again.output);
  REQUIRE(again.code == 0);
  CHECK(json::parse(again.output).at("missing").empty());
}

TEST_CASE("engine-json export: the Python reader and a fresh store's lookups answer as ktuned did",
          "[daemon][integration][engine]") {
  Instance a;
  tune_three(*a.conn);
  std::map<int, json> answers;
  for (int m : {16, 64, 256, 100, 20, 1000}) answers[m] = lookup(*a.conn, m);
  for (int m : {16, 64, 256}) REQUIRE(answers[m].at("rung") == "exact");

  const std::string out = a.home.str() + "/engine";
  const ToolRun exported = a.ktune({"export", "--format", "engine-json", "--by", "M", "--kernel", "gemm",
                                    "-o", out});
  INFO(exported.output);
  REQUIRE(exported.code == 0);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(out)) files.push_back(entry.path());
  REQUIRE(files.size() == 1);
  CHECK_THAT(files[0].filename().string(), Catch::StartsWith("gemm,N=32,K=32,dtype=f32,device_name="));

  SECTION("the Python reader, with the default python3 and Debian's") {
    std::vector<std::vector<std::string>> pythons{{"/usr/bin/env", "python3"}};
    if (std::filesystem::exists("/usr/bin/python3")) pythons.push_back({"/usr/bin/python3"});
    const char* path = std::getenv("PATH");
    for (auto argv : pythons) {
      argv.insert(argv.end(), {"-c",
                               "import json, sys\nfrom ktune_client.engine_tables import EngineTable\n"
                               "t = EngineTable.load(sys.argv[1])\n"
                               "print(json.dumps({m: t.config(m) for m in (16, 64, 256, 100, 20, 1000)}))\n",
                               files[0].string()});
      const ToolRun read = run_tool(argv, {std::string("PATH=") + (path ? path : "/usr/bin:/bin"),
                                           "PYTHONPATH=" + ktune::test::source_path("/client/python")},
                                    60s);
      INFO(argv.front() << ": " << read.output);
      REQUIRE(read.code == 0);
      const json got = json::parse(read.output);
      // The keys are the tuned winners; between keys, no rule stored: the nearest key in log
      // space, as the nearest rung answers.
      for (const auto& [m, answer] : answers) {
        INFO("M=" << m);
        CHECK(got.at(std::to_string(m)) == answer.at("config"));
      }
    }
  }
  SECTION("imported into a fresh store, the same lookups") {
    Instance b;
    CHECK(lookup(*b.conn, 64).at("rung") == "default");
    const ToolRun imported = b.ktune({"import", files[0].string()});
    INFO(imported.output);
    REQUIRE(imported.code == 0);
    for (const auto& [m, answer] : answers) {
      INFO("M=" << m);
      const json got = lookup(*b.conn, m);
      CHECK(got.at("rung") == answer.at("rung"));
      CHECK(got.at("config") == answer.at("config"));
      CHECK(got.value("median_ms", 0.0) == Approx(answer.value("median_ms", 0.0)));
    }
  }
}

TEST_CASE("a compiler change answers the old winner as stale with what changed, and a revalidation restores exact",
          "[daemon][integration][stale]") {
  if (::access("/usr/bin/clang++", X_OK) != 0) {
    WARN("skipped: /usr/bin/clang++ not found (the second environment of this test)");
    return;
  }
  TempDir home;
  home.write("ktuned.toml", k_settings);
  const std::vector<std::string> args{"--config", home.str() + "/ktuned.toml", "--kernel-dir",
                                      ktune::test::source_path("/kernels_src")};
  json old_winner;
  {
    DaemonProcess gcc(home.str(), args, "", {"/usr/bin/env", "KTUNE_CXX=/usr/bin/g++"});
    REQUIRE(gcc.wait_ready(k_start_timeout));
    auto c = Connection::connect(gcc.socket());
    REQUIRE(c.ok());
    tune_given(*c, 64, json::array({k_c1, k_c2, k_c3}));
    tune_given(*c, 256, json::array({k_c2, k_c3}));
    old_winner = lookup(*c, 64);
    REQUIRE(old_winner.at("rung") == "exact");
  }
  DaemonProcess clang(home.str(), args, "", {"/usr/bin/env", "KTUNE_CXX=/usr/bin/clang++"});
  REQUIRE(clang.wait_ready(k_start_timeout));
  auto c = Connection::connect(clang.socket());
  REQUIRE(c.ok());

  // `ktune revalidate` queues every stale key at once: both shapes, with what changed.
  const ToolRun revalidated = run_tool({ktune::test::bin_path("/ktune"), "--json", "revalidate", "--device", "cpu"},
                                       {"PATH=/usr/bin:/bin", "KTUNE_HOME=" + home.str(), "KTUNE_NO_AUTOSTART=1"},
                                       60s);
  INFO(revalidated.output);
  REQUIRE(revalidated.code == 0);
  const json keys = json::parse(revalidated.output).at("revalidations");
  REQUIRE(keys.size() == 2);
  std::map<std::string, json> by_shape;
  for (const auto& k : keys) by_shape[k.at("shape").get<std::string>()] = k;
  REQUIRE(by_shape.count(shape_at(64)) == 1);
  REQUIRE(by_shape.count(shape_at(256)) == 1);
  CHECK_THAT(by_shape[shape_at(64)].at("change").get<std::string>(), Catch::Contains("clang"));

  // Same hardware, another compiler: the old winner answers, named stale, never the default.
  const json stale = lookup(*c, 64);
  INFO(stale.dump());
  CHECK(stale.at("rung") == "stale");
  CHECK(stale.at("exact") == false);
  CHECK(stale.at("reason") == "environment_changed");
  CHECK(stale.at("config") == old_winner.at("config"));
  CHECK_THAT(stale.at("change").get<std::string>(), Catch::Contains("compiler") && Catch::Contains("clang"));
  CHECK(stale.at("from_device").get<std::string>().size() == 32);
  // A shape never tuned under either compiler is not stale.
  CHECK(lookup(*c, 16).at("rung") != "stale");
  // A runtime's client answers from the winner table first; there the device is marked as having
  // winners under another environment, so the client asks ktuned, and answers stale too.
  SECTION("the Python client, with the default python3 and Debian's") {
    std::vector<std::vector<std::string>> pythons{{"/usr/bin/env", "python3"}};
    if (std::filesystem::exists("/usr/bin/python3")) pythons.push_back({"/usr/bin/python3"});
    const char* path = std::getenv("PATH");
    for (auto argv : pythons) {
      argv.insert(argv.end(), {"-c",
                               "import sys, time\nfrom ktune_client import Client\n"
                               "c = Client(socket_path=sys.argv[1], timeout=5.0)\n"
                               "deadline = time.monotonic() + 10\n"
                               "while True:\n"
                               "    a = c.lookup('gemm', 'M=64,N=32,K=32', 'f32', 'cpu')\n"
                               "    if a.source == 'daemon' or time.monotonic() > deadline: break\n"
                               "    time.sleep(0.1)\n"
                               "print(a.rung, a.source, a.reason)\n",
                               clang.socket()});
      const ToolRun read = run_tool(argv, {std::string("PATH=") + (path ? path : "/usr/bin:/bin"),
                                           "PYTHONPATH=" + ktune::test::source_path("/client/python")},
                                    60s);
      INFO(argv.front() << ": " << read.output);
      REQUIRE(read.code == 0);
      // Until the revalidation is done the key is stale; a fast one may already be exact.
      const bool stale_or_revalidated = read.output.find("stale daemon environment_changed") == 0 ||
                                        read.output.find("exact") == 0;
      CHECK(stale_or_revalidated);
    }
  }

  // The lookup answers the revalidation already queued (or done) for its key: the old winner's
  // near configs only.
  const std::int64_t job = by_shape[shape_at(64)].at("job").get<std::int64_t>();
  if (stale.at("rung") == "stale") CHECK(stale.at("tune_job") == job);
  json record;
  for (int i = 0; i < 600; ++i) {
    record = ok_result(*c, {{"op", "job"}, {"job", job}});
    const std::string state = record.at("job").at("state").get<std::string>();
    if (state != "queued" && state != "running") break;
    std::this_thread::sleep_for(100ms);
  }
  INFO(record.dump());
  REQUIRE(record.at("job").at("state") == "done");
  CHECK(record.at("job").at("options").at("priority").get<int>() < 0);
  const auto total = record.at("job").at("total").get<int>();
  CHECK(total >= 1);
  CHECK(total <= 4);  // the old key's three configs (those within 5% of its winner) and the default
  const json after = lookup(*c, 64);
  INFO(after.dump());
  CHECK(after.at("rung") == "exact");
}
