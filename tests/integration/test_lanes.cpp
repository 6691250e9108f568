// Devices and lanes end to end: the real ktuned, workers, compilers, socket and database. Lookups
// by device name and by fingerprint (a table tuned on an H100 imported here), one queue for every
// kind of work (tune-on-miss jobs cancelled and joined, a tune next to a compile check), the one
// planner (tune-on-miss reuses earlier results), and `--device all`.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "db/store.hpp"
#include "tests/cuda/skip.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 30s;
constexpr auto k_tune_timeout = 600s;

std::unique_ptr<DaemonProcess> start(const TempDir& home, const std::string& extra = {}) {
  home.write("ktuned.toml",
             "[measure]\nmin_samples = 3\nmax_samples = 20\nmax_time_s = 0.02\nmin_time_s = 0\n"
             "warmup_ms = 1\nflush_cache = false\nfinalists = 0\n" + extra);
  auto daemon = std::make_unique<DaemonProcess>(
      home.str(), std::vector<std::string>{"--config", (home.path() / "ktuned.toml").string(),
                                           "--kernel-dir", ktune::test::source_path("/kernels_src"),
                                           "--log-level", "info"});
  REQUIRE(daemon->wait_ready(k_start_timeout));
  return daemon;
}

Connection connect(const DaemonProcess& daemon) {
  auto c = Connection::connect(daemon.socket());
  REQUIRE(c.ok());
  return std::move(*c);
}

json reply_of(Connection& c, json request, std::chrono::milliseconds timeout = k_reply_timeout) {
  auto reply = c.request(std::move(request), {}, timeout);
  INFO((reply ? std::string() : reply.error().message));
  REQUIRE(reply.ok());
  return *reply;
}

json ok_result(Connection& c, json request, std::chrono::milliseconds timeout = k_reply_timeout) {
  const json reply = reply_of(c, std::move(request), timeout);
  INFO(reply.dump());
  REQUIRE(reply.value("ok", false));
  return reply.at("result");
}

std::string job_state(Connection& c, std::int64_t job) {
  return ok_result(c, {{"op", "job"}, {"job", job}})["job"].value("state", "");
}

// Polls until the job is in one of the final states; returns the state.
std::string wait_end(Connection& c, std::int64_t job, std::chrono::seconds limit = 300s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string state;
  while (std::chrono::steady_clock::now() < deadline) {
    state = job_state(c, job);
    if (state != "queued" && state != "running") return state;
    std::this_thread::sleep_for(50ms);
  }
  return state;
}

// Stops the daemon, then reports the test skipped (exits the process).
[[noreturn]] void skip(std::unique_ptr<DaemonProcess>& daemon, const std::string& reason) {
  daemon.reset();
  ktune::test::skip_test(reason);
}

} // namespace

TEST_CASE("a lookup on cuda:0 without a GPU is no_device and says why", "[integration][lanes]") {
  TempDir home;
  auto daemon = start(home);
  Connection c = connect(*daemon);
  const json devices = ok_result(c, {{"op", "devices"}});
  if (devices["cuda"].value("available", false)) skip(daemon, "this machine has a CUDA device");
  const json reply = reply_of(c, {{"op", "lookup"}, {"kernel", "gemm"},
                                  {"shape", "M=64,N=64,K=64"}, {"device", "cuda:0"}});
  INFO(reply.dump());
  REQUIRE_FALSE(reply.value("ok", true));
  CHECK(reply["error"]["code"] == "no_device");
  const std::string message = reply["error"]["message"];
  CHECK_THAT(message, Catch::Contains("cuda:0"));
  CHECK(message == "device cuda:0: " + devices["cuda"]["reason"].get<std::string>());
  // A name that is no device at all.
  const json unknown = reply_of(c, {{"op", "lookup"}, {"kernel", "gemm"},
                                    {"shape", "M=64,N=64,K=64"}, {"device", "tpu:0"}});
  CHECK(unknown["error"]["code"] == "unknown_device");
}

TEST_CASE("a table tuned on an H100, imported, answers lookups by fingerprint",
          "[integration][lanes]") {
  TempDir home;
  auto daemon = start(home);
  Connection c = connect(*daemon);
  std::string source_hash;
  const json kernels = ok_result(c, {{"op", "kernels"}});
  for (const auto& k : kernels["kernels"]) {
    if (k["name"] == "gemm" && k["language"] == "cuda") source_hash = k["source_hash"];
  }
  if (source_hash.empty()) skip(daemon, "ktune is built without the CUDA backend's families");
  const std::string h100 = "5e1fa4b0c2d94e7a8b3c6d2e1f0a9b87";
  const json details = {{"kind", "cuda"}, {"name", "NVIDIA H100 80GB HBM3"},
                        {"compute_capability", "9.0"}, {"arch", "sm_90"}, {"sm_count", 132}};
  auto row = [&](const std::string& shape, json config, double median_ms) {
    return json{{"kernel", "gemm"}, {"shape", shape}, {"dtype", "f32"},
                {"fingerprint", h100}, {"source_hash", source_hash}, {"config", config},
                {"median_ms", median_ms}, {"gflops", 1000.0},
                {"device", {{"name", "cuda:0"}, {"details", details}}}};
  };
  const json big = {{"BLOCK_M", 128}, {"BLOCK_N", 128}, {"BLOCK_K", 32}};
  json table = {{"format", "ktune-table"}, {"schema_version", 1}, {"host", "h100-node"},
                {"rows", {row("M=4096,N=4096,K=4096", big, 0.9)}}};
  const json imported = ok_result(c, {{"op", "import"}, {"table", table}, {"policy", "faster"}});
  INFO(imported.dump());
  REQUIRE(imported["imported"] == 1);

  auto lookup = [&](const std::string& shape, const std::string& device) {
    return ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"}, {"shape", shape},
                         {"device", device}});
  };
  const json exact = lookup("M=4096,N=4096,K=4096", h100);
  CHECK(exact["rung"] == "exact");
  CHECK(exact["config"] == big);
  const json nearest = lookup("M=4096,N=4096,K=2048", h100);
  CHECK(nearest["rung"] == "nearest");
  CHECK(nearest["config"] == big);
  CHECK(nearest["from_shape"] == "M=4096,N=4096,K=4096");
  // Another GPU's fingerprint, never seen here: the CUDA family's [default].
  const json other = lookup("M=4096,N=4096,K=4096", "00112233445566778899aabbccddeeff");
  CHECK(other["rung"] == "default");
  CHECK(other["reason"] == "device_never_tuned");
  // The same shape on this machine's CPU is not the H100's winner.
  CHECK(lookup("M=4096,N=4096,K=4096", "cpu")["rung"] == "default");
  // A fingerprint lookup never queues a tune here.
  const json remote_miss = ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"},
                                         {"shape", "M=512,N=512,K=512"}, {"device", h100},
                                         {"tune_on_miss", true}});
  CHECK_FALSE(remote_miss.contains("tune_job"));
}

TEST_CASE("a tune submitted while a compile check holds the compile workers finishes",
          "[integration][lanes]") {
  TempDir home;
  auto daemon = start(home, "[daemon]\ncompile_workers = 1\n");
  Connection c = connect(*daemon);
  if (!ok_result(c, {{"op", "kernels"}}).value("cuda_backend", false)) {
    skip(daemon, "ktune is built without the CUDA backend");
  }
  // gemm's CUDA family admits hundreds of configs: minutes of nvrtc on one worker.
  Connection check = connect(*daemon);
  const json check_request = {{"v", 1}, {"id", 1}, {"op", "compile_check"}, {"kernel", "gemm"},
                              {"arch", {"sm_80", "sm_90"}}};
  REQUIRE(check.send_raw(check_request.dump() + "\n").ok());
  std::this_thread::sleep_for(300ms);
  const json tuned = ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"},
                                   {"budget", 3}, {"strategy", "random"}, {"wait", true}},
                               k_tune_timeout);
  CHECK(tuned["job"]["state"] == "done");
  // The check is a job like any: listed, and cancelled.
  std::int64_t check_job = 0;
  const json jobs = ok_result(c, {{"op", "jobs"}});
  for (const auto& j : jobs["jobs"]) {
    if (j["strategy"] == "compile_check") check_job = j["id"];
  }
  REQUIRE(check_job != 0);
  CHECK(job_state(c, check_job) == "running");
  ok_result(c, {{"op", "cancel"}, {"job", check_job}});
  // The check's client saw progress events of its job, then gets its answer: cancelled.
  json answer;
  int events = 0;
  for (;;) {
    auto line = check.read_line(k_reply_timeout);
    REQUIRE(line.ok());
    answer = json::parse(*line);
    if (!answer.contains("event")) break;
    ++events;
    CHECK(answer["event"] == "progress");
    CHECK(answer["data"]["job"] == check_job);
    CHECK(answer["data"]["total"] == 1278);
  }
  CHECK(events > 0);
  CHECK(answer["error"]["code"] == "cancelled");
  CHECK(wait_end(c, check_job) == "cancelled");
}

TEST_CASE("tune-on-miss jobs are jobs of the one queue: cancelled, joined, planned alike",
          "[integration][lanes]") {
  TempDir home;
  auto daemon = start(home);
  Connection c = connect(*daemon);
  auto miss = [&](const std::string& shape, const std::string& kernel = "gemm") {
    const json answer = ok_result(c, {{"op", "lookup"}, {"kernel", kernel}, {"shape", shape},
                                      {"tune_on_miss", true}});
    REQUIRE(answer.contains("tune_job"));
    return answer["tune_job"].get<std::int64_t>();
  };

  SECTION("a tune-on-miss job waiting behind another job can be cancelled") {
    const json running = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                       {"shape", "M=128,N=128,K=128"}});
    const std::int64_t background = miss("M=96,N=96,K=96");
    CHECK(job_state(c, background) == "queued");
    const json cancelled = ok_result(c, {{"op", "cancel"}, {"job", background}});
    CHECK(cancelled["state"] == "cancelled");
    ok_result(c, {{"op", "cancel"}, {"job", running["job"]}});
  }
  SECTION("an identical tune joins a tune-on-miss job") {
    ok_result(c, {{"op", "tune"}, {"kernel", "gemm"}, {"shape", "M=128,N=128,K=128"}});
    const std::int64_t background = miss("M=96,N=96,K=96");
    const json joined = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                      {"shape", "M=96,N=96,K=96"}});
    CHECK(joined["job"] == background);
    CHECK(joined.value("joined", false));
    // And a miss while an identical client tune is queued answers that job.
    const json queued = ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"},
                                      {"shape", "N=8192"}});
    const json answer = ok_result(c, {{"op", "lookup"}, {"kernel", "reduce_sum"},
                                      {"shape", "N=8192"}, {"tune_on_miss", true}});
    CHECK(answer["tune_job"] == queued["job"]);
  }
  SECTION("a tune-on-miss job reuses the results of an earlier job of its key") {
    // An earlier job measured some configs of the key and was cancelled before a winner.
    const json first = ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"},
                                     {"shape", "N=16384"}});
    const std::int64_t first_job = first["job"];
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (ok_result(c, {{"op", "job"}, {"job", first_job}})["job"].value("done", 0) < 2 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    ok_result(c, {{"op", "cancel"}, {"job", first_job}});
    REQUIRE(wait_end(c, first_job) == "cancelled");
    const json measured = ok_result(c, {{"op", "job"}, {"job", first_job}});
    const std::size_t earlier = measured["results"].size();
    REQUIRE(earlier >= 2);

    const std::int64_t background = miss("N=16384", "reduce_sum");
    REQUIRE(wait_end(c, background) == "done");
    const json job = ok_result(c, {{"op", "job"}, {"job", background}});
    std::size_t reused = 0;
    for (const auto& r : job["results"]) {
      reused += r.value("reason", "").rfind("reused from job " + std::to_string(first_job), 0) == 0;
    }
    CHECK(reused == earlier);
  }
}

TEST_CASE("tune with device all makes one job per device that has a family of the kernel",
          "[integration][lanes]") {
  TempDir home;
  auto daemon = start(home);
  Connection c = connect(*daemon);
  const json devices = ok_result(c, {{"op", "devices"}});
  std::size_t cuda_devices = devices["devices"].size() - 1;
  const json queued = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                    {"shape", "M=64,N=64,K=64"}, {"device", "all"},
                                    {"budget", 2}, {"strategy", "random"}});
  REQUIRE(queued["jobs"].size() == 1 + cuda_devices);
  CHECK(queued["jobs"][0]["device"] == "cpu");
  // Waiting for all of them: one reply with every summary.
  const json waited = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                    {"shape", "M=64,N=64,K=64"}, {"device", "all"},
                                    {"budget", 2}, {"strategy", "random"}, {"wait", true}},
                                k_tune_timeout);
  REQUIRE(waited["jobs"].size() == 1 + cuda_devices);
  CHECK(waited["jobs"][0]["job"]["id"] == queued["jobs"][0]["job"]);
  CHECK(waited["jobs"][0]["job"]["state"] == "done");
  if (cuda_devices == 0) {
    // softmax has only a CUDA family: nothing here can run it.
    const json none = reply_of(c, {{"op", "tune"}, {"kernel", "softmax"}, {"shape", "ROWS=64,COLS=64"},
                                   {"device", "all"}});
    CHECK(none["error"]["code"] == "no_device");
  }
}

TEST_CASE("a CPU job and a CUDA job run on their lanes at once, and the CUDA winner is looked "
          "up on cuda:0",
          "[integration][lanes][gpu]") {
  TempDir home;
  auto daemon = start(home);
  Connection c = connect(*daemon);
  const json devices = ok_result(c, {{"op", "devices"}});
  if (!devices["cuda"].value("available", false)) {
    skip(daemon, "no CUDA device: " + devices["cuda"].value("reason", std::string("?")));
  }
  const json cpu = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                 {"shape", "M=256,N=256,K=256"}, {"budget", 12},
                                 {"strategy", "random"}});
  const json gpu = ok_result(c, {{"op", "tune"}, {"kernel", "gemm"},
                                 {"shape", "M=1024,N=1024,K=1024"}, {"device", "cuda:0"},
                                 {"budget", 12}, {"strategy", "random"}});
  // Both lanes hold a running job at the same moment.
  bool both = false;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!both && std::chrono::steady_clock::now() < deadline) {
    const json stats = ok_result(c, {{"op", "stats"}});
    int running = 0;
    for (const auto& lane : stats["lanes"]) running += lane["job"].is_number();
    both = running >= 2;
    if (!both) std::this_thread::sleep_for(10ms);
  }
  CHECK(both);
  CHECK(wait_end(c, cpu["job"]) == "done");
  REQUIRE(wait_end(c, gpu["job"]) == "done");
  const json job = ok_result(c, {{"op", "job"}, {"job", gpu["job"]}});
  for (const auto& r : job["results"]) {
    INFO(r.dump());
    CHECK(r["status"] != "crash");
    CHECK(r["status"] != "worker_lost");
    CHECK(r["status"] != "mismatch");
  }
  const json answer = ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"},
                                    {"shape", "M=1024,N=1024,K=1024"}, {"device", "cuda:0"}});
  CHECK(answer["rung"] == "exact");
  CHECK(answer["config"] == job["winner"]["config"]);
  // By fingerprint too.
  const std::string fingerprint = devices["devices"][1]["fingerprint"];
  CHECK(ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"}, {"shape", "M=1024,N=1024,K=1024"},
                      {"device", fingerprint}})["rung"] == "exact");
}

TEST_CASE("a candidate that loses the CUDA context is the only one blamed",
          "[integration][gpu][loses-context]") {
  TempDir home;
  home.write("ktuned.toml",
             "[measure]\nmin_samples = 3\nmax_samples = 20\nmax_time_s = 0.02\nmin_time_s = 0\n"
             "warmup_ms = 1\nflush_cache = false\nfinalists = 0\n");
  auto daemon = std::make_unique<DaemonProcess>(
      home.str(), std::vector<std::string>{"--config", (home.path() / "ktuned.toml").string(),
                                           "--kernel-dir", ktune::test::source_path("/tests/faults"),
                                           "--log-level", "info"});
  REQUIRE(daemon->wait_ready(k_start_timeout));
  Connection c = connect(*daemon);
  const json devices = ok_result(c, {{"op", "devices"}});
  if (!devices["cuda"].value("available", false)) {
    skip(daemon, "no CUDA device: " + devices["cuda"].value("reason", std::string("?")));
  }
  // Exhaustive, in config order: FAULT=0, then 1 (loses the context), then 2 on a new worker.
  const json tuned = ok_result(c, {{"op", "tune"}, {"kernel", "cuda_faults"}, {"shape", "N=4096"},
                                   {"device", "cuda:0"}, {"wait", true}},
                               k_tune_timeout);
  CHECK(tuned["job"]["state"] == "done");
  const json job = ok_result(c, {{"op", "job"}, {"job", tuned["job"]["id"]}});
  std::map<std::int64_t, std::string> status;
  for (const auto& r : job["results"]) status[r["config"]["FAULT"]] = r["status"];
  INFO(job["results"].dump());
  CHECK(status[0] == "ok");
  CHECK(status[1] == "crash");
  CHECK(status[2] == "ok");
  // The crash's log holds the fault, not a follow-on failure of releasing the lost context's
  // module (it was unloaded while the fatal error unwound, before the context was known lost).
  auto store = ktune::Store::open((home.path() / "ktune.db").string(), ktune::OpenMode::read_only);
  REQUIRE(store.ok());
  auto rows = store->job_results(tuned["job"]["id"].get<std::int64_t>());
  REQUIRE(rows.ok());
  for (const auto& r : *rows) {
    INFO(r.config << ": " << r.log);
    CHECK(r.log.find("cuModuleUnload") == std::string::npos);
    // Every CUDA measurement records its conditions: timing mode, spin, clocks.
    if (r.status == ktune::CandidateStatus::ok) CHECK_THAT(r.conditions, Catch::Contains("\"timing\""));
  }
}

// The CUDA twin of test_faults' stencil case (tests/faults/cuda_stencil): TX=256 also writes one
// buffer-length past OUT. It may lose the context (an illegal address) or land in a neighbouring
// allocation; either way it alone is blamed, and every config measured after it is ok.
TEST_CASE("a CUDA candidate that writes past its output is blamed alone: the CUDA stencil's TX=256",
          "[integration][gpu][loses-context]") {
  TempDir home;
  home.write("ktuned.toml",
             "[measure]\nmin_samples = 3\nmax_samples = 20\nmax_time_s = 0.02\nmin_time_s = 0\n"
             "warmup_ms = 1\nflush_cache = false\nfinalists = 0\n");
  auto daemon = std::make_unique<DaemonProcess>(
      home.str(), std::vector<std::string>{"--config", (home.path() / "ktuned.toml").string(),
                                           "--kernel-dir", ktune::test::source_path("/tests/faults"),
                                           "--log-level", "info"});
  REQUIRE(daemon->wait_ready(k_start_timeout));
  Connection c = connect(*daemon);
  const json devices = ok_result(c, {{"op", "devices"}});
  if (!devices["cuda"].value("available", false)) {
    skip(daemon, "no CUDA device: " + devices["cuda"].value("reason", std::string("?")));
  }
  for (const std::string shape : {"NX=256,NY=32", "NX=1024,NY=256"}) {
    INFO(shape);
    const json tuned = ok_result(c, {{"op", "tune"}, {"kernel", "cuda_stencil"}, {"shape", shape},
                                     {"device", "cuda:0"}, {"retry_failed", true}, {"wait", true}},
                                 k_tune_timeout);
    CHECK(tuned["job"]["state"] == "done");
    const json job = ok_result(c, {{"op", "job"}, {"job", tuned["job"]["id"]}});
    std::size_t guilty = 0, innocent = 0;
    for (const auto& r : job["results"]) {
      INFO(r.dump());
      if (r["config"]["TX"] == 256) {
        ++guilty;
        CHECK((r["status"] == "crash" || r["status"] == "mismatch"));
        CHECK_FALSE(r["reason"].get<std::string>().empty());
      } else {
        ++innocent;
        CHECK(r["status"] == "ok");
      }
    }
    CHECK(guilty == 1);
    CHECK(innocent == 6);
    REQUIRE(job["winner"].is_object());
    CHECK(job["winner"]["config"]["TX"] != 256);
  }
}

TEST_CASE("ktuned learns the CPU from a worker, without one it still serves, and says why",
          "[integration][lanes]") {
  TempDir home;
  SECTION("a runnable worker: the CPU is a device with its fingerprint") {
    auto daemon = start(home);
    Connection c = connect(*daemon);
    const json devices = ok_result(c, {{"op", "devices"}});
    REQUIRE(devices.at("devices").size() >= 1);
    CHECK(devices["devices"][0]["name"] == "cpu");
    CHECK(devices["devices"][0]["fingerprint"].get<std::string>().size() == 32);
    CHECK(devices["devices"][0]["details"]["kind"] == "cpu");
    CHECK_FALSE(devices.contains("cpu"));
  }
  SECTION("a worker that cannot run: lookups answer, a tune on the CPU is no_device naming why") {
    home.write("ktuned.toml", "");
    DaemonProcess daemon(home.str(),
                         {"--config", (home.path() / "ktuned.toml").string(), "--kernel-dir",
                          ktune::test::source_path("/kernels_src"), "--worker",
                          (home.path() / "no-such-worker").string()});
    REQUIRE(daemon.wait_ready(k_start_timeout));
    Connection c = connect(daemon);
    const json devices = ok_result(c, {{"op", "devices"}});
    CHECK(devices.at("devices").empty());
    CHECK(devices.at("cpu").at("available") == false);
    CHECK(devices["cpu"]["code"] == "no_device");
    const json lookup = ok_result(c, {{"op", "lookup"}, {"kernel", "reduce_sum"},
                                      {"shape", "N=4096"}});
    CHECK(lookup.at("rung") == "default");
    const json tune = reply_of(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"}});
    INFO(tune.dump());
    CHECK(tune.at("error").at("code") == "no_device");
    CHECK_THAT(tune["error"]["message"].get<std::string>(),
               Catch::Contains("device cpu is unknown") && Catch::Contains("no-such-worker"));
  }
}

TEST_CASE("a big search space is enumerated off the event loop", "[integration][lanes]") {
  TempDir home;
  // reduce_sum with four more parameters: 40^4 = 2.56 M combinations, 5 admitted.
  const auto family = home.path() / "kernels" / "huge";
  std::filesystem::create_directories(family);
  std::filesystem::copy_file(ktune::test::source_path("/kernels_src/reduce_sum/kernel.cpp"),
                             family / "kernel.cpp");
  std::string values;
  for (int i = 0; i < 40; ++i) values += (i ? ", " : "") + std::to_string(i);
  home.write("kernels/huge/kernel.toml",
             "[kernel]\nname = \"huge\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\n"
             "entry = \"reduce_sum\"\nshape = [\"N\"]\ndtypes = [\"f32\"]\n"
             "[params]\nLANES = [16]\nCHUNK = [4096]\nA = [" + values + "]\nB = [" + values +
             "]\nC = [" + values + "]\nD = [" + values + "]\n"
             "[space]\nconstraints = [\"A + B + C + D < 2\"]\n"
             "[[args]]\nname = \"X\"\nkind = \"in\"\ncount = \"N\"\n"
             "[[args]]\nname = \"OUT\"\nkind = \"out\"\ncount = \"1\"\n"
             "[[args]]\nname = \"N\"\nkind = \"scalar\"\nvalue = \"N\"\n"
             "[check]\nreference = \"default\"\natol = 0.1\n"
             "[default]\nLANES = 16\nCHUNK = 4096\nA = 0\nB = 0\nC = 0\nD = 0\n");
  home.write("ktuned.toml", "[measure]\nmin_samples = 3\nmax_samples = 5\nmax_time_s = 0.01\n"
                            "min_time_s = 0\nwarmup_ms = 1\nflush_cache = false\nfinalists = 0\n");
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", (home.path() / "kernels").string()});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  Connection tuner = connect(daemon);
  Connection c = connect(daemon);

  SECTION("a tune: lookups are answered while its space is enumerated") {
    REQUIRE(tuner.send_raw(R"({"v":1,"id":7,"op":"tune","kernel":"huge","shape":"N=4096"})"
                           "\n").ok());
    // Served while the 2.56 M combinations are walked: the tune has no job yet.
    const json lookup = ok_result(c, {{"op", "lookup"}, {"kernel", "huge"}, {"shape", "N=4096"}});
    CHECK(lookup.at("rung") == "default");
    CHECK(ok_result(c, {{"op", "jobs"}}).at("jobs").empty());
    auto line = tuner.read_line(k_reply_timeout);
    REQUIRE(line.ok());
    const json tuned = json::parse(*line);
    INFO(tuned.dump());
    REQUIRE(tuned.value("ok", false));
    CHECK(tuned["result"]["total"] == 5);
    CHECK(ok_result(c, {{"op", "cancel"}, {"job", tuned["result"]["job"]}}).is_object());
  }
  SECTION("a tune-on-miss: the misses while it is planned carry no job, later ones do") {
    const json request = {{"op", "lookup"}, {"kernel", "huge"}, {"shape", "N=8192"},
                          {"tune_on_miss", true}};
    const json first = ok_result(c, request);
    CHECK_FALSE(first.contains("tune_job"));
    json later = first;
    for (int i = 0; i < 600 && !later.contains("tune_job"); ++i) {
      std::this_thread::sleep_for(100ms);
      later = ok_result(c, request);
    }
    REQUIRE(later.contains("tune_job"));
    const json jobs = ok_result(c, {{"op", "jobs"}});
    REQUIRE(jobs.at("jobs").size() == 1);  // the repeated misses joined one job
    CHECK(jobs["jobs"][0]["id"] == later["tune_job"]);
    CHECK(jobs["jobs"][0]["total"] == 5);
  }
}
