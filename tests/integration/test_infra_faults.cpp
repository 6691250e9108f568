// Whose failure is it (docs/ARCHITECTURE.md § Whose failure): a worker killed from outside and a
// compile cache that cannot be written are the host's, never a candidate's result. Real ktuned,
// real workers, a real SIGKILL, a real full tmpfs (root only).
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "db/store.hpp"
#include "tests/cuda/skip.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/process_state.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sched.h>
#include <set>
#include <sstream>
#include <string>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_tune_timeout = 180s;

const std::string k_config = R"(
[daemon]
compile_workers = 1
[limits]
bench_timeout_min_s = 20
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
)";

// The slowstart family (tests/faults/slowstart): P = 1 sleeps 1.5 s in its first call in a
// process (announcing its pid in $KTUNE_TEST_MARK_DIR), P = 2 kills itself with SIGKILL.
const std::string k_fault_kernels = ktune::test::source_path("/tests/faults");

json ok_result(Connection& c, json request, std::chrono::milliseconds timeout) {
  auto reply = c.request(std::move(request), {}, timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

std::map<int, json> results_by_p(Connection& c, std::int64_t job) {
  std::map<int, json> by_p;
  const json reply = ok_result(c, {{"op", "job"}, {"job", job}}, 10s);
  if (!reply.contains("results") || reply.at("results").is_null()) return by_p;
  for (const auto& r : reply.at("results")) by_p[r.at("config").at("P").get<int>()] = r;
  return by_p;
}

} // namespace

TEST_CASE("a worker killed from outside is the host's doing: the candidate runs again and is not "
          "quarantined",
          "[integration][faults]") {
  TempDir home, marks;
  home.write("ktuned.toml", k_config);
  ::setenv("KTUNE_TEST_MARK_DIR", marks.str().c_str(), 1);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", k_fault_kernels});
  ::unsetenv("KTUNE_TEST_MARK_DIR");
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());

  // The administrator (or the OOM killer) kills the bench worker while P = 1 runs.
  std::thread killer([&] {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (const auto& entry : fs::directory_iterator(marks.path())) {
        ::kill(std::stoi(entry.path().filename().string()), SIGKILL);
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  const json done = ok_result(*conn, {{"op", "tune"}, {"kernel", "slowstart"}, {"shape", "N=1024"},
                                      {"wait", true}},
                              k_tune_timeout);
  killer.join();
  INFO(done.dump());
  CHECK(done.at("job").at("state") == "done");
  auto by_p = results_by_p(*conn, done.at("job").at("id").get<std::int64_t>());
  REQUIRE(by_p.size() == 3);
  // The killed candidate was measured in a fresh worker: ok, not a crash.
  CHECK(by_p[1].at("status") == "ok");
  // The candidate that kills itself died the same way twice: that one is its own crash.
  CHECK(by_p[2].at("status") == "crash");
  CHECK_THAT(by_p[2].at("reason").get<std::string>(), Catch::Contains("reproduces"));

  // Nothing of P = 1 is held against it: a later job of the same key reuses its good row, and
  // only P = 2 is quarantined.
  auto store = ktune::Store::open(home.str() + "/ktune.db", ktune::OpenMode::read_only);
  REQUIRE(store.ok());
  auto job = store->get_job(done.at("job").at("id").get<std::int64_t>());
  REQUIRE(job.ok());
  REQUIRE(job->has_value());
  auto quarantined =
      store->quarantined_configs("slowstart", (*job)->source_hash, (*job)->fingerprint);
  REQUIRE(quarantined.ok());
  CHECK(quarantined->size() == 1);
  CHECK(quarantined->count(R"({"P":2})") == 1);
}

TEST_CASE("a compile cache on a full disk fails the job with the cause and records no candidate",
          "[integration][faults]") {
  if (::geteuid() != 0) ktune::test::skip_test("mounting a small tmpfs needs root");
  TempDir home;
  const fs::path cache = home.path() / "cache";
  fs::create_directories(cache);
  if (::mount("tmpfs", cache.c_str(), "tmpfs", 0, "size=1m,mode=0700") != 0) {
    ktune::test::skip_test(std::string("cannot mount a tmpfs: ") + std::strerror(errno));
  }
  struct Unmount {
    fs::path dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{cache};
  {  // fill it
    const int fd = ::open((cache / "filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    std::vector<char> block(4096, 0);
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  }
  home.write("ktuned.toml", k_config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", k_fault_kernels, "--cache-dir",
                                    cache.string()});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  const json request = {{"op", "tune"}, {"kernel", "slowstart"}, {"shape", "N=1024"},
                        {"wait", true}};
  const json failed = ok_result(*conn, request, k_tune_timeout);
  INFO(failed.dump());
  CHECK(failed.at("job").at("state") == "failed");
  const std::string error = failed.at("job").at("error").get<std::string>();
  CHECK_THAT(error, Catch::Contains("the host failed"));
  CHECK_THAT(error, Catch::Contains("No space left on device"));
  // No candidate is blamed: nothing recorded, nothing quarantined.
  CHECK(results_by_p(*conn, failed.at("job").at("id").get<std::int64_t>()).empty());

  // Space back: the same tune runs every config (none is reused as a failure).
  fs::remove(cache / "filler");
  const json done = ok_result(*conn, request, k_tune_timeout);
  INFO(done.dump());
  CHECK(done.at("job").at("state") == "done");
  auto by_p = results_by_p(*conn, done.at("job").at("id").get<std::int64_t>());
  CHECK(by_p[1].at("status") == "ok");
  CHECK(by_p[3].at("status") == "ok");
}

namespace {

struct Proc {
  pid_t pid = 0, ppid = 0;
  char state = '?';
  std::string comm;
};

// Every process's pid, parent, state and command name, from /proc.
std::vector<Proc> processes() {
  std::vector<Proc> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string text;
    try {
      std::ifstream in(entry.path() / "stat");
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::exception&) {
      continue;  // it exited between the listing and the read (ESRCH)
    }
    const auto open = text.find('(');
    const auto close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 >= text.size()) continue;
    Proc p;
    p.pid = std::stoi(name);
    p.comm = text.substr(open + 1, close - open - 1);
    std::istringstream rest(text.substr(close + 2));
    rest >> p.state >> p.ppid;
    out.push_back(p);
  }
  return out;
}

// The living (not zombie) descendants of `root`.
std::vector<Proc> descendants(pid_t root) {
  const auto all = processes();
  std::set<pid_t> family{root};
  std::vector<Proc> out;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& p : all) {
      if (family.count(p.ppid) != 0 && family.insert(p.pid).second) {
        grew = true;
        if (p.state != 'Z') out.push_back(p);
      }
    }
  }
  return out;
}

bool alive(pid_t pid) {
  for (const auto& p : processes()) {
    if (p.pid == pid) return p.state != 'Z';
  }
  return false;
}

// Those of `family` still alive (not zombies) 10 s after ktuned's death, named ("" when none).
// Reaps the children this process inherits meanwhile, if it is their reaper.
std::string survivors(const std::vector<Proc>& family) {
  std::string names;
  const auto gone_by = std::chrono::steady_clock::now() + 10s;
  do {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {}
    names.clear();
    for (const auto& p : family) {
      if (alive(p.pid)) names += p.comm + " (pid " + std::to_string(p.pid) + ") ";
    }
    if (!names.empty()) std::this_thread::sleep_for(50ms);
  } while (!names.empty() && std::chrono::steady_clock::now() < gone_by);
  return names;
}

} // namespace

TEST_CASE("kill -9 of ktuned during a compile leaves no compiler or worker behind",
          "[integration][faults]") {
  TempDir home;
  home.write("ktuned.toml", k_config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/kernels_src")});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  (void)ok_result(*conn, {{"op", "tune"}, {"kernel", "gemm"}, {"shape", "M=64,N=64,K=64"},
                          {"budget", 20}},
                  10s);
  // Wait until a compiler runs under one of its workers, then kill the daemon outright.
  std::vector<Proc> family;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  bool compiling = false;
  while (!compiling && std::chrono::steady_clock::now() < deadline) {
    family = descendants(daemon.pid());
    for (const auto& p : family) compiling = compiling || p.comm == "cc1plus";
    if (!compiling) std::this_thread::sleep_for(5ms);
  }
  REQUIRE(compiling);
  daemon.signal(SIGKILL);
  REQUIRE(daemon.wait_exit(10s).has_value());
  const std::string left = survivors(family);
  INFO("still running: " << left);
  CHECK(left.empty());
}

// A borrowed compile stopped while the cpu lane measures (daemon/worker_pool.hpp) holds its
// SIGTERM from PR_SET_PDEATHSIG pending while stopped. When ktuned dies, the kernel continues an
// orphaned stopped group only if the process that inherits it is in another session: under a
// reaper in ktuned's own session (a container's init, a CI runner, here this test made a child
// subreaper) nothing would ever continue it, and the stopped worker and compiler would live on,
// holding ktuned's stdout. ktuned's stop guard kills them instead.
TEST_CASE("kill -9 of ktuned while a borrowed compile is stopped leaves nothing behind, even under "
          "a reaper in its own session",
          "[integration][faults]") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) {
    ktune::test::skip_test("the bench CPU is lent to compiles only with two CPUs or more");
  }
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  struct NoLongerReaper {
    ~NoLongerReaper() {
      // Whatever is left (this test failed) is killed, so that it holds no pipe of ctest's.
      for (const auto& p : processes()) {
        if (p.ppid == ::getpid()) ::kill(p.pid, SIGKILL);
      }
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {}
      ::prctl(PR_SET_CHILD_SUBREAPER, 0);
    }
  } no_longer_reaper;

  TempDir home;
  // Every measurement takes half a second (no candidate is pruned or raced out early): long
  // stops of the borrowed compile.
  home.write("ktuned.toml", R"(
[daemon]
compile_workers = 1
[measure]
min_samples = 3
min_time_s = 0.5
max_time_s = 1
prune_factor = 1000
race_margin = 1000
warmup_ms = 0
flush_cache = false
)");
  bool stopped_at_kill = false;
  for (int attempt = 0; attempt < 4 && !stopped_at_kill; ++attempt) {
    DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                      "--kernel-dir", ktune::test::source_path("/kernels_src")});
    REQUIRE(daemon.wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon.socket());
    REQUIRE(conn.ok());
    (void)ok_result(*conn, {{"op", "tune"}, {"kernel", "gemm"},
                            {"shape", "M=64,N=64,K=" + std::to_string(64 + attempt)},
                            {"budget", 40}},
                    10s);
    // Wait until one of its processes is stopped, then kill the daemon outright.
    std::vector<Proc> family;
    pid_t stopped = 0;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (stopped == 0 && std::chrono::steady_clock::now() < deadline) {
      family = descendants(daemon.pid());
      for (const auto& p : family) {
        if (p.state == 'T') stopped = p.pid;
      }
      if (stopped == 0) std::this_thread::sleep_for(2ms);
    }
    // Stops last half a second: one seen is still stopped a few microseconds later, at the kill.
    if (stopped != 0 && ktune::test::process_state(stopped) == 'T') stopped_at_kill = true;
    daemon.signal(SIGKILL);
    REQUIRE(daemon.wait_exit(10s).has_value());
    const std::string left = survivors(family);
    INFO("attempt " << attempt << ": still there: " << left);
    CHECK(left.empty());
  }
  // At least one kill landed while the compile was stopped (else this test proved nothing).
  CHECK(stopped_at_kill);
}

TEST_CASE("a candidate that floods stderr keeps the daemon log under its cap",
          "[integration][faults]") {
  TempDir home, kernels;
  kernels.write("noisy/kernel.toml", R"([kernel]
name = "noisy"
language = "cpp"
source = "kernel.cpp"
entry = "noisy"
shape = ["N"]
dtypes = ["f32"]
[params]
P = [1, 2]
[[args]]
name = "OUT"
kind = "out"
count = "N"
[[args]]
name = "N"
kind = "scalar"
value = "N"
[default]
P = 1
)");
  // Every call writes 2 MB to stderr: tens of MB over a tune.
  kernels.write("noisy/kernel.cpp", R"(#include <cstdint>
#include <cstdio>
#include <vector>
extern "C" void noisy(void** args) {
  float* out = static_cast<float*>(args[0]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[1]);
  static std::vector<char> line(1 << 20, 'x');
  for (int i = 0; i < 2; ++i) std::fwrite(line.data(), 1, line.size(), stderr);
  for (std::int64_t i = 0; i < n; ++i) out[i] = float(i % 7) * P;
}
)");
  std::string config = k_config;
  config.replace(config.find("[daemon]\n"), 9, "[daemon]\nlog_max_mb = 0.25\nlog_keep = 1\n");
  home.write("ktuned.toml", config);
  const std::string log = home.str() + "/ktuned.log";
  {
    DaemonProcess daemon(home.str(),
                         {"--config", (home.path() / "ktuned.toml").string(), "--kernel-dir",
                          kernels.str()},
                         log);
    REQUIRE(daemon.wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon.socket());
    REQUIRE(conn.ok());
    const json done = ok_result(*conn, {{"op", "tune"}, {"kernel", "noisy"}, {"shape", "N=64"},
                                        {"wait", true}},
                                k_tune_timeout);
    CHECK(done.at("job").at("state") == "done");
  }
  const auto size = fs::file_size(log);
  const auto old = fs::exists(log + ".1") ? fs::file_size(log + ".1") : 0;
  INFO("log " << size << " bytes, log.1 " << old << " bytes");
  CHECK(size <= 256 * 1024 + 64 * 1024);
  CHECK(old <= 256 * 1024 + 64 * 1024);
  CHECK_FALSE(fs::exists(log + ".2"));  // log_keep = 1
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ifstream in_old(log + ".1");
  text.append((std::istreambuf_iterator<char>(in_old)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("more bytes to stderr than the log keeps"));
}

TEST_CASE("a device another ktuned measures on is waited for, never measured at the same time",
          "[integration][faults]") {
  TempDir home, locks;
  std::string config = k_config;
  config.replace(config.find("[daemon]\n"), 9, "[daemon]\nlock_dir = \"" + locks.str() + "\"\n");
  home.write("ktuned.toml", config);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/kernels_src")});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());

  // Another instance (this test) measures on every CPU device for 2 s after the first result.
  std::vector<int> held;
  std::atomic<int> events_while_held{0};
  std::atomic<bool> holding{false};
  std::thread releaser;
  auto reply = conn->request(
      {{"op", "tune"}, {"kernel", "gemm"}, {"shape", "M=32,N=32,K=32"}, {"strategy", "random"},
       {"budget", 6}, {"seed", 5}, {"wait", true}},
      [&](const json& event) {
        if (event.value("event", "") != "progress") return;
        if (holding) ++events_while_held;
        if (releaser.joinable()) return;
        const long cpus = ::sysconf(_SC_NPROCESSORS_CONF);
        std::vector<std::string> names = {"cpu"};
        for (long cpu = 0; cpu < cpus; ++cpu) names.push_back("cpu" + std::to_string(cpu));
        for (const auto& name : names) {
          const std::string path = locks.str() + "/ktune-measure-" + name + ".lock";
          const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
          REQUIRE(fd >= 0);
          REQUIRE(::flock(fd, LOCK_EX) == 0);  // waits for a measurement in progress
          held.push_back(fd);
        }
        holding = true;
        releaser = std::thread([&] {
          std::this_thread::sleep_for(2500ms);
          holding = false;
          for (const int fd : held) ::close(fd);
        });
      },
      k_tune_timeout);
  if (releaser.joinable()) releaser.join();
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  const json& done = reply->at("result");
  CHECK(done.at("job").at("state") == "done");
  // At most the measurement that was under way when the locks were taken ended meanwhile.
  CHECK(events_while_held <= 1);
  // Waiting for the device is nobody's failure.
  const json job = ok_result(*conn, {{"op", "job"}, {"job", done.at("job").at("id")}}, 10s);
  for (const auto& r : job.at("results")) {
    INFO(r.dump());
    CHECK(r.at("status") == "ok");
  }
}

TEST_CASE("two ktuned on one machine measure on different CPUs", "[integration][faults]") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  if (CPU_COUNT(&allowed) < 2) {
    WARN("SKIPPED: one CPU allowed; the bench worker is not pinned");
    return;
  }
  TempDir locks, home_a, home_b;
  auto start = [&](TempDir& home) {
    std::string config = k_config;
    config.replace(config.find("[daemon]\n"), 9, "[daemon]\nlock_dir = \"" + locks.str() + "\"\n");
    home.write("ktuned.toml", config);
    return std::make_unique<DaemonProcess>(
        home.str(), std::vector<std::string>{"--config", (home.path() / "ktuned.toml").string(),
                                             "--kernel-dir", ktune::test::source_path("/kernels_src")});
  };
  auto cpu_lane = [](DaemonProcess& daemon) {
    auto conn = Connection::connect(daemon.socket());
    REQUIRE(conn.ok());
    const json stats = ok_result(*conn, {{"op", "stats"}}, 10s);
    for (const auto& lane : stats.at("lanes")) {
      if (lane.at("device") == "cpu") return lane;
    }
    FAIL("no cpu lane in " << stats.dump());
    return json();
  };
  auto a = start(home_a);
  REQUIRE(a->wait_ready(k_start_timeout));
  const json lane_a = cpu_lane(*a);
  auto b = start(home_b);
  REQUIRE(b->wait_ready(k_start_timeout));
  const json lane_b = cpu_lane(*b);
  INFO("first " << lane_a.dump() << ", second " << lane_b.dump());
  CHECK(lane_a.at("bench_cpu_claimed") == true);
  CHECK(lane_b.at("bench_cpu_claimed") == true);
  REQUIRE(lane_a.at("bench_cpu").is_number_integer());
  REQUIRE(lane_b.at("bench_cpu").is_number_integer());
  CHECK(lane_a.at("bench_cpu") != lane_b.at("bench_cpu"));
  for (const json& lane : {lane_a, lane_b}) {
    CHECK(fs::exists(locks.path() / ("ktune-cpu" + std::to_string(lane.at("bench_cpu").get<int>()) + ".claim")));
  }

  // The claim is released with its daemon: a third instance started after the first stops
  // takes the first one's CPU.
  a->signal(SIGTERM);
  REQUIRE(a->wait_exit(30s).has_value());
  TempDir home_c;
  auto c = start(home_c);
  REQUIRE(c->wait_ready(k_start_timeout));
  const json lane_c = cpu_lane(*c);
  INFO("third " << lane_c.dump());
  CHECK(lane_c.at("bench_cpu_claimed") == true);
  CHECK(lane_c.at("bench_cpu") == lane_a.at("bench_cpu"));
}
