// Failure isolation end to end: a tune of the `faults` family (tests/faults) with the real
// daemon and workers. Every broken candidate becomes a result row with the right status and a
// one-line reason, the healthy ones still produce a winner, and the daemon keeps its pid.
// Quarantine: a later job skips the configs that crashed or hung, unless it asks to retry them.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "db/store.hpp"
#include "tests/cuda/skip.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 30s;
constexpr auto k_tune_timeout = 300s;

// Compiles are generous (a loaded CI machine compiles slowly); runs are cut short.
const std::string k_config = R"(
[daemon]
compile_workers = 2
worker_idle_s = 30
stop_grace_s = 2
[limits]
compile_timeout_s = 20
bench_timeout_min_s = 1
bench_timeout_max_s = 3
worker_memory_mb = 16384
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
)";

// The worker is an AddressSanitizer build in sanitizer configurations: let the kernel's own
// signals kill it, and let a failed huge allocation return null as in a plain build.
void plain_fault_behaviour() {
  ::setenv("ASAN_OPTIONS",
           "handle_segv=0:handle_abort=0:handle_sigbus=0:allocator_may_return_null=1:"
           "detect_leaks=0",
           1);
}

json ok_result(Connection& c, json request, std::chrono::milliseconds timeout = k_reply_timeout) {
  auto reply = c.request(std::move(request), {}, timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

int fault_of(const json& result) { return result.at("config").at("FAULT").get<int>(); }

} // namespace

TEST_CASE("every fault of the fault family is a result with its status", "[integration][faults]") {
  plain_fault_behaviour();
  TempDir home;
  home.write("ktuned.toml", k_config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/tests/faults")});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  const auto pid_before = ok_result(c, {{"op", "stats"}}).at("pid").get<int>();

  const json done = ok_result(c, {{"op", "tune"}, {"kernel", "faults"}, {"shape", "N=4096"},
                                  {"wait", true}},
                              k_tune_timeout);
  INFO(done.dump());
  CHECK(done.at("job").at("state") == "done");
  REQUIRE(done.at("winner").is_object());
  CHECK(done.at("winner").at("config").at("FAULT") == 0);
  const auto job_id = done.at("job").at("id").get<std::int64_t>();

  const json job = ok_result(c, {{"op", "job"}, {"job", job_id}});
  std::map<int, std::vector<json>> by_fault;
  for (const auto& r : job.at("results")) by_fault[fault_of(r)].push_back(r);
  REQUIRE(by_fault.size() == 10);
  auto only = [&](int fault) {
    INFO("FAULT=" << fault);
    REQUIRE(by_fault[fault].size() == 1);
    const json r = by_fault[fault].front();
    const std::string reason = r.at("reason").get<std::string>();
    CHECK_FALSE(reason.empty());
    CHECK(reason.find('\n') == std::string::npos);
    return r;
  };
  CHECK(by_fault[0].size() == 2);
  for (const auto& r : by_fault[0]) CHECK(r.at("status") == "ok");

  {  // each fault kind has its status and a one-line reason
    CHECK(only(1).at("status") == "crash");
    CHECK_THAT(only(1).at("reason").get<std::string>(), Catch::Contains("SIGSEGV"));
    CHECK(only(2).at("status") == "crash");
    CHECK_THAT(only(2).at("reason").get<std::string>(), Catch::Contains("SIGABRT"));
    CHECK(only(3).at("status") == "timeout");
    CHECK_THAT(only(3).at("reason").get<std::string>(), Catch::Contains("deadline"));
    CHECK(only(4).at("status") == "mismatch");
    CHECK(only(5).at("status") == "compile_error");
    CHECK_THAT(only(5).at("reason").get<std::string>(), Catch::Contains("on purpose"));
    CHECK(only(6).at("status") == "compile_timeout");
    CHECK(only(7).at("status") == "runtime_error");
    CHECK_THAT(only(7).at("reason").get<std::string>(), Catch::Contains("memory"));
    CHECK(only(8).at("status") == "worker_lost");
    CHECK_THAT(only(8).at("reason").get<std::string>(), Catch::Contains("exited with status"));
    CHECK(only(9).at("status") == "mismatch");
    const std::string oob = only(9).at("reason").get<std::string>();
    CHECK_THAT(oob, Catch::Contains("OUT"));
    CHECK(oob.find("wrote past buffer end") != std::string::npos);
  }

  {  // the daemon survived with the same pid; the crash kept the worker's stderr
    CHECK(ok_result(c, {{"op", "stats"}}).at("pid").get<int>() == pid_before);
    CHECK(pid_before == daemon.ready_pid());
    auto store = ktune::Store::open(home.str() + "/ktune.db", ktune::OpenMode::read_only);
    REQUIRE(store.ok());
    auto rows = store->job_results(job_id);
    REQUIRE(rows.ok());
    bool found = false;
    for (const auto& row : *rows) {
      if (row.config.find("\"FAULT\":2") == std::string::npos) continue;
      found = true;
      CHECK_THAT(row.log, Catch::Contains("FAULT=2 aborts on purpose"));
    }
    CHECK(found);
  }

  {  // a later job skips the quarantined configs unless it retries them
    // crash x2, timeout, compile_timeout, worker_lost: 5 of the 11 configs.
    const json again = ok_result(c, {{"op", "tune"}, {"kernel", "faults"}, {"shape", "N=2048"}});
    CHECK(again.at("total") == 6);
    CHECK(again.at("quarantined") == 5);
    const json retry = ok_result(c, {{"op", "tune"}, {"kernel", "faults"}, {"shape", "N=2048"},
                                     {"retry_failed", true}});
    CHECK(retry.at("total") == 11);
    CHECK(retry.at("quarantined") == 0);
  }
}

TEST_CASE("a candidate that writes past its output is blamed alone: the stencil family's TX=256",
          "[integration][faults]") {
  plain_fault_behaviour();
  TempDir home;
  // The fault config's deadlines, but runs may take seconds on a loaded machine: nothing here
  // should time out.
  std::string config = k_config;
  config.replace(config.find("bench_timeout_min_s = 1\n"), 24, "bench_timeout_min_s = 30\n");
  config.replace(config.find("bench_timeout_max_s = 3\n"), 24, "bench_timeout_max_s = 60\n");
  home.write("ktuned.toml", config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/tests/faults")});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  // Small buffers (32 KiB each, which a heap would place next to each other), then 1 MiB ones;
  // the second job retries the config the first one quarantined.
  for (const std::string shape : {"NX=256,NY=32", "NX=1024,NY=256"}) {
    INFO(shape);
    const json done = ok_result(c, {{"op", "tune"}, {"kernel", "stencil"}, {"shape", shape},
                                    {"retry_failed", true}, {"wait", true}},
                                k_tune_timeout);
    CHECK(done.at("job").at("state") == "done");
    const json job = ok_result(c, {{"op", "job"}, {"job", done.at("job").at("id")}});
    std::size_t guilty = 0, innocent = 0;
    for (const auto& r : job.at("results")) {
      INFO(r.dump());
      const std::string reason = r.at("reason").get<std::string>();
      if (r.at("config").at("TX") == 256) {
        ++guilty;
        CHECK((r.at("status") == "crash" || r.at("status") == "mismatch"));
        CHECK_THAT(reason, Catch::Contains("OUT"));
        CHECK_THAT(reason, Catch::Contains("past the end of output 'OUT'"));
      } else {
        ++innocent;
        CHECK(r.at("status") == "ok");
      }
    }
    CHECK(guilty == 1);
    CHECK(innocent == 8);
    REQUIRE(job.at("winner").is_object());
    CHECK(job.at("winner").at("config").at("TX") != 256);
  }
}

TEST_CASE("a CUDA config that does not compile fails alone in a compile check's batches",
          "[integration][faults]") {
  TempDir home;
  home.write("ktuned.toml", k_config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/tests/faults")});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  if (!ok_result(c, {{"op", "kernels"}}).value("cuda_backend", false)) {
    ktune::test::skip_test("ktune is built without the CUDA backend");
  }
  const json check = ok_result(c, {{"op", "compile_check"}, {"kernel", "cuda_compile_error"},
                                   {"arch", {"sm_80", "sm_90"}}, {"shape", "N=4096"}},
                               k_tune_timeout);
  INFO(check.dump());
  CHECK(check["compiled"] == 24);
  CHECK(check["errors"] == 2);
  int batched = 0;
  for (const auto& row : check["rows"]) {
    INFO(row.dump());
    if (row["config"]["P"] == 7) {
      CHECK(row["status"] == "compile_error");
      CHECK_THAT(row["message"].get<std::string>(), Catch::Contains("on purpose"));
    } else {
      CHECK(row["status"] == "ok");
      CHECK(row["registers"].get<int>() > 0);
      if (row["batch_size"].get<int>() > 1) ++batched;
    }
  }
  CHECK(batched > 0);  // the sizer moved on from single compiles
}

// The CUDA twin of the stencil above (tests/faults/cuda_stencil): every config compiles, the
// guilty TX=256 too (its fault is at run time); the [gpu] case in test_lanes runs it.
TEST_CASE("the CUDA stencil's configs all compile with nvrtc, the guilty one too",
          "[integration][faults]") {
  TempDir home;
  home.write("ktuned.toml", k_config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/tests/faults")});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  if (!ok_result(c, {{"op", "kernels"}}).value("cuda_backend", false)) {
    ktune::test::skip_test("ktune is built without the CUDA backend");
  }
  const json check = ok_result(c, {{"op", "compile_check"}, {"kernel", "cuda_stencil"},
                                   {"arch", {"sm_90"}}, {"shape", "NX=256,NY=64"}},
                               k_tune_timeout);
  INFO(check.dump());
  CHECK(check["compiled"] == 7);
  CHECK(check["errors"] == 0);
  bool guilty = false;
  for (const auto& row : check["rows"]) {
    CHECK(row["status"] == "ok");
    guilty = guilty || row["config"]["TX"] == 256;
  }
  CHECK(guilty);
}

