// Threaded CPU candidates end to end ([kernel] threads, docs/kernel-spec.md § Threads), and the
// finals' rounds in fresh bench worker processes (docs/decisions/measurement.md): the real
// ktuned, workers and compiler. A candidate of NTHREADS threads runs on that many CPUs of the cpu
// lane (the probe family aborts otherwise), every result records the CPUs it ran on, a candidate
// asking for more CPUs than the daemon may use is measured on all of them and marked
// oversubscribed, and single-threaded candidates stay pinned to the bench CPU.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

int allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

std::unique_ptr<DaemonProcess> start(const TempDir& home, const std::string& measure) {
  home.write("ktuned.toml", "[measure]\n" + measure);
  auto daemon = std::make_unique<DaemonProcess>(
      home.str(), std::vector<std::string>{"--config", (home.path() / "ktuned.toml").string(),
                                           "--kernel-dir", ktune::test::source_path("/tests/threaded"),
                                           "--log-level", "info"});
  REQUIRE(daemon->wait_ready(60s));
  return daemon;
}

json tuned_job(const DaemonProcess& daemon, const std::string& kernel, const std::string& shape) {
  auto c = Connection::connect(daemon.socket());
  REQUIRE(c.ok());
  auto tuned = c->request({{"op", "tune"}, {"kernel", kernel}, {"shape", shape}, {"device", "cpu"},
                           {"wait", true}},
                          {}, 600s);
  REQUIRE(tuned.ok());
  INFO(tuned->dump());
  REQUIRE(tuned->value("ok", false));
  const auto id = tuned->at("result").at("job").at("id").get<std::int64_t>();
  auto job = c->request({{"op", "job"}, {"job", id}}, {}, 30s);
  REQUIRE(job.ok());
  REQUIRE(job->value("ok", false));
  return job->at("result");
}

// The results of a job by NTHREADS.
std::map<int, json> by_threads(const json& job) {
  std::map<int, json> out;
  for (const auto& r : job.at("results")) out[r.at("config").at("NTHREADS").get<int>()] = r;
  return out;
}

} // namespace

TEST_CASE("a threaded candidate runs on as many CPUs as it has threads, and says so", "[threads]") {
  const int cpus = allowed_cpus();
  if (cpus < 2) {
    WARN("this machine lets the test use " << cpus << " CPU: nothing to spread threads over");
    return;
  }
  TempDir home;
  auto daemon = start(home, "min_samples = 3\nmax_samples = 10\nmin_time_s = 0\nmax_time_s = 0.05\n"
                            "warmup_ms = 1\n");
  const json job = tuned_job(*daemon, "placement_probe", "N=1024");
  const auto results = by_threads(job);
  REQUIRE(results.size() == 3);
  for (const auto& [threads, r] : results) {
    INFO("NTHREADS=" << threads << ": " << r.dump());
    // The probe aborts when it runs on fewer CPUs than promised: ok is the placement checked.
    CHECK(r.at("status") == "ok");
    const json& conditions = r.at("conditions");
    CHECK(conditions.at("threads") == threads);
    CHECK(conditions.at("cpus").size() == static_cast<std::size_t>(std::min(threads, cpus)));
    CHECK(conditions.value("oversubscribed", false) == (threads > cpus));
  }
  // Single-threaded: pinned to the bench CPU, which is among every threaded candidate's CPUs.
  const auto bench_cpu = results.at(1).at("conditions").at("cpus").at(0);
  for (const int threads : {2, 4}) {
    const json& cpus = results.at(threads).at("conditions").at("cpus");
    CHECK(std::find(cpus.begin(), cpus.end(), bench_cpu) != cpus.end());
  }
}

TEST_CASE("threaded kernels tune to a winner with their threads recorded", "[threads]") {
  TempDir home;
  auto daemon = start(home, "min_samples = 3\nmax_samples = 10\nmin_time_s = 0\nmax_time_s = 0.05\n"
                            "warmup_ms = 1\n");
  for (const std::string kernel : {"omp_fma", "thread_fma", "omp_vadd"}) {
    INFO(kernel);
    const json job = tuned_job(*daemon, kernel, "N=65536");
    CHECK(job.at("job").at("state") == "done");
    const auto results = by_threads(job);
    REQUIRE(results.size() == 3);
    for (const auto& [threads, r] : results) {
      INFO(r.dump());
      CHECK(r.at("status") == "ok");
      CHECK(r.at("conditions").at("threads") == threads);
    }
    CHECK(job.at("winner").is_object());
  }
}

TEST_CASE("every round of the finals after the first runs in a fresh bench worker", "[finals]") {
  TempDir home;
  auto daemon = start(home, "min_samples = 3\nmax_samples = 10\nmin_time_s = 0\nmax_time_s = 0.02\n"
                            "warmup_ms = 1\nfinal_margin = 10\nfinal_rounds = 4\ntie_margin = 0.5\n"
                            "prune_factor = 0\nrace_margin = 0\n");
  auto c = Connection::connect(daemon->socket());
  REQUIRE(c.ok());
  auto restarts = [&] {
    auto top = c->request({{"op", "top"}}, {}, 30s);
    REQUIRE(top.ok());
    for (const auto& lane : top->at("result").at("lanes")) {
      if (lane.at("device") == "cpu") return lane.at("restarts").get<int>();
    }
    return -1;
  };
  const int before = restarts();
  // Two configs, both finalists (final_margin 10, nothing pruned however busy the machine), four
  // rounds.
  auto tuned = c->request({{"op", "tune"}, {"kernel", "thread_fma"}, {"shape", "N=4096"},
                           {"device", "cpu"}, {"configs", json::array({{{"NTHREADS", 1}}, {{"NTHREADS", 2}}})},
                           {"wait", true}},
                          {}, 600s);
  REQUIRE(tuned.ok());
  INFO(tuned->dump());
  REQUIRE(tuned->value("ok", false));
  // Rounds 1-4 each end with a retiring worker: the search's worker measured round 1, three
  // fresh ones rounds 2-4, and a fourth was retired after round 4 (its replacement starts with
  // the next request). Every retirement is one replacement started afterwards, bar the last.
  const int after = restarts();
  CHECK(after - before >= 3);
  auto job = c->request({{"op", "job"}, {"job", tuned->at("result").at("job").at("id")}}, {}, 30s);
  REQUIRE(job.ok());
  for (const auto& r : job->at("result").at("results")) {
    INFO(r.dump());
    CHECK(r.at("status") == "ok");
    CHECK(r.at("remeasured") == true);  // both were in every round
  }
}
