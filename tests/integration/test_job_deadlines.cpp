// Per-job deadlines within the daemon's bounds on both sides (docs/protocol.md § tune): a
// deadline under [limits] bench_timeout_min_s (or the compile floor) is refused, and the timeouts
// a job's own deadline causes are that job's alone: later jobs plan and measure those configs.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

// Each candidate measures for at least 0.3 s; a job deadline of 0.05 s (the floor here) cuts
// every one of them short.
const std::string k_config = R"(
[daemon]
compile_workers = 1
[limits]
bench_timeout_min_s = 0.05
bench_timeout_max_s = 20
[measure]
min_samples = 3
max_samples = 100000
min_time_s = 0.3
max_time_s = 0.4
warmup_ms = 0
flush_cache = false
finalists = 0
)";

json reply_of(Connection& c, json request, std::chrono::milliseconds timeout = 30s) {
  auto reply = c.request(std::move(request), {}, timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  return *reply;
}

std::map<std::string, std::string> statuses(Connection& c, const json& done) {
  std::map<std::string, std::string> out;
  const json job = reply_of(c, {{"op", "job"}, {"job", done.at("job").at("id")}}).at("result");
  for (const auto& r : job.at("results")) out[r.at("config").dump()] = r.at("status");
  return out;
}

} // namespace

TEST_CASE("a per-job deadline under the daemon's minimum is refused, and one that times every "
          "config out quarantines nothing for other jobs",
          "[integration][hostile][deadlines]") {
  TempDir home;
  home.write("ktuned.toml", k_config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--only-kernel-dir", ktune::test::source_path("/kernels_src")});
  REQUIRE(daemon.wait_ready(60s));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  const json base = {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"},
                     {"budget", 3}, {"wait", true}};

  for (const char* field : {"bench_timeout_s", "compile_timeout_s"}) {
    json request = base;
    request[field] = 1e-6;
    request["retry_failed"] = true;
    const json refused = reply_of(c, request);
    INFO(refused.dump());
    CHECK(refused.value("ok", true) == false);
    CHECK(refused.at("error").at("code") == "bad_request");
    CHECK_THAT(refused.at("error").at("message").get<std::string>(),
               Catch::Contains(field) && Catch::Contains("minimum"));
  }

  json hurried = base;
  hurried["bench_timeout_s"] = 0.05;
  hurried["retry_failed"] = true;
  const json first = reply_of(c, hurried, 300s);
  INFO(first.dump());
  REQUIRE(first.value("ok", false));
  const auto timed_out = statuses(c, first.at("result"));
  REQUIRE(timed_out.size() == 3);
  for (const auto& [config, status] : timed_out) CHECK(status == "timeout");

  // A later job of any client, without a deadline of its own: the same three configs, measured.
  const json second = reply_of(c, base, 300s);
  INFO(second.dump());
  REQUIRE(second.value("ok", false));
  CHECK(second.at("result").at("job").at("state") == "done");
  const auto measured = statuses(c, second.at("result"));
  REQUIRE(measured.size() == 3);
  std::set<std::string> a, b;
  for (const auto& [config, status] : timed_out) a.insert(config);
  for (const auto& [config, status] : measured) {
    b.insert(config);
    CHECK(status == "ok");
  }
  CHECK(a == b);
}
