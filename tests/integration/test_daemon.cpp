// ktuned end to end: the real daemon and workers, a real socket and database, driven through
// ktune::Connection. Measurement settings are cut to a minimum through the config file.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "db/store.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <algorithm>
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

constexpr auto k_start_timeout = 60s;   // sanitizer builds start slowly
constexpr auto k_reply_timeout = 30s;
constexpr auto k_tune_timeout = 600s;

const std::string k_tiny_measure = R"(
[measure]
min_samples = 3
max_samples = 20
max_time_s = 0.02
min_time_s = 0
warmup_ms = 1
flush_cache = false
)";

std::vector<std::string> daemon_args(const TempDir& home, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", (home.path() / "ktuned.toml").string(),
                                   "--kernel-dir", ktune::test::source_path("/kernels_src"),
                                   "--log-level", "info"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

Connection connect(const DaemonProcess& daemon) {
  auto c = Connection::connect(daemon.socket());
  INFO((c ? std::string() : c.error().message));
  REQUIRE(c.ok());
  return std::move(*c);
}

// Sends one request and returns the whole reply object.
json call(Connection& c, json request) {
  auto reply = c.request(std::move(request), {}, k_reply_timeout);
  INFO((reply ? std::string() : reply.error().message));
  REQUIRE(reply.ok());
  return *reply;
}

json ok_result(Connection& c, json request) {
  json reply = call(c, std::move(request));
  INFO(reply.dump());
  REQUIRE(reply.value("ok", false));
  return reply.at("result");
}

std::string error_code(const json& reply) {
  INFO(reply.dump());
  REQUIRE(reply.value("ok", true) == false);
  return reply.at("error").at("code").get<std::string>();
}

json lookup(Connection& c, const std::string& shape) {
  return ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"}, {"shape", shape}, {"dtype", "f32"},
                       {"device", "cpu"}});
}

// A family whose spec does not parse, and one whose space is empty below N = 3.
void write_extra_kernels(const TempDir& dir) {
  const std::string source = "extern \"C\" void entry(void** args) { (void)args; }\n";
  dir.write("kernels/broken/kernel.cpp", source);
  dir.write("kernels/broken/kernel.toml", R"([kernel]
name = "broken"
language = "cpp"
source = "kernel.cpp"
entry = "entry"
shape = ["N"]
dtypes = ["f32"]

[params]
X = [1, 2]

[space]
constraints = ["X * "]

[[args]]
name = "OUT"
kind = "out"
count = "N"

[default]
X = 1
)");
  dir.write("kernels/nothing_fits/kernel.cpp", source);
  dir.write("kernels/nothing_fits/kernel.toml", R"([kernel]
name = "nothing_fits"
language = "cpp"
source = "kernel.cpp"
entry = "entry"
shape = ["N"]
dtypes = ["f32"]

[params]
X = [1, 2]

[space]
constraints = ["X > N"]

[[args]]
name = "OUT"
kind = "out"
count = "N"

[default]
X = 1
)");
}

} // namespace

TEST_CASE("ktuned tunes a kernel and stores every candidate and serves the winner after a restart",
          "[integration]") {
  TempDir home;
  home.write("ktuned.toml", k_tiny_measure);
  const std::string shape = "M=32,N=32,K=32";
  std::int64_t job_id = 0;
  std::int64_t total = 0;
  json winner_config;

  {
    DaemonProcess daemon(home.str(), daemon_args(home));
    REQUIRE(daemon.wait_ready(k_start_timeout));
    CHECK(daemon.ready_pid() == daemon.pid());
    auto c = connect(daemon);

    json kernels = ok_result(c, {{"op", "kernels"}});
    std::set<std::string> names;
    for (const auto& k : kernels.at("kernels")) names.insert(k.at("name").get<std::string>());
    CHECK(names.count("gemm") == 1);
    CHECK(names.count("reduce_sum") == 1);
    CHECK(kernels.at("broken").empty());

    json before = lookup(c, shape);
    CHECK(before.at("rung") == "default");
    CHECK(before.at("exact") == false);
    CHECK(before.at("reason") == "device_never_tuned");
    CHECK(before.at("config").at("BM") == 64);

    std::vector<json> events;
    auto reply = c.request({{"op", "tune"}, {"kernel", "gemm"}, {"shape", shape}, {"wait", true}},
                           [&](const json& e) { events.push_back(e); }, k_tune_timeout);
    REQUIRE(reply.ok());
    INFO(reply->dump());
    REQUIRE(reply->value("ok", false));
    const json& summary = reply->at("result");
    job_id = summary.at("job").at("id").get<std::int64_t>();
    total = summary.at("job").at("total").get<std::int64_t>();
    CHECK(summary.at("job").at("state") == "done");
    CHECK(summary.at("job").at("done") == total);
    REQUIRE(total > 0);
    REQUIRE(summary.at("winner").is_object());
    winner_config = summary.at("winner").at("config");

    REQUIRE(static_cast<std::int64_t>(events.size()) == total);
    for (const auto& e : events) {
      CHECK(e.at("event") == "progress");
      CHECK(e.at("data").at("job") == job_id);
      CHECK(e.at("data").at("total") == total);
    }
    CHECK(events.back().at("data").at("done") == total);

    // Every enumerated config has exactly one result, and the winner is the fastest ok one.
    json job = ok_result(c, {{"op", "job"}, {"job", job_id}});
    const json& results = job.at("results");
    REQUIRE(static_cast<std::int64_t>(results.size()) == total);
    std::set<std::int64_t> indices;
    std::set<std::string> configs;
    const json* best = nullptr;
    for (const auto& r : results) {
      INFO(r.dump());
      CHECK(r.at("status") == "ok");
      CHECK(r.at("n").get<int>() >= 1);
      indices.insert(r.at("config_index").get<std::int64_t>());
      configs.insert(r.at("config").dump());
      if (r.at("status") != "ok") continue;
      const double median = r.at("median_ms").get<double>();
      if (best == nullptr || median < best->at("median_ms").get<double>() ||
          (median == best->at("median_ms").get<double>() &&
           r.at("config_index") < best->at("config_index"))) {
        best = &r;
      }
    }
    CHECK(static_cast<std::int64_t>(indices.size()) == total);
    CHECK(*indices.begin() == 0);
    CHECK(*indices.rbegin() == total - 1);
    CHECK(static_cast<std::int64_t>(configs.size()) == total);
    REQUIRE(best != nullptr);
    // The best is the fastest finalist (the rows measured again in the finals), or the fastest
    // row when there were no finals; the winner is the best (the tie with the lowest median: no
    // incumbent in a fresh home).
    const json* best_finalist = nullptr;
    for (const auto& r : results) {
      if (r.value("remeasured", false) &&
          (best_finalist == nullptr ||
           r.at("median_ms").get<double>() < best_finalist->at("median_ms").get<double>())) {
        best_finalist = &r;
      }
    }
    if (best_finalist != nullptr) best = best_finalist;
    bool any_tie = false;
    for (const auto& r : results) any_tie = any_tie || r.value("tied", false);
    const json& expected = *best;
    if (any_tie) CHECK(best->value("tied", false));
    CHECK(job.at("winner").at("config") == expected.at("config"));
    CHECK(winner_config == expected.at("config"));

    json hit = lookup(c, shape);
    CHECK(hit.at("rung") == "exact");
    CHECK(hit.at("exact") == true);
    CHECK(hit.at("config") == winner_config);
    CHECK(hit.at("job") == job_id);

    json miss = lookup(c, "M=48,N=48,K=48");
    CHECK(miss.at("rung") == "nearest");
    CHECK(miss.at("exact") == false);
    CHECK(miss.at("from_shape") == shape);
    CHECK(miss.at("config") == winner_config);
    CHECK(miss.at("reason") == "shape_not_tuned");

    json jobs = ok_result(c, {{"op", "jobs"}, {"limit", 10}});
    REQUIRE(!jobs.at("jobs").empty());
    CHECK(jobs.at("jobs").at(0).at("id") == job_id);

    json stats = ok_result(c, {{"op", "stats"}});
    CHECK(stats.at("pid") == daemon.pid());
    CHECK(stats.at("jobs_queued") == 0);
    CHECK(stats.at("jobs_running") == 0);

    json bye = call(c, {{"op", "shutdown"}});
    CHECK(bye.value("ok", false));
    CHECK(daemon.wait_exit(30s) == std::optional<int>(0));
    CHECK_FALSE(std::filesystem::exists(home.path() / "ktuned.sock"));
    CHECK_FALSE(std::filesystem::exists(home.path() / "ktuned.pid"));
  }

  {
    // The database, read by another process the way a runtime's fallback would.
    auto store = ktune::Store::open((home.path() / "ktune.db").string(), ktune::OpenMode::read_only);
    REQUIRE(store.ok());
    auto results = store->job_results(job_id);
    REQUIRE(results.ok());
    CHECK(static_cast<std::int64_t>(results->size()) == total);
    auto job = store->get_job(job_id);
    REQUIRE(job.ok());
    REQUIRE(job->has_value());
    CHECK((*job)->state == ktune::JobState::done);
    CHECK((*job)->done == total);
  }

  {
    DaemonProcess daemon(home.str(), daemon_args(home));
    REQUIRE(daemon.wait_ready(k_start_timeout));
    auto c = connect(daemon);
    json hit = lookup(c, shape);
    CHECK(hit.at("rung") == "exact");
    CHECK(hit.at("config") == winner_config);
    daemon.signal(SIGTERM);
    CHECK(daemon.wait_exit(30s) == std::optional<int>(0));
  }
}

TEST_CASE("ktuned answers bad requests with error codes and keeps serving", "[integration]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\nmax_message_bytes = 1024\n" + k_tiny_measure);
  write_extra_kernels(home);
  DaemonProcess daemon(home.str(),
                       daemon_args(home, {"--kernel-dir", (home.path() / "kernels").string()}));
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto c = connect(daemon);
  const json gemm = {{"op", "tune"}, {"kernel", "gemm"}, {"shape", "M=32,N=32,K=32"}};
  auto with = [&](json request, const char* key, json value) {
    request[key] = std::move(value);
    return request;
  };

  SECTION("malformed JSON") {
    REQUIRE(c.send_raw("{not json\n").ok());
    auto line = c.read_line(k_reply_timeout);
    REQUIRE(line.ok());
    const json reply = json::parse(*line);
    CHECK(error_code(reply) == "bad_json");
    CHECK(reply.at("id").is_null());
  }
  SECTION("unknown op, echoing the id") {
    const json reply = call(c, {{"op", "frobnicate"}, {"id", 77}});
    CHECK(error_code(reply) == "unknown_op");
    CHECK(reply.at("id") == 77);
  }
  SECTION("unknown kernel") {
    CHECK(error_code(call(c, with(gemm, "kernel", "no_such_kernel"))) == "unknown_kernel");
  }
  SECTION("bad shape") {
    CHECK(error_code(call(c, with(gemm, "shape", "M=abc"))) == "bad_shape");
    CHECK(error_code(call(c, with(gemm, "shape", "M=32,N=32"))) == "bad_shape");
  }
  SECTION("missing field") {
    json request = gemm;
    request.erase("shape");
    CHECK(error_code(call(c, request)) == "bad_request");
  }
  SECTION("dtype, device and strategy") {
    CHECK(error_code(call(c, with(gemm, "dtype", "f16"))) == "bad_dtype");
    // cuda:0 is refused with no_device exactly when the daemon has no such device; on a GPU
    // machine the same request is a job (cancelled at once).
    const json devices = ok_result(c, {{"op", "devices"}});
    const bool has_cuda0 = std::any_of(devices.at("devices").begin(), devices.at("devices").end(),
                                       [](const json& d) { return d.value("name", "") == "cuda:0"; });
    const json on_cuda = call(c, with(gemm, "device", "cuda:0"));
    if (has_cuda0) {
      REQUIRE(on_cuda.value("ok", false));
      ok_result(c, {{"op", "cancel"}, {"job", on_cuda.at("result").at("job")}});
    } else {
      CHECK(error_code(on_cuda) == "no_device");
      CHECK_FALSE(devices.at("cuda").value("available", true));
    }
    CHECK(error_code(call(c, with(gemm, "device", "tpu"))) == "unknown_device");
    CHECK(error_code(call(c, with(gemm, "strategy", "simplex"))) == "bad_request");
  }
  SECTION("unknown job") {
    CHECK(error_code(call(c, {{"op", "job"}, {"job", 999999}})) == "unknown_job");
  }
  SECTION("a broken spec is listed and refused") {
    const json kernels = ok_result(c, {{"op", "kernels"}});
    bool listed = false;
    for (const auto& b : kernels.at("broken")) {
      if (b.at("path").get<std::string>().find("/broken/kernel.toml") != std::string::npos) {
        listed = true;
        CHECK_FALSE(b.at("error").get<std::string>().empty());
      }
    }
    CHECK(listed);
    CHECK(error_code(call(c, {{"op", "tune"}, {"kernel", "broken"}, {"shape", "N=8"}})) ==
          "spec_error");
  }
  SECTION("empty space") {
    CHECK(error_code(call(c, {{"op", "tune"}, {"kernel", "nothing_fits"}, {"shape", "N=4"}})) ==
          "empty_space");
  }
  SECTION("a message over the limit closes only its connection") {
    REQUIRE(c.send_raw(std::string(2000, 'x')).ok());
    auto line = c.read_line(k_reply_timeout);
    REQUIRE(line.ok());
    CHECK(error_code(json::parse(*line)) == "message_too_large");
    CHECK_FALSE(c.read_line(k_reply_timeout).ok());
    c = connect(daemon);
  }

  // Whatever came before, the daemon still serves.
  const json stats = ok_result(c, {{"op", "stats"}});
  CHECK(stats.at("pid") == daemon.pid());
}

TEST_CASE("a second ktuned on the same home exits non-zero while the first runs",
          "[integration]") {
  TempDir home;
  home.write("ktuned.toml", k_tiny_measure);
  DaemonProcess first(home.str(), daemon_args(home));
  REQUIRE(first.wait_ready(k_start_timeout));

  DaemonProcess second(home.str(), daemon_args(home));
  CHECK_FALSE(second.wait_ready(k_start_timeout));
  const auto code = second.wait_exit(30s);
  REQUIRE(code.has_value());
  CHECK(*code != 0);

  auto c = connect(first);
  CHECK(ok_result(c, {{"op", "stats"}}).at("pid") == first.pid());
  first.signal(SIGINT);
  CHECK(first.wait_exit(30s) == std::optional<int>(0));
}

TEST_CASE("failed candidates are recorded and the job goes on until a stop interrupts it",
          "[integration]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\ncompile_workers = 1\n" + k_tiny_measure);
  // X = 2 aborts the bench worker, X = 3 does not compile; X = 1 and X = 4 are fine.
  home.write("kernels/faulty/kernel.cpp", R"(#include <cstdint>
#include <cstdlib>
extern "C" void faulty(void** args) {
  auto* out = static_cast<KTUNE_DTYPE*>(args[0]);
  const auto n = *static_cast<const std::int64_t*>(args[1]);
#if X == 2
  std::abort();
#endif
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<KTUNE_DTYPE>(i);
}
#if X == 3
#error "X == 3 is not a valid configuration"
#endif
)");
  home.write("kernels/faulty/kernel.toml", R"([kernel]
name = "faulty"
language = "cpp"
source = "kernel.cpp"
entry = "faulty"
shape = ["N"]
dtypes = ["f32"]

[params]
X = [1, 2, 3, 4]

[[args]]
name = "OUT"
kind = "out"
count = "N"

[[args]]
name = "N"
kind = "scalar"
value = "N"

[default]
X = 1
)");
  DaemonProcess daemon(home.str(),
                       daemon_args(home, {"--kernel-dir", (home.path() / "kernels").string()}));
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto c = connect(daemon);

  auto reply = c.request({{"op", "tune"}, {"kernel", "faulty"}, {"shape", "N=64"}, {"wait", true}},
                         {}, k_tune_timeout);
  REQUIRE(reply.ok());
  INFO(reply->dump());
  REQUIRE(reply->value("ok", false));
  const json& summary = reply->at("result");
  CHECK(summary.at("job").at("state") == "done");
  CHECK(summary.at("job").at("failed") == 2);
  const auto job_id = summary.at("job").at("id").get<std::int64_t>();

  const json job = ok_result(c, {{"op", "job"}, {"job", job_id}});
  const json& results = job.at("results");
  REQUIRE(results.size() == 4);
  CHECK(results.at(0).at("status") == "ok");
  CHECK(results.at(1).at("status") == "crash");
  CHECK(results.at(1).at("reason").get<std::string>().find("SIGABRT") != std::string::npos);
  CHECK(results.at(2).at("status") == "compile_error");
  CHECK(results.at(2).at("reason").get<std::string>().find("not a valid configuration") !=
        std::string::npos);
  CHECK(results.at(3).at("status") == "ok");
  const auto winner = job.at("winner").at("config").at("X").get<int>();
  CHECK((winner == 1 || winner == 4));

  // A waiting client learns that its job was interrupted by the stop.
  auto waiting = connect(daemon);
  REQUIRE(waiting.send_raw(R"({"id":"w","op":"tune","kernel":"gemm","shape":"M=256,N=256,K=256","wait":true})"
                           "\n").ok());
  std::int64_t running_id = 0;
  for (int attempt = 0; attempt < 600 && running_id == 0; ++attempt) {
    const json jobs = ok_result(c, {{"op", "jobs"}, {"limit", 1}});
    const json& latest = jobs.at("jobs").at(0);
    if (latest.at("kernel") == "gemm" && latest.at("state") == "running") {
      running_id = latest.at("id").get<std::int64_t>();
    } else {
      std::this_thread::sleep_for(50ms);
    }
  }
  REQUIRE(running_id != 0);
  CHECK(call(c, {{"op", "shutdown"}}).value("ok", false));
  json final_reply;
  while (true) {
    auto line = waiting.read_line(k_reply_timeout);
    REQUIRE(line.ok());
    final_reply = json::parse(*line);
    if (!final_reply.contains("event")) break;
  }
  INFO(final_reply.dump());
  CHECK(final_reply.at("id") == "w");
  CHECK(final_reply.at("result").at("job").at("state") == "interrupted");
  CHECK(daemon.wait_exit(30s) == std::optional<int>(0));

  auto store = ktune::Store::open((home.path() / "ktune.db").string(), ktune::OpenMode::read_only);
  REQUIRE(store.ok());
  auto stored = store->get_job(running_id);
  REQUIRE(stored.ok());
  REQUIRE(stored->has_value());
  CHECK((*stored)->state == ktune::JobState::interrupted);
  auto rows = store->job_results(running_id);
  REQUIRE(rows.ok());
  CHECK(static_cast<std::int64_t>(rows->size()) == (*stored)->done);
}

TEST_CASE("a worker that dies or breaks the protocol fails the job with the reason",
          "[integration]") {
  TempDir home;
  home.write("ktuned.toml", k_tiny_measure);
  // Stand-in workers: each announces itself and reads the first request; it answers the daemon's
  // device probe with a CPU (as a real worker does), then misbehaves on the next request.
  const auto probe_reply = home.write(
      "probe-reply.json",
      R"({"id":ID,"ok":true,"outcome":{"cpu":{"name":"cpu","fingerprint":)"
      R"("0123456789abcdef0123456789abcdef","details":{"kind":"cpu"}},)"
      R"("cuda_error":{"code":"no_device","message":"stand-in worker"}}})"
      "\n");
  const std::string ready =
      "printf '{\"ready\":true,\"pid\":%d,\"role\":\"compile\"}\\n' $$ >&3\n"
      "read -r request <&3\n"
      "case \"$request\" in *'\"op\":\"devices\"'*)\n"
      "  id=$(printf '%s' \"$request\" | sed 's/^{\"id\":\\([0-9]*\\).*/\\1/')\n"
      "  sed \"s/ID/$id/\" '" + probe_reply.string() + "' >&3\n"
      "  read -r request <&3;;\n"
      "esac\n";
  std::string behaviour;
  std::string expected_reason;
  SECTION("killed by a signal") {
    behaviour = "kill -SEGV $$\n";
    expected_reason = "killed by SIGSEGV";
  }
  SECTION("exits") {
    behaviour = "exit 3\n";
    expected_reason = "exited with status 3";
  }
  SECTION("answers garbage") {
    behaviour = "echo 'this is not json' >&3\nsleep 30\n";
    expected_reason = "broke the protocol";
  }
  SECTION("closes its socket and stays") {
    behaviour = "exec 3>&-\nsleep 30\n";
    expected_reason = "closed its socket";
  }
  const auto worker = home.write("fake-worker", "#!/bin/sh\n" + ready + behaviour);
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);

  DaemonProcess daemon(home.str(), daemon_args(home, {"--worker", worker.string()}));
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto c = connect(daemon);
  auto reply = c.request({{"op", "tune"}, {"kernel", "gemm"}, {"shape", "M=32,N=32,K=32"},
                          {"wait", true}},
                         {}, k_tune_timeout);
  REQUIRE(reply.ok());
  INFO(reply->dump());
  REQUIRE(reply->value("ok", false));
  const json& job = reply->at("result").at("job");
  CHECK(job.at("state") == "failed");
  const std::string error = job.at("error").get<std::string>();
  CHECK(error.find("reference config") != std::string::npos);
  CHECK(error.find(expected_reason) != std::string::npos);

  // The daemon is unharmed.
  CHECK(ok_result(c, {{"op", "stats"}}).at("pid") == daemon.pid());
}
