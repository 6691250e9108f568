// The real ktune-worker binary, spawned over a socketpair the way the daemon starts it.
#include "tests/support/paths.hpp"
#include <catch2/catch.hpp>

#include "bench/runner.hpp"
#include "compiler/compiler.hpp"
#include "compiler/host_compiler.hpp"
#include "jobs/artifact_cache.hpp"
#include "jobs/ab_job.hpp"
#include "jobs/kernel_registry.hpp"
#include "core/hash.hpp"
#include "tests/support/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <poll.h>
#include <sched.h>
#include <set>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string k_worker = ktune::test::bin_dir() + "/ktune-worker";
constexpr int k_timeout_ms = 60'000;

// One ktune-worker child and this process's end of its socketpair. Kills the child if it is
// still running when the fixture goes away.
class WorkerProcess {
public:
  explicit WorkerProcess(std::vector<std::string> args)
      : WorkerProcess(k_worker, std::move(args)) {}

  // Runs `program` with `args` ({fd} replaced) instead of ktune-worker itself.
  WorkerProcess(const std::string& program, std::vector<std::string> args) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    REQUIRE(::fcntl(fds[0], F_SETFD, FD_CLOEXEC) == 0);
    m_fd = fds[0];
    for (auto& arg : args) {
      for (auto at = arg.find("{fd}"); at != std::string::npos; at = arg.find("{fd}")) {
        arg.replace(at, 4, std::to_string(fds[1]));
      }
    }
    args.insert(args.begin(), program);
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawnp(&m_pid, program.c_str(), nullptr, nullptr, argv.data(), environ);
    ::close(fds[1]);
    REQUIRE(rc == 0);
  }

  static WorkerProcess with_role(const std::string& role) {
    return WorkerProcess({"--fd", "{fd}", "--role", role});
  }

  WorkerProcess(WorkerProcess&& other) noexcept
      : m_pid(std::exchange(other.m_pid, -1)), m_fd(std::exchange(other.m_fd, -1)),
        m_buffer(std::move(other.m_buffer)) {}
  WorkerProcess& operator=(WorkerProcess&&) = delete;

  ~WorkerProcess() {
    if (m_fd >= 0) ::close(m_fd);
    if (m_pid > 0) {
      ::kill(m_pid, SIGKILL);
      int status = 0;
      ::waitpid(m_pid, &status, 0);
    }
  }

  [[nodiscard]] pid_t pid() const { return m_pid; }

  void send_line(const std::string& line) {
    const std::string data = line + "\n";
    std::size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(m_fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      REQUIRE(n > 0);
      sent += static_cast<std::size_t>(n);
    }
  }

  // The next line from the worker; fails the test on timeout or end of stream.
  std::string read_line() {
    for (;;) {
      const auto newline = m_buffer.find('\n');
      if (newline != std::string::npos) {
        std::string line = m_buffer.substr(0, newline);
        m_buffer.erase(0, newline + 1);
        return line;
      }
      pollfd p{m_fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, k_timeout_ms);
      REQUIRE(ready == 1);
      char chunk[4096];
      const ssize_t n = ::read(m_fd, chunk, sizeof chunk);
      REQUIRE(n > 0);
      m_buffer.append(chunk, static_cast<std::size_t>(n));
    }
  }

  // True when the worker's end closes (no more data) within `timeout_ms`.
  bool closes_within(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{m_fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) != 1) return false;
      char chunk[4096];
      const ssize_t n = ::read(m_fd, chunk, sizeof chunk);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
      m_buffer.append(chunk, static_cast<std::size_t>(n));
    }
  }

  json read_json() {
    const std::string line = read_line();
    INFO(line);
    json message = json::parse(line, nullptr, false);
    REQUIRE_FALSE(message.is_discarded());
    return message;
  }

  json request(const json& message) {
    send_line(message.dump());
    return read_json();
  }

  void close_socket() {
    ::close(m_fd);
    m_fd = -1;
  }

  // Waits for the child to exit; returns its wait status.
  int wait_exit() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(k_timeout_ms);
    int status = 0;
    for (;;) {
      const pid_t done = ::waitpid(m_pid, &status, WNOHANG);
      if (done == m_pid) break;
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    m_pid = -1;
    return status;
  }

private:
  pid_t m_pid = -1;
  int m_fd = -1;
  std::string m_buffer;
};

ktune::CompileJob tiny_job(const ktune::test::TempDir& dir, const std::string& body) {
  dir.write("tiny.cpp", "extern \"C\" void tiny(void** args) { " + body + " }\n");
  ktune::CompileJob job;
  job.kernel = "tiny";
  job.language = "cpp";
  job.source_path = (dir.path() / "tiny.cpp").string();
  job.dtype = "f32";
  job.defines = {{"VALUE", 3}};
  job.source_hash = ktune::hash_hex(body);
  job.cache_dir = (dir.path() / "cache").string();
  return job;
}

} // namespace

TEST_CASE("A compile worker announces itself and compiles", "[worker]") {
  ktune::test::TempDir dir;
  auto worker = WorkerProcess::with_role("compile");
  const json ready = worker.read_json();
  CHECK(ready["ready"] == true);
  CHECK(ready["role"] == "compile");
  CHECK(ready["pid"] == worker.pid());

  const auto job = tiny_job(dir, "*static_cast<KTUNE_DTYPE*>(args[0]) = VALUE;");
  json reply = worker.request({{"id", 1}, {"op", "compile"}, {"job", job.to_json()}});
  INFO(reply.dump());
  CHECK(reply["id"] == 1);
  REQUIRE(reply["ok"] == true);
  auto outcome = ktune::CompileOutcome::from_json(reply["outcome"]);
  REQUIRE(outcome.ok());
  CHECK(outcome->status == ktune::CandidateStatus::ok);
  CHECK_FALSE(outcome->cached);
  CHECK(fs::is_regular_file(outcome->artifact_path));

  SECTION("the same job again is a cache hit") {
    reply = worker.request({{"id", "two"}, {"op", "compile"}, {"job", job.to_json()}});
    CHECK(reply["id"] == "two");
    auto again = ktune::CompileOutcome::from_json(reply["outcome"]);
    REQUIRE(again.ok());
    CHECK(again->cached);
    CHECK(again->artifact_path == outcome->artifact_path);
  }

  SECTION("a compile error is an ok reply carrying the status and the log") {
    const auto broken = tiny_job(dir, "not_declared();");
    reply = worker.request({{"id", 2}, {"op", "compile"}, {"job", broken.to_json()}});
    REQUIRE(reply["ok"] == true);
    auto failed = ktune::CompileOutcome::from_json(reply["outcome"]);
    REQUIRE(failed.ok());
    CHECK(failed->status == ktune::CandidateStatus::compile_error);
    CHECK_THAT(failed->log, Catch::Contains("not_declared"));
  }

  SECTION("exit ends the worker with status 0") {
    worker.send_line(R"({"op":"exit"})");
    const int status = worker.wait_exit();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  SECTION("end of input ends the worker with status 0") {
    worker.close_socket();
    const int status = worker.wait_exit();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("A compile worker compiles a batch of configs in one request", "[worker][batch]") {
  ktune::test::TempDir dir;
  auto worker = WorkerProcess::with_role("compile");
  (void)worker.read_json();
  auto job = tiny_job(dir, "*static_cast<KTUNE_DTYPE*>(args[0]) = VALUE;");
  job.entry = "tiny";
  json jobs = json::array();
  for (const std::int64_t value : {3, 4, 5}) {
    job.defines = {{"VALUE", value}};
    jobs.push_back(job.to_json());
  }
  const json reply = worker.request({{"id", 1}, {"op", "compile_batch"}, {"jobs", jobs}});
  INFO(reply.dump());
  CHECK(reply["id"] == 1);
  REQUIRE(reply["ok"] == true);
  const json& outcomes = reply["outcome"]["outcomes"];
  REQUIRE(outcomes.size() == 3);
  std::set<std::string> symbols;
  for (const auto& item : outcomes) {
    auto outcome = ktune::CompileOutcome::from_json(item);
    REQUIRE(outcome.ok());
    CHECK(outcome->status == ktune::CandidateStatus::ok);
    CHECK(outcome->batch_size == 3);
    CHECK(fs::is_regular_file(outcome->artifact_path));
    symbols.insert(outcome->entry_symbol);
  }
  CHECK(symbols.size() == 3);

  SECTION("bad input gets compile's error codes") {
    json bad = worker.request({{"id", 2}, {"op", "compile_batch"}});
    CHECK(bad["error"]["code"] == "bad_request");
    CHECK_THAT(bad["error"]["message"].get<std::string>(), Catch::Contains("'jobs'"));
    bad = worker.request({{"id", 3}, {"op", "compile_batch"}, {"jobs", json::array()}});
    CHECK(bad["error"]["code"] == "bad_request");
    json broken = jobs;
    broken[1].erase("source_path");
    bad = worker.request({{"id", 4}, {"op", "compile_batch"}, {"jobs", broken}});
    CHECK(bad["error"]["code"] == "bad_request");
    CHECK_THAT(bad["error"]["message"].get<std::string>(),
               Catch::Contains("jobs[1]") && Catch::Contains("'source_path'"));
  }

  SECTION("a bench worker refuses it") {
    auto bench = WorkerProcess::with_role("bench");
    (void)bench.read_json();
    const json refused = bench.request({{"id", 5}, {"op", "compile_batch"}, {"jobs", jobs}});
    CHECK(refused["error"]["code"] == "bad_request");
    CHECK_THAT(refused["error"]["message"].get<std::string>(), Catch::Contains("compile worker"));
  }
}

TEST_CASE("A worker answers bad requests with errors and keeps serving", "[worker]") {
  ktune::test::TempDir dir;
  auto worker = WorkerProcess::with_role("compile");
  (void)worker.read_json();

  SECTION("not JSON") {
    worker.send_line("this is not json");
    const json reply = worker.read_json();
    CHECK(reply["ok"] == false);
    CHECK(reply["id"].is_null());
    CHECK(reply["error"]["code"] == "bad_request");
  }

  SECTION("not an object") {
    const json reply = worker.request(json::array({1, 2}));
    CHECK(reply["error"]["code"] == "bad_request");
  }

  SECTION("an id that is not a scalar") {
    const json reply = worker.request({{"id", {1}}, {"op", "compile"}});
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("'id'"));
  }

  SECTION("no op") {
    const json reply = worker.request({{"id", 5}});
    CHECK(reply["id"] == 5);
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("'op'"));
  }

  SECTION("an unknown op") {
    const json reply = worker.request({{"id", 6}, {"op", "frobnicate"}});
    CHECK(reply["id"] == 6);
    CHECK(reply["error"]["code"] == "unknown_op");
  }

  SECTION("no job") {
    const json reply = worker.request({{"id", 7}, {"op", "compile"}});
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("'job'"));
  }

  SECTION("a job missing a field") {
    json job = tiny_job(dir, "").to_json();
    job.erase("source_path");
    const json reply = worker.request({{"id", 8}, {"op", "compile"}, {"job", job}});
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("'source_path'"));
  }

  SECTION("a bench op sent to a compile worker") {
    const json reply = worker.request({{"id", 9}, {"op", "bench"}, {"job", json::object()}});
    CHECK(reply["id"] == 9);
    CHECK(reply["ok"] == false);
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("compile worker"));
  }

  // Whatever came before, the worker still compiles.
  const auto job = tiny_job(dir, "");
  const json reply = worker.request({{"id", 10}, {"op", "compile"}, {"job", job.to_json()}});
  CHECK(reply["id"] == 10);
  CHECK(reply["ok"] == true);
}

TEST_CASE("A bench worker measures a compiled candidate", "[worker]") {
  ktune::test::TempDir dir;
  auto kernel =
      ktune::load_kernel(ktune::test::source_dir() + "/kernels_src/reduce_sum/kernel.toml");
  REQUIRE(kernel.ok());
  auto compile_job =
      ktune::make_compile_job(*kernel, kernel->spec.default_config, "f32", dir.str());
  REQUIRE(compile_job.ok());
  ktune::HostCompiler compiler;
  const auto compiled = compiler.compile(*compile_job);
  INFO(compiled.log);
  REQUIRE(compiled.status == ktune::CandidateStatus::ok);

  ktune::MeasureSettings settings;
  settings.min_samples = 3;
  settings.max_samples = 5;
  settings.min_time_s = 0;
  settings.max_time_s = 0.05;
  settings.warmup_ms = 1;
  settings.flush_cache = false;
  auto shape = ktune::Shape::parse("N=4096");
  REQUIRE(shape.ok());
  auto bench_job = ktune::make_bench_job(kernel->spec, *shape, kernel->spec.default_config, "f32",
                                         compiled.artifact_path, compiled.artifact_path, settings);
  REQUIRE(bench_job.ok());
  ktune::use_compiled_entries(*bench_job, compiled.entry_symbol, compiled.entry_symbol);

  auto worker = WorkerProcess::with_role("bench");
  const json ready = worker.read_json();
  CHECK(ready["role"] == "bench");

  SECTION("a bench request gives an outcome with statistics") {
    const json reply = worker.request({{"id", 1}, {"op", "bench"}, {"job", bench_job->to_json()}});
    INFO(reply.dump());
    REQUIRE(reply["ok"] == true);
    auto outcome = ktune::BenchOutcome::from_json(reply["outcome"]);
    REQUIRE(outcome.ok());
    CHECK(outcome->status == ktune::CandidateStatus::ok);
    CHECK(outcome->stats.n >= 3);
    CHECK(outcome->stats.median_ms > 0);
  }

  SECTION("an artifact that no longer matches its record is not loaded: the host's fault") {
    const std::string bytes = [&] {
      std::ifstream in(compiled.artifact_path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    {
      // Truncated as a power loss leaves it: loading it would SIGBUS the worker.
      std::ofstream out(compiled.artifact_path, std::ios::binary | std::ios::trunc);
      out << bytes.substr(0, bytes.size() / 2);
    }
    const json reply = worker.request({{"id", 4}, {"op", "bench"}, {"job", bench_job->to_json()}});
    INFO(reply.dump());
    REQUIRE(reply["ok"] == true);
    auto outcome = ktune::BenchOutcome::from_json(reply["outcome"]);
    REQUIRE(outcome.ok());
    CHECK_THAT(outcome->infra, Catch::Contains("is not what was compiled"));
    CHECK(outcome->infra_artifact == compiled.artifact_path);
    CHECK(outcome->stats.n == 0);
    // The worker is still there and measures once the artifact is sound again.
    {
      std::ofstream out(compiled.artifact_path, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    const json again = worker.request({{"id", 5}, {"op", "bench"}, {"job", bench_job->to_json()}});
    auto measured = ktune::BenchOutcome::from_json(again["outcome"]);
    REQUIRE(measured.ok());
    CHECK(measured->infra.empty());
    CHECK(measured->status == ktune::CandidateStatus::ok);
  }

  SECTION("a malformed bench job is a bad request") {
    json job = bench_job->to_json();
    job.erase("artifact_path");
    const json reply = worker.request({{"id", 2}, {"op", "bench"}, {"job", job}});
    CHECK(reply["error"]["code"] == "bad_request");
  }

  SECTION("a compile op sent to a bench worker") {
    const json reply =
        worker.request({{"id", 3}, {"op", "compile"}, {"job", compile_job->to_json()}});
    CHECK(reply["ok"] == false);
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("bench worker"));
  }
}

TEST_CASE("A bench worker measures two candidates in interleaved rounds (bench_ab)", "[worker][ab]") {
  ktune::test::TempDir dir;
  auto kernel =
      ktune::load_kernel(ktune::test::source_dir() + "/kernels_src/reduce_sum/kernel.toml");
  REQUIRE(kernel.ok());
  ktune::HostCompiler compiler;
  auto compiled_job = [&](const ktune::Config& config) {
    auto compile_job = ktune::make_compile_job(*kernel, config, "f32", dir.str());
    REQUIRE(compile_job.ok());
    const auto compiled = compiler.compile(*compile_job);
    INFO(compiled.log);
    REQUIRE(compiled.status == ktune::CandidateStatus::ok);
    ktune::MeasureSettings settings;
    settings.min_samples = 3;
    settings.max_samples = 5;
    settings.min_time_s = 0;
    settings.max_time_s = 0.02;
    settings.warmup_ms = 1;
    settings.flush_cache = false;
    auto shape = ktune::Shape::parse("N=4096");
    REQUIRE(shape.ok());
    auto bench_job = ktune::make_bench_job(kernel->spec, *shape, config, "f32",
                                           compiled.artifact_path, "", settings);
    REQUIRE(bench_job.ok());
    ktune::use_compiled_entries(*bench_job, compiled.entry_symbol, "");
    return *bench_job;
  };
  ktune::AbRequest request;
  request.a = compiled_job(kernel->spec.default_config);
  request.b = request.a;
  request.rounds = 4;

  auto worker = WorkerProcess::with_role("bench");
  CHECK(worker.read_json()["role"] == "bench");

  SECTION("every round measures both, the order random and balanced") {
    request.rounds = 16;
    request.seed = 3;
    json message{{"id", 1}, {"op", "bench_ab"}, {"job", request.to_json()}};
    const json reply = worker.request(message);
    INFO(reply.dump());
    REQUIRE(reply["ok"] == true);
    auto outcome = ktune::AbOutcome::from_json(reply["outcome"]);
    REQUIRE(outcome.ok());
    CHECK(outcome->status == ktune::CandidateStatus::ok);
    REQUIRE(outcome->rounds.size() == 16);
    std::size_t pairs_b_first = 0;
    for (std::size_t r = 0; r < 16; ++r) {
      CHECK(outcome->rounds[r].a.median_ms > 0);
      CHECK(outcome->rounds[r].b.median_ms > 0);
      CHECK(outcome->rounds[r].b.samples >= 3);
      if (r % 2 == 1) {
        CHECK(outcome->rounds[r].a_first != outcome->rounds[r - 1].a_first);
        if (!outcome->rounds[r - 1].a_first) ++pairs_b_first;
      }
    }
    // Not the fixed A B | B A order: some pairs start with B, some with A.
    CHECK(pairs_b_first > 0);
    CHECK(pairs_b_first < 8);
    // A CPU A/B is its worker's last: the next pass is measured in another process.
    CHECK(reply.value("exiting", false) == true);
    CHECK(worker.closes_within(5000));
    CHECK(worker.wait_exit() == 0);
    // The same seed, the same order.
    auto next = WorkerProcess::with_role("bench");
    CHECK(next.read_json()["role"] == "bench");
    const json again = next.request({{"id", 3}, {"op", "bench_ab"}, {"job", request.to_json()}});
    REQUIRE(again["ok"] == true);
    auto repeated = ktune::AbOutcome::from_json(again["outcome"]);
    REQUIRE(repeated.ok());
    REQUIRE(repeated->rounds.size() == 16);
    for (std::size_t r = 0; r < 16; ++r) CHECK(repeated->rounds[r].a_first == outcome->rounds[r].a_first);
  }

  SECTION("a side that fails ends the A/B with its status, side and reason") {
    request.b.artifact_path = (dir.path() / "gone.so").string();
    json message{{"id", 2}, {"op", "bench_ab"}, {"job", request.to_json()}};
    const json reply = worker.request(message);
    INFO(reply.dump());
    REQUIRE(reply["ok"] == true);
    auto outcome = ktune::AbOutcome::from_json(reply["outcome"]);
    REQUIRE(outcome.ok());
    CHECK(outcome->status == ktune::CandidateStatus::runtime_error);
    CHECK(outcome->failed_side == "b");
    CHECK_THAT(outcome->reason, Catch::Contains("gone.so"));
    CHECK(outcome->rounds.empty());
  }

  SECTION("bad rounds and a missing side are bad requests naming the field") {
    json message{{"id", 3}, {"op", "bench_ab"}, {"job", request.to_json()}};
    message["job"]["rounds"] = 0;
    json reply = worker.request(message);
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("'rounds'"));
    message["job"].erase("rounds");
    message["job"].erase("b");
    reply = worker.request(message);
    CHECK(reply["error"]["code"] == "bad_request");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("'b'"));
  }
}

TEST_CASE("ktune-worker rejects a bad command line", "[worker]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--role", "compile"},
           {"--fd", "{fd}"},
           {"--fd", "{fd}", "--role", "linker"},
           {"--fd", "x", "--role", "compile"},
           {"--fd", "{fd}", "--role", "compile", "--bogus"}}) {
    WorkerProcess worker(args);
    const int status = worker.wait_exit();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
  }
}

TEST_CASE("ktune-worker pins itself to a CPU on request", "[worker]") {
  // The last CPU this process may run on (CPU 0 may be outside a restricted cpuset).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  int cpu = -1;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &allowed)) cpu = i;
  }
  REQUIRE(cpu >= 0);

  WorkerProcess worker({"--fd", "{fd}", "--role", "compile", "--cpu", std::to_string(cpu)});
  const json ready = worker.read_json();
  CHECK(ready["ready"] == true);
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(worker.pid(), sizeof set, &set) == 0);
  CHECK(CPU_COUNT(&set) == 1);
  CHECK(CPU_ISSET(cpu, &set));
}

TEST_CASE("A worker dies with the process that started it", "[worker]") {
  // sh starts the worker and waits; once the worker is ready, sh is killed. PR_SET_PDEATHSIG
  // must take the worker down too, which closes its end of the socket.
  WorkerProcess parent("sh", {"-c", "\"$0\" --fd {fd} --role compile & wait", k_worker});
  const json ready = parent.read_json();
  REQUIRE(ready["ready"] == true);
  REQUIRE(ready["pid"] != parent.pid());
  ::kill(parent.pid(), SIGKILL);
  const int status = parent.wait_exit();
  CHECK(WIFSIGNALED(status));
  CHECK(parent.closes_within(10'000));
}

TEST_CASE("The stop guard kills the stopped groups it holds once its stream closes, and no others",
          "[worker]") {
  // Two stopped `sleep`s, each the leader of its own group, as ktuned's borrowed compile is.
  const auto stopped_group = [] {
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::string sleep_text = "sleep";
    std::string seconds = "600";
    char* argv[] = {sleep_text.data(), seconds.data(), nullptr};
    pid_t pid = -1;
    REQUIRE(::posix_spawnp(&pid, "sleep", nullptr, &attr, argv, environ) == 0);
    posix_spawnattr_destroy(&attr);
    REQUIRE(::kill(-pid, SIGSTOP) == 0);
    return pid;
  };
  const pid_t held = stopped_group();
  const pid_t released = stopped_group();
  WorkerProcess guard({"--stop-guard", "--fd", "{fd}"});
  guard.send_line("+" + std::to_string(held));
  guard.send_line("+" + std::to_string(released));
  guard.send_line("-" + std::to_string(released));
  guard.send_line("+1");         // never init
  guard.send_line("no number");  // ignored
  // Once it ignores SIGTERM (its SigIgn mask in /proc), SIGTERM does not end it: its stream does.
  const auto ignores_sigterm = [&guard] {
    std::ifstream status_file("/proc/" + std::to_string(guard.pid()) + "/status");
    for (std::string line; std::getline(status_file, line);) {
      if (line.rfind("SigIgn:", 0) == 0) {
        return ((std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1) != 0;
      }
    }
    return false;
  };
  for (int i = 0; i < 1000 && !ignores_sigterm(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(ignores_sigterm());
  ::kill(guard.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int status = 0;
  CHECK(::waitpid(guard.pid(), &status, WNOHANG) == 0);

  guard.close_socket();
  status = guard.wait_exit();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(::waitpid(held, &status, 0) == held);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(::waitpid(released, &status, WNOHANG) == 0);  // still there, still stopped
  ::kill(-released, SIGKILL);
  ::waitpid(released, &status, 0);
}

TEST_CASE("A bench worker checks a gemm candidate against the default config", "[worker]") {
  ktune::test::TempDir dir;
  auto kernel = ktune::load_kernel(ktune::test::source_dir() + "/kernels_src/gemm/kernel.toml");
  REQUIRE(kernel.ok());
  ktune::HostCompiler compiler;
  auto build = [&](const ktune::Config& config) {
    auto job = ktune::make_compile_job(*kernel, config, "f32", dir.str());
    REQUIRE(job.ok());
    auto outcome = compiler.compile(*job);
    INFO(outcome.log);
    REQUIRE(outcome.status == ktune::CandidateStatus::ok);
    return outcome;
  };
  const ktune::Config small_tiles{{"BM", 32}, {"BN", 64}, {"BK", 64}, {"UNROLL", 2}, {"VEC", 1}};
  const auto reference = build(kernel->spec.default_config);
  const auto candidate = build(small_tiles);

  ktune::MeasureSettings settings;
  settings.min_samples = 3;
  settings.max_samples = 5;
  settings.min_time_s = 0;
  settings.max_time_s = 0.05;
  settings.warmup_ms = 1;
  settings.flush_cache = false;
  auto shape = ktune::Shape::parse("M=97,N=75,K=130");   // partial blocks in every dimension
  REQUIRE(shape.ok());
  auto bench_job = ktune::make_bench_job(kernel->spec, *shape, small_tiles, "f32",
                                         candidate.artifact_path, reference.artifact_path, settings);
  REQUIRE(bench_job.ok());
  // Each artifact is called by its own renamed entry: the reference never by the candidate's.
  ktune::use_compiled_entries(*bench_job, candidate.entry_symbol, reference.entry_symbol);
  CHECK(bench_job->entry != bench_job->reference_entry);

  auto worker = WorkerProcess::with_role("bench");
  (void)worker.read_json();
  const json reply = worker.request({{"id", 1}, {"op", "bench"}, {"job", bench_job->to_json()}});
  INFO(reply.dump());
  REQUIRE(reply["ok"] == true);
  auto outcome = ktune::BenchOutcome::from_json(reply["outcome"]);
  REQUIRE(outcome.ok());
  CHECK(outcome->status == ktune::CandidateStatus::ok);
  CHECK(outcome->gflops > 0);
}

#ifdef KTUNE_HAVE_CUDA
#include "bench/cuda_device.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "tests/cuda/gpu.hpp"
#include "tests/cuda/skip.hpp"

// [loses-context]: scripts/gpu-check.sh runs it last, in its own process.
TEST_CASE("A bench worker that loses its CUDA context says so, then exits 3", "[worker][gpu][loses-context]") {
  ktune::test::require_cuda_device();
  ktune::test::TempDir dir;
  auto props = ktune::query_cuda_device(0);
  REQUIRE(props.ok());
  auto compiler = ktune::NvrtcCompiler::create();
  REQUIRE(compiler.ok());
  ktune::CompileJob compile;
  compile.kernel = "wild";
  compile.language = "cuda";
  compile.source_path =
      dir.write("wild.cu",
                "extern \"C\" __global__ void wild(float* out, int n) {\n"
                "  if (threadIdx.x == 0) *reinterpret_cast<float*>(16) = 1.0f;\n"
                "}\n")
          .string();
  compile.dtype = "f32";
  compile.source_hash = "wild";
  compile.cache_dir = (dir.path() / "cache").string();
  compile.arch = ktune::cuda_arch(props->cc_major, props->cc_minor);
  const ktune::CompileOutcome compiled = (*compiler)->compile(compile);
  INFO(compiled.log);
  REQUIRE(compiled.status == ktune::CandidateStatus::ok);

  ktune::BenchJob job;
  job.kernel = "wild";
  job.entry = "wild";
  job.artifact_path = compiled.artifact_path;
  job.shape = "N=256";
  job.args = {{"OUT", "out", "f32", 256, "zero", 0}, {"N", "scalar", "i32", 0, "uniform", 256}};
  job.launch = ktune::CudaLaunch{};
  job.launch->block[0] = 32;

  auto worker = WorkerProcess::with_role("bench");
  REQUIRE(json::parse(worker.read_line()).at("ready") == true);
  const json reply = worker.request({{"id", 1}, {"op", "bench"}, {"job", job.to_json()}});
  INFO(reply.dump());
  CHECK(reply.at("ok") == true);
  CHECK(reply.at("exiting") == true);
  CHECK(reply.at("outcome").at("status") == "crash");
  CHECK(reply.at("outcome").at("context_lost") == true);
  const int status = worker.wait_exit();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
}
TEST_CASE("ktune-worker --list-cuda-devices prints the CUDA devices, or why there are none, as JSON",
          "[worker]") {
  const std::string command = k_worker + " --list-cuda-devices 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char chunk[4096];
  while (std::size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) out.append(chunk, n);
  const int status = ::pclose(pipe);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  INFO(out);
  const json line = json::parse(out, nullptr, false);
  REQUIRE(line.is_object());
  if (line.contains("devices")) {
    REQUIRE_FALSE(line.at("devices").empty());
    CHECK(line.at("devices").at(0).at("name") == "cuda:0");
  } else {
    CHECK(line.at("cuda_error").at("code") == "no_device");
    CHECK_FALSE(line.at("cuda_error").at("message").get<std::string>().empty());
  }
}

TEST_CASE("A compile worker under a memory limit answers devices from a probe outside the limit",
          "[worker][gpu]") {
  // cuInit reserves far more address space than --memory-mb allows: before the probe ran in a
  // child process, a compile worker under the limit answered every devices request with a cuInit
  // error and ktuned saw no GPU.
  ktune::test::require_cuda_device();
  WorkerProcess worker({"--fd", "{fd}", "--role", "compile", "--memory-mb", "256"});
  REQUIRE(worker.read_json().at("ready") == true);
  const json reply = worker.request({{"id", 1}, {"op", "devices"}});
  INFO(reply.dump());
  REQUIRE(reply.at("ok") == true);
  const json& outcome = reply.at("outcome");
  CHECK(outcome.at("cpu").at("name") == "cpu");
  REQUIRE(outcome.contains("devices"));
  CHECK(outcome.at("devices").at(0).at("name") == "cuda:0");
}

TEST_CASE("A CUDA bench worker names the lane's device, which it sees as ordinal 0", "[worker]") {
  // ktuned starts lane cuda:N's worker with CUDA_VISIBLE_DEVICES naming that one device and
  // --device-name cuda:N: its messages must say cuda:N, not the cuda:0 it sees.
  ktune::test::TempDir dir;
  ktune::BenchJob job;
  job.kernel = "fill";
  job.entry = "fill";
  job.shape = "N=64";
  job.args = {{"OUT", "out", "f32", 64, "zero", 0}};
  job.launch = ktune::CudaLaunch{};
  job.launch->block[0] = 4096; // more threads than any device allows per block
  // A cache entry that passes the worker's check (jobs/artifact_cache.hpp); no GPU gets further.
  job.artifact_path = ktune::artifact_path((dir.path() / "cache").string(), "00placeholder", ".cubin");
  REQUIRE(ktune::store_artifact(job.artifact_path, "not a CUBIN").ok());
  if (auto devices = ktune::list_cuda_devices(); devices) {
    auto compiler = ktune::NvrtcCompiler::create();
    REQUIRE(compiler.ok());
    auto props = ktune::query_cuda_device(0);
    REQUIRE(props.ok());
    ktune::CompileJob compile;
    compile.kernel = "fill";
    compile.language = "cuda";
    compile.source_path =
        dir.write("fill.cu", "extern \"C\" __global__ void fill(float* out) { out[threadIdx.x % 64] = 1; }\n")
            .string();
    compile.dtype = "f32";
    compile.source_hash = "fill";
    compile.cache_dir = (dir.path() / "cache").string();
    compile.arch = ktune::cuda_arch(props->cc_major, props->cc_minor);
    const ktune::CompileOutcome compiled = (*compiler)->compile(compile);
    INFO(compiled.log);
    REQUIRE(compiled.status == ktune::CandidateStatus::ok);
    job.artifact_path = compiled.artifact_path;
  }
  WorkerProcess worker({"--fd", "{fd}", "--role", "bench", "--device-name", "cuda:3"});
  REQUIRE(worker.read_json().at("ready") == true);
  const json reply = worker.request({{"id", 1}, {"op", "bench"}, {"job", job.to_json()}});
  INFO(reply.dump());
  if (reply.at("ok") == true) { // a GPU: the launch check names the device
    CHECK(reply.at("outcome").at("status") == "launch_error");
    CHECK_THAT(reply.at("outcome").at("reason").get<std::string>(), Catch::Contains("cuda:3 allows at most"));
  } else {
    CHECK(reply.at("error").at("code") == "no_device");
    CHECK_THAT(reply.at("error").at("message").get<std::string>(), Catch::StartsWith("cuda:3: "));
  }
}

TEST_CASE("compile_batch compiles its CUDA jobs together, in job order with the host jobs",
          "[worker][batch]") {
  if (auto nvrtc = ktune::NvrtcCompiler::create(); !nvrtc) {
    ktune::test::skip_test("nvrtc cannot be loaded: " + nvrtc.error().message);
  }
  ktune::test::TempDir dir;
  auto host = tiny_job(dir, "*static_cast<KTUNE_DTYPE*>(args[0]) = VALUE;");
  host.entry = "tiny";
  ktune::CompileJob cuda;
  cuda.kernel = "scale";
  cuda.language = "cuda";
  cuda.source_path = dir.write("scale.cu", "extern \"C\" __global__ void scale(float* x) { x[0] *= FACTOR; }\n")
                         .string();
  cuda.defines = {{"FACTOR", 3}};
  cuda.dtype = "f32";
  cuda.entry = "scale";
  cuda.source_hash = "scale";
  cuda.cache_dir = (dir.path() / "cache").string();
  cuda.arch = "sm_80";
  json jobs = json::array({host.to_json(), cuda.to_json()});
  host.defines = {{"VALUE", 4}};
  cuda.defines = {{"FACTOR", 5}};
  jobs.push_back(host.to_json());
  jobs.push_back(cuda.to_json());

  auto worker = WorkerProcess::with_role("compile");
  (void)worker.read_json();
  const json reply = worker.request({{"id", 1}, {"op", "compile_batch"}, {"jobs", jobs}});
  INFO(reply.dump());
  REQUIRE(reply["ok"] == true);
  const json& outcomes = reply["outcome"]["outcomes"];
  REQUIRE(outcomes.size() == 4);
  for (const auto& item : outcomes) CHECK(item["status"] == "ok");
  for (const std::size_t i : {1, 3}) {  // the two CUDA configs, in one nvrtc program
    CHECK(outcomes[i]["batch_size"] == 2);
    CHECK_THAT(outcomes[i]["entry_symbol"].get<std::string>(), Catch::StartsWith("scale_k"));
    CHECK_THAT(outcomes[i]["artifact_path"].get<std::string>(), Catch::EndsWith(".cubin"));
  }
  CHECK(outcomes[1]["entry_symbol"] != outcomes[3]["entry_symbol"]);
  CHECK(outcomes[0]["batch_size"] == 2);  // the two host configs, together
  CHECK(outcomes[2]["batch_size"] == 2);
}

#endif
