// The lifecycle settings and rules that need no running daemon: [limits] and the new [daemon]
// keys, --idle-s, the bench deadline derived from [measure], which statuses quarantine a config
// and the store query behind the quarantine.
#include "tests/support/paths.hpp"
#include "daemon/planner.hpp"
#include "daemon/config.hpp"
#include "daemon/replies.hpp"
#include "daemon/scheduler.hpp"
#include "db/store.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

using namespace std::chrono_literals;
using ktune::CandidateStatus;
using ktune::daemon::apply_config_text;
using ktune::daemon::bench_deadline;
using ktune::daemon::DaemonConfig;
using ktune::daemon::SchedulerSettings;
using ktune::test::TempDir;

TEST_CASE("lifecycle settings in the config file and on the command line", "[daemon][limits]") {
  DaemonConfig config;

  SECTION("defaults: never idle out, 60 s worker idle, 120 s compiles, derived bench deadline") {
    CHECK(config.idle_s == 0);
    CHECK(config.worker_idle_s == 60);
    CHECK(config.compile_timeout_s == 120);
    CHECK(config.bench_timeout_s == 0);
    CHECK(config.worker_memory_mb == 0);
  }
  SECTION("every key is read, fractions of a second included") {
    const auto r = apply_config_text(R"(
[daemon]
idle_s = 0.25
worker_idle_s = 0.05
stop_grace_s = 2
[limits]
compile_timeout_s = 7.5
bench_timeout_s = 3
bench_timeout_min_s = 0.5
bench_timeout_max_s = 9
worker_memory_mb = 2048
)",
                                     "ktuned.toml", "/", config);
    INFO((r ? std::string() : r.error().message));
    REQUIRE(r.ok());
    CHECK(config.idle_s == 0.25);
    CHECK(config.worker_idle_s == 0.05);
    CHECK(config.stop_grace_s == 2);
    CHECK(config.compile_timeout_s == 7.5);
    CHECK(config.bench_timeout_s == 3);
    CHECK(config.bench_timeout_min_s == 0.5);
    CHECK(config.bench_timeout_max_s == 9);
    CHECK(config.worker_memory_mb == 2048);
  }
  SECTION("an unknown [limits] key and a negative duration name the key") {
    auto r = apply_config_text("[limits]\ncompile_timeout = 3\n", "ktuned.toml", "/", config);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("[limits].compile_timeout"));
    r = apply_config_text("[daemon]\nidle_s = -1\n", "ktuned.toml", "/", config);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("[daemon].idle_s"));
  }
  SECTION("--idle-s overrides the file") {
    TempDir dir;
    dir.write("k.toml", "[daemon]\nidle_s = 5\n");
    std::vector<std::string> args = {"ktuned", "--config", dir.str() + "/k.toml", "--idle-s", "0.5"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    auto parsed = ktune::daemon::parse_command_line(static_cast<int>(argv.size()), argv.data());
    REQUIRE(std::holds_alternative<ktune::daemon::CommandLine>(parsed));
    auto resolved = ktune::daemon::resolve_config(std::get<ktune::daemon::CommandLine>(parsed),
                                                  ktune::PathEnv{dir.str(), "", "", "", 0}, "/");
    INFO((resolved ? std::string() : resolved.error().message));
    REQUIRE(resolved.ok());
    CHECK(resolved->idle_s == 0.5);
  }
  SECTION("a maximum bench deadline below the minimum is refused") {
    TempDir dir;
    dir.write("k.toml", "[limits]\nbench_timeout_min_s = 5\nbench_timeout_max_s = 1\n");
    ktune::daemon::CommandLine cl;
    cl.config = dir.str() + "/k.toml";
    auto resolved = ktune::daemon::resolve_config(cl, ktune::PathEnv{dir.str(), "", "", "", 0}, "/");
    REQUIRE_FALSE(resolved.ok());
    CHECK_THAT(resolved.error().message, Catch::Contains("bench_timeout_max_s"));
  }
}

TEST_CASE("bench deadline: the override then the fixed setting then the clamped estimate",
          "[daemon][limits]") {
  SchedulerSettings s;
  s.measure.warmup_ms = 500;
  s.measure.max_time_s = 4;
  s.bench_timeout_min_s = 1;
  s.bench_timeout_max_s = 60;
  CHECK(bench_deadline(s) == 10000ms);          // 2 * (0.5 + 4) + 1
  s.bench_timeout_max_s = 6;
  CHECK(bench_deadline(s) == 6000ms);           // clamped down
  s.measure.max_time_s = 0.01;
  s.measure.warmup_ms = 0;
  s.bench_timeout_min_s = 2;
  CHECK(bench_deadline(s) == 2000ms);           // clamped up
  s.bench_timeout_s = 0.25;
  CHECK(bench_deadline(s) == 250ms);            // fixed in the config
  CHECK(bench_deadline(s, 3.5) == 3500ms);      // per job
  CHECK(bench_deadline(s, 1e-6) == 2000ms);     // per job, raised to bench_timeout_min_s
  CHECK(bench_deadline(s, 1e308) == 6000ms);    // per job, capped at bench_timeout_max_s
}

TEST_CASE("quarantine: crashed and hung configs of the same source and device",
          "[daemon][limits][db]") {
  CHECK(ktune::daemon::quarantines(CandidateStatus::crash));
  CHECK(ktune::daemon::quarantines(CandidateStatus::timeout));
  CHECK(ktune::daemon::quarantines(CandidateStatus::compile_timeout));
  CHECK(ktune::daemon::quarantines(CandidateStatus::worker_lost));
  CHECK_FALSE(ktune::daemon::quarantines(CandidateStatus::mismatch));
  CHECK_FALSE(ktune::daemon::quarantines(CandidateStatus::compile_error));
  CHECK_FALSE(ktune::daemon::quarantines(CandidateStatus::runtime_error));

  TempDir dir;
  auto store = ktune::Store::open(dir.str() + "/k.db", ktune::OpenMode::read_write);
  REQUIRE(store.ok());
  ktune::JobRecord job;
  job.kernel = "faults";
  job.source_hash = "src-1";
  job.shape = "N=8";
  job.dtype = "f32";
  job.device = "cpu";
  job.fingerprint = "fp-1";
  job.total = 4;
  auto first = store->create_job(job);
  REQUIRE(first.ok());
  auto insert = [&](std::int64_t job_id, const std::string& config, CandidateStatus status,
                    const std::string& source_hash = "src-1", const std::string& fp = "fp-1") {
    ktune::ResultRecord r;
    r.job_id = job_id;
    r.kernel = "faults";
    r.source_hash = source_hash;
    r.shape = "N=8";
    r.dtype = "f32";
    r.fingerprint = fp;
    r.config = config;
    r.status = status;
    REQUIRE(store->insert_result(r).ok());
  };
  insert(*first, R"({"FAULT":1})", CandidateStatus::crash);
  insert(*first, R"({"FAULT":3})", CandidateStatus::timeout);
  insert(*first, R"({"FAULT":4})", CandidateStatus::mismatch);
  insert(*first, R"({"FAULT":0})", CandidateStatus::ok);
  insert(*first, R"({"FAULT":6})", CandidateStatus::compile_timeout, "src-2");
  insert(*first, R"({"FAULT":8})", CandidateStatus::worker_lost, "src-1", "fp-2");

  auto bad = store->quarantined_configs("faults", "src-1", "fp-1");
  REQUIRE(bad.ok());
  CHECK(*bad == std::set<std::string>{R"({"FAULT":1})", R"({"FAULT":3})"});
  // The job's own rows do not quarantine it (a resumed job skips them by row instead).
  auto own = store->quarantined_configs("faults", "src-1", "fp-1", *first);
  REQUIRE(own.ok());
  CHECK(own->empty());

  std::vector<ktune::Config> configs;
  for (std::int64_t f : {0, 1, 2, 3}) {
    ktune::Config c;
    c.emplace_back("FAULT", f);
    configs.push_back(std::move(c));
  }
  auto dropped = ktune::daemon::drop_quarantined(*store, "faults", "src-1", "fp-1", configs);
  REQUIRE(dropped.ok());
  CHECK(*dropped == 2);
  REQUIRE(configs.size() == 2);
  CHECK(ktune::daemon::config_json_text(configs[0]) == R"({"FAULT":0})");
  CHECK(ktune::daemon::config_json_text(configs[1]) == R"({"FAULT":2})");

  // A job that set its own deadlines: its timeouts are its own and quarantine nothing.
  ktune::JobRecord hurried = job;
  hurried.options.bench_timeout_s = 0.001;
  hurried.options.compile_timeout_s = 0.001;
  auto second = store->create_job(hurried);
  REQUIRE(second.ok());
  insert(*second, R"({"FAULT":0})", CandidateStatus::timeout);
  insert(*second, R"({"FAULT":2})", CandidateStatus::compile_timeout);
  insert(*second, R"({"FAULT":7})", CandidateStatus::crash);
  auto after = store->quarantined_configs("faults", "src-1", "fp-1");
  REQUIRE(after.ok());
  CHECK(*after == std::set<std::string>{R"({"FAULT":1})", R"({"FAULT":3})", R"({"FAULT":7})"});
}

TEST_CASE("connection limits and access settings", "[daemon][limits][hardening]") {
  DaemonConfig config;

  SECTION("defaults: 256 connections, 10 s per line, 600 s idle, 64 jobs per uid, root allowed") {
    CHECK(config.max_connections == 256);
    CHECK(config.message_timeout_s == 10);
    CHECK(config.connection_idle_s == 600);
    CHECK(config.max_queued_jobs_per_client == 64);
    CHECK(config.allow_uids.empty());
    CHECK(config.allow_gids.empty());
    CHECK(config.allow_root);
  }
  SECTION("every key is read") {
    const auto r = apply_config_text(R"(
[limits]
max_connections = 8
message_timeout_s = 0.5
connection_idle_s = 0
max_queued_jobs_per_client = 3
[access]
allow_uids = [1001, 1002]
allow_gids = [100]
allow_root = false
)",
                                     "ktuned.toml", "/", config);
    INFO((r ? std::string() : r.error().message));
    REQUIRE(r.ok());
    CHECK(config.max_connections == 8);
    CHECK(config.message_timeout_s == 0.5);
    CHECK(config.connection_idle_s == 0);
    CHECK(config.max_queued_jobs_per_client == 3);
    CHECK(config.allow_uids == std::vector<std::int64_t>{1001, 1002});
    CHECK(config.allow_gids == std::vector<std::int64_t>{100});
    CHECK_FALSE(config.allow_root);
  }
  SECTION("out-of-range and mistyped values name the key") {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"[limits]\nmax_connections = 0\n", "[limits].max_connections"},
        {"[limits]\nmax_connections = \"many\"\n", "[limits].max_connections"},
        {"[limits]\nmessage_timeout_s = -1\n", "[limits].message_timeout_s"},
        {"[limits]\nconnection_idle_s = true\n", "[limits].connection_idle_s"},
        {"[limits]\nmax_queued_jobs_per_client = 0\n", "[limits].max_queued_jobs_per_client"},
        {"[access]\nallow_uids = 1000\n", "[access].allow_uids"},
        {"[access]\nallow_uids = [1000, -1]\n", "[access].allow_uids[1]"},
        {"[access]\nallow_gids = [\"wheel\"]\n", "[access].allow_gids[0]"},
        {"[access]\nallow_root = 1\n", "[access].allow_root"},
        {"[access]\nallow_users = [1]\n", "[access].allow_users"},
        {"access = 3\n", "[access]"},
    };
    for (const auto& [text, key] : bad) {
      INFO(text);
      const auto r = apply_config_text(text, "ktuned.toml", "/", config);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == ktune::ErrorCode::config_error);
      CHECK_THAT(r.error().message, Catch::Contains(key));
    }
  }
  SECTION("the shipped configs/ktuned.toml reads and sets the defaults") {
    DaemonConfig shipped;
    const auto r = apply_config_text(
        [] {
          std::ifstream in(ktune::test::source_path("/configs/ktuned.toml"));
          std::stringstream text;
          text << in.rdbuf();
          return text.str();
        }(),
        "configs/ktuned.toml", ktune::test::source_path("/configs"), shipped);
    INFO((r ? std::string() : r.error().message));
    REQUIRE(r.ok());
    CHECK(shipped.max_connections == 256);
    CHECK(shipped.message_timeout_s == 10);
    CHECK(shipped.connection_idle_s == 600);
    CHECK(shipped.max_queued_jobs_per_client == 64);
    CHECK(shipped.allow_root);
  }
}
