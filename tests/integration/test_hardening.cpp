// ktuned against bad, greedy and foreign clients (docs/protocol.md § Limits, § Error codes):
// every malformed request gets its specific error code and the connection goes on; a client
// dribbling a line is dropped with `timeout` while another is served; idle connections are
// closed unless a request is in flight; connections and queued jobs per uid (tunes, CUDA tunes
// and tune-on-miss jobs) are capped; another uid is refused with `permission_denied` (root only:
// the client runs as nobody); a socket path owned by another user stops the start; a kernel spec
// cannot reach outside its directory.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "jobs/kernel_registry.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <grp.h>
#include <poll.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 10s;
constexpr uid_t k_nobody = 65534;

const std::string k_tiny_measure = R"(
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
)";

// A family whose space has 1000^3 = 10^9 configs (beyond the enumeration limit).
std::string huge_space_spec() {
  std::string values;
  for (int i = 1; i <= 1000; ++i) values += (i > 1 ? "," : "") + std::to_string(i);
  return "[kernel]\nname = \"huge\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\nentry = \"huge\"\n"
         "shape = [\"N\"]\ndtypes = [\"f32\"]\n[params]\nA = [" + values + "]\nB = [" + values +
         "]\nC = [" + values + "]\n[[args]]\nname = \"OUT\"\nkind = \"out\"\ncount = \"N\"\n"
         "[default]\nA = 1\nB = 1\nC = 1\n";
}

// Starts ktuned in `home` with `config_text` as its config file and the shipped kernels plus
// `extra_kernel_dir` when given.
std::unique_ptr<DaemonProcess> start_daemon(const TempDir& home, const std::string& config_text,
                                            const std::string& extra_kernel_dir = "") {
  home.write("ktuned.toml", config_text + k_tiny_measure);
  std::vector<std::string> args = {"--config", (home.path() / "ktuned.toml").string(),
                                   "--kernel-dir", ktune::test::source_path("/kernels_src")};
  if (!extra_kernel_dir.empty()) {
    args.push_back("--kernel-dir");
    args.push_back(extra_kernel_dir);
  }
  auto daemon = std::make_unique<DaemonProcess>(home.str(), args);
  REQUIRE(daemon->wait_ready(k_start_timeout));
  return daemon;
}

Connection connect(const std::string& socket) {
  auto c = Connection::connect(socket);
  INFO((c ? std::string() : c.error().message));
  REQUIRE(c.ok());
  return std::move(*c);
}

json read_json(Connection& c, std::chrono::milliseconds timeout = k_reply_timeout) {
  auto line = c.read_line(timeout);
  INFO((line ? *line : line.error().message));
  REQUIRE(line.ok());
  return json::parse(*line);
}

// Sends one raw line and returns the error code of its reply ("" for an ok reply).
std::string code_of(Connection& c, const std::string& line) {
  REQUIRE(c.send_raw(line + "\n").ok());
  const json reply = read_json(c);
  INFO(line << " -> " << reply.dump());
  REQUIRE(reply.contains("ok"));
  return reply.value("ok", false) ? std::string() : reply["error"].value("code", "");
}

// True once the daemon closed the connection (read_line fails), within `timeout`.
bool closed_by_daemon(Connection& c, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = c.read_line(200ms);
    if (!line && line.error().message.find("timed out") == std::string::npos) return true;
  }
  return false;
}

json ok_result(Connection& c, const json& request) {
  auto reply = c.request(request, {}, k_reply_timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

// Runs in a child as uid/gid nobody: connects to `socket`, sends a stats request and returns
// what happened: "connect: <errno text>" or the daemon's first line ("" when it closed first).
std::string try_as_nobody(const std::string& socket) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    std::string out;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(k_nobody, k_nobody, k_nobody) != 0 ||
        ::setresuid(k_nobody, k_nobody, k_nobody) != 0) {
      out = std::string("setuid: ") + std::strerror(errno);
    } else {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        out = std::string("connect: ") + std::strerror(errno);
      } else {
        const std::string request = "{\"id\":1,\"op\":\"stats\"}\n";
        [[maybe_unused]] auto sent = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        pollfd p{fd, POLLIN, 0};
        char buf[4096];
        while (out.find('\n') == std::string::npos && ::poll(&p, 1, 10000) > 0) {
          const ssize_t n = ::read(fd, buf, sizeof buf);
          if (n <= 0) break;
          out.append(buf, static_cast<std::size_t>(n));
        }
      }
    }
    [[maybe_unused]] auto written = ::write(pipe_fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string result;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) {
    result.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return result;
}

} // namespace

TEST_CASE("every malformed request gets a specific error code and the connection goes on",
          "[integration][hardening]") {
  TempDir home;
  TempDir kernels;
  kernels.write("huge/kernel.toml", huge_space_spec());
  kernels.write("huge/kernel.cpp", "extern \"C\" void huge(void**) {}\n");
  auto daemon = start_daemon(home, "", kernels.str());
  Connection c = connect(daemon->socket());

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"this is not json", "bad_json"},
      {"{\"op\":\"stats\"", "bad_json"},
      {"[1,2,3]", "bad_request"},
      {"{\"id\":1}", "bad_request"},
      {"{\"id\":2,\"op\":5}", "bad_request"},
      {"{\"id\":{\"a\":1},\"op\":\"stats\"}", "bad_request"},
      {"{\"id\":3,\"op\":\"frobnicate\"}", "unknown_op"},
      {"{\"v\":2,\"id\":4,\"op\":\"stats\"}", "unsupported_version"},
      {"{\"v\":\"1\",\"id\":5,\"op\":\"stats\"}", "unsupported_version"},
      {"{\"id\":6,\"op\":\"job\"}", "bad_request"},
      {"{\"id\":7,\"op\":\"job\",\"job\":\"12\"}", "bad_request"},
      {"{\"id\":8,\"op\":\"job\",\"job\":123456789012345678901234567890}", "bad_request"},
      {"{\"id\":9,\"op\":\"job\",\"job\":-3}", "bad_request"},
      {"{\"id\":10,\"op\":\"jobs\",\"limit\":1e300}", "bad_request"},
      {"{\"id\":11,\"op\":\"job\",\"job\":999999}", "unknown_job"},
      {"{\"id\":12,\"op\":\"tune\",\"shape\":\"N=1024\"}", "bad_request"},
      {"{\"id\":13,\"op\":\"tune\",\"kernel\":\"reduce_sum\",\"shape\":\"N=1024\",\"budget\":0}",
       "bad_request"},
      {"{\"id\":14,\"op\":\"tune\",\"kernel\":\"reduce_sum\",\"shape\":\"N=1024\","
       "\"budget\":99999999999999999999999}",
       "bad_request"},
      {"{\"id\":15,\"op\":\"tune\",\"kernel\":\"reduce_sum\",\"shape\":\"N=1024\","
       "\"strategy\":\"magic\"}",
       "bad_request"},
      {"{\"id\":16,\"op\":\"tune\",\"kernel\":\"reduce_sum\",\"shape\":\"N=-5\"}", "bad_shape"},
      {"{\"id\":17,\"op\":\"tune\",\"kernel\":\"reduce_sum\",\"shape\":\"N=0\"}", "bad_shape"},
      {"{\"id\":18,\"op\":\"lookup\",\"kernel\":\"reduce_sum\","
       "\"shape\":\"N=99999999999999999999999\"}",
       "bad_shape"},
      {"{\"id\":19,\"op\":\"lookup\",\"kernel\":\"reduce_sum\",\"shape\":\"M=4\"}", "bad_shape"},
      {"{\"id\":20,\"op\":\"lookup\",\"kernel\":\"no_such_kernel\",\"shape\":\"N=4\"}",
       "unknown_kernel"},
      {"{\"id\":21,\"op\":\"lookup\",\"kernel\":\"reduce_sum\",\"shape\":\"N=4\",\"dtype\":\"f99\"}",
       "bad_dtype"},
      {"{\"id\":22,\"op\":\"lookup\",\"kernel\":\"reduce_sum\",\"shape\":\"N=4\",\"device\":\"tpu\"}",
       "unknown_device"},
      {"{\"id\":23,\"op\":\"tune\",\"kernel\":\"huge\",\"shape\":\"N=4\"}", "space_too_large"},
      {"{\"id\":24,\"op\":\"cancel\",\"job\":424242}", "unknown_job"},
  };
  for (const auto& [line, expected] : cases) {
    INFO(line);
    CHECK(code_of(c, line) == expected);
  }
  SECTION("the id is echoed whenever the line parsed") {
    REQUIRE(c.send_raw("{\"id\":\"abc\",\"op\":\"frobnicate\"}\n").ok());
    CHECK(read_json(c)["id"] == "abc");
  }
  // The connection was served throughout.
  CHECK(ok_result(c, {{"op", "stats"}}).contains("pid"));
}

TEST_CASE("a client dribbling a line is dropped with timeout while others are served",
          "[integration][hardening]") {
  TempDir home;
  auto daemon = start_daemon(home, "[limits]\nmessage_timeout_s = 0.5\n");
  Connection slow = connect(daemon->socket());
  Connection fast = connect(daemon->socket());

  std::atomic<bool> dribbling{true};
  std::thread dribbler([&] {
    const std::string text = "{\"op\":\"lookup\",\"kernel\":\"reduce_sum\",\"shape\":\"N=4\"";
    for (std::size_t i = 0; dribbling && i < 200; ++i) {
      if (!slow.send_raw(text.substr(i % text.size(), 1)).ok()) break; // dropped
      std::this_thread::sleep_for(25ms);
    }
  });
  int served = 0;
  for (int i = 0; i < 40; ++i) {
    const json result = ok_result(fast, {{"op", "lookup"}, {"kernel", "reduce_sum"},
                                         {"shape", "N=" + std::to_string(1024 + i)}});
    served += result.contains("config");
    std::this_thread::sleep_for(10ms);
  }
  dribbling = false;
  dribbler.join();
  CHECK(served == 40);
  const json error = read_json(slow);
  CHECK(error["error"]["code"] == "timeout");
  CHECK_THAT(error["error"]["message"].get<std::string>(), Catch::Contains("bytes received"));
  CHECK(closed_by_daemon(slow, 5s));
  // A line sent in two parts within the deadline is served.
  Connection split = connect(daemon->socket());
  REQUIRE(split.send_raw("{\"id\":1,\"op\":").ok());
  std::this_thread::sleep_for(100ms);
  REQUIRE(split.send_raw("\"stats\"}\n").ok());
  CHECK(read_json(split).value("ok", false));
}

TEST_CASE("a client that shuts down its writing side gets every reply, then the close",
          "[integration][hardening]") {
  TempDir home;
  auto daemon = start_daemon(home, "");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, daemon->socket().c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string requests = "{\"id\":1,\"op\":\"stats\"}\nnot json\n"
                               "{\"id\":3,\"op\":\"lookup\",\"kernel\":\"reduce_sum\",\"shape\":\"N=8\"}\n";
  REQUIRE(::send(fd, requests.data(), requests.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(requests.size()));
  REQUIRE(::shutdown(fd, SHUT_WR) == 0);
  std::string received;
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  bool eof = false;
  while (!eof && ::poll(&p, 1, 10000) > 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) eof = true;
    else received.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  CHECK(eof);
  std::istringstream lines(received);
  std::vector<json> replies;
  for (std::string line; std::getline(lines, line);) replies.push_back(json::parse(line));
  INFO(received);
  REQUIRE(replies.size() == 3);
  CHECK(replies[0]["id"] == 1);
  CHECK(replies[1]["error"]["code"] == "bad_json");
  CHECK(replies[2]["id"] == 3);
  CHECK(replies[2].value("ok", false));
}

TEST_CASE("idle connections are closed, not those waiting on a job", "[integration][hardening]") {
  TempDir home;
  auto daemon = start_daemon(home, "[limits]\nconnection_idle_s = 0.4\n");
  Connection idle = connect(daemon->socket());
  Connection waiting = connect(daemon->socket());
  REQUIRE(waiting
              .send_raw(json({{"id", 7}, {"op", "tune"}, {"kernel", "reduce_sum"},
                              {"shape", "N=4096"}, {"budget", 2}, {"wait", true}})
                            .dump() +
                        "\n")
              .ok());

  const json error = read_json(idle, 5s);
  CHECK(error["error"]["code"] == "idle_timeout");
  CHECK(closed_by_daemon(idle, 5s));

  // Events then the final reply; never an idle_timeout while the job runs.
  json reply;
  for (;;) {
    reply = read_json(waiting, 60s);
    if (!reply.contains("event")) break;
  }
  INFO(reply.dump());
  CHECK(reply["id"] == 7);
  CHECK(reply.value("ok", false));
  // Once answered, it is idle too.
  CHECK(read_json(waiting, 5s)["error"]["code"] == "idle_timeout");
}

TEST_CASE("connections beyond max_connections are refused, others keep being served",
          "[integration][hardening]") {
  TempDir home;
  auto daemon = start_daemon(home, "[limits]\nmax_connections = 2\n");
  auto first = std::make_unique<Connection>(connect(daemon->socket()));
  Connection second = connect(daemon->socket());
  // Both accepted (a connect returns before the daemon accepts).
  CHECK(ok_result(*first, {{"op", "stats"}}).contains("pid"));
  CHECK(ok_result(second, {{"op", "stats"}})["connections"] == 2);

  Connection third = connect(daemon->socket());
  const json error = read_json(third);
  CHECK(error["error"]["code"] == "too_many_connections");
  CHECK(closed_by_daemon(third, 5s));
  CHECK(ok_result(second, {{"op", "stats"}}).contains("pid"));

  first.reset();
  // The daemon notices the close; then a new connection is served.
  bool served = false;
  for (int attempt = 0; attempt < 50 && !served; ++attempt) {
    Connection again = connect(daemon->socket());
    auto reply = again.request({{"op", "stats"}}, {}, k_reply_timeout);
    served = reply && reply->value("ok", false);
    if (!served) std::this_thread::sleep_for(50ms);
  }
  CHECK(served);
}

TEST_CASE("queued jobs per client uid are capped with too_many_jobs", "[integration][hardening]") {
  TempDir home;
  auto daemon = start_daemon(home, "[limits]\nmax_queued_jobs_per_client = 2\n");
  Connection c = connect(daemon->socket());
  auto tune = [&](int n) {
    return c.request({{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=" + std::to_string(n)}},
                     {}, k_reply_timeout);
  };
  auto a = tune(1000);
  REQUIRE(a.ok());
  REQUIRE(a->value("ok", false));
  // An identical request joins the job and creates none: it does not count.
  auto joined = tune(1000);
  REQUIRE(joined.ok());
  CHECK(joined->value("ok", false));
  CHECK((*joined)["result"].value("joined", false));
  auto b = tune(2000);
  REQUIRE(b.ok());
  REQUIRE(b->value("ok", false));
  auto refused = tune(3000);
  REQUIRE(refused.ok());
  INFO(refused->dump());
  REQUIRE_FALSE(refused->value("ok", true));
  CHECK((*refused)["error"]["code"] == "too_many_jobs");
  CHECK_THAT((*refused)["error"]["message"].get<std::string>(), Catch::Contains("uid"));

  // Another connection of the same uid shares the quota.
  Connection other = connect(daemon->socket());
  auto refused_too = other.request(
      {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=3000"}}, {}, k_reply_timeout);
  REQUIRE(refused_too.ok());
  CHECK((*refused_too)["error"]["code"] == "too_many_jobs");

  // Cancelling the queued job frees a place.
  const std::int64_t queued_job = (*b)["result"]["job"];
  ok_result(c, {{"op", "cancel"}, {"job", queued_job}});
  auto accepted = tune(3000);
  REQUIRE(accepted.ok());
  CHECK(accepted->value("ok", false));
}

TEST_CASE("tune-on-miss jobs and CUDA tunes count against the queued-job quota",
          "[integration][hardening]") {
  TempDir home;
  auto daemon = start_daemon(home, "[limits]\nmax_queued_jobs_per_client = 1\n");
  Connection c = connect(daemon->socket());
  auto lookup = [&](const std::string& shape) {
    return ok_result(c, {{"op", "lookup"}, {"kernel", "gemm"}, {"shape", shape},
                         {"tune_on_miss", true}});
  };
  auto tune_code = [&](const std::string& device) {
    auto reply = c.request({{"op", "tune"}, {"kernel", "gemm"}, {"shape", "M=32,N=32,K=32"},
                            {"device", device}},
                           {}, k_reply_timeout);
    REQUIRE(reply.ok());
    INFO(reply->dump());
    return reply->value("ok", false) ? std::string() : (*reply)["error"].value("code", "");
  };

  // A miss creates a tune-on-miss job charged to this uid; the same miss joins it.
  const json missed = lookup("M=64,N=64,K=64");
  REQUIRE(missed.contains("tune_job"));
  const std::int64_t job = missed["tune_job"];
  CHECK(lookup("M=64,N=64,K=64")["tune_job"] == job);

  // At the limit a miss of another key is still answered from the ladder, without a job; tunes
  // are refused, a CUDA tune before its device is asked for.
  const json refused_miss = lookup("M=48,N=48,K=48");
  CHECK(refused_miss.value("rung", "") != "exact");
  CHECK_FALSE(refused_miss.contains("tune_job"));
  CHECK(tune_code("cpu") == "too_many_jobs");
  CHECK(tune_code("cuda:0") == "too_many_jobs");
  const json jobs = ok_result(c, {{"op", "jobs"}});
  CHECK(jobs["jobs"].size() == 1);

  // Cancelling the job frees the place once it ended (a running job finishes its candidates in
  // flight first). A CUDA tune is then answered for its device: no_device without a usable GPU;
  // with one, its job (created once a worker answered the device query) takes the place.
  ok_result(c, {{"op", "cancel"}, {"job", job}});
  auto job_state = [&] {
    return ok_result(c, {{"op", "job"}, {"job", job}})["job"].value("state", "");
  };
  const auto deadline = std::chrono::steady_clock::now() + k_start_timeout;
  while (job_state() != "cancelled" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(job_state() == "cancelled");
  const std::string cuda = tune_code("cuda:0");
  if (cuda.empty()) {
    CHECK(tune_code("cpu") == "too_many_jobs");
  } else {
    CHECK(cuda == "no_device");
    CHECK(tune_code("cpu").empty());
  }
}

TEST_CASE("another uid is refused with permission_denied unless [access] allows it",
          "[integration][hardening]") {
  if (::geteuid() != 0) {
    WARN("skipped: running a client as another uid needs root");
    return;
  }
  TempDir home;
  SECTION("not in the allow lists: permission_denied naming the uid") {
    auto daemon = start_daemon(home, "[access]\nallow_uids = [65533]\nallow_gids = [65533]\n");
    REQUIRE(::chmod(home.str().c_str(), 0711) == 0);
    struct stat st {};
    REQUIRE(::stat(daemon->socket().c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0666);
    const std::string line = try_as_nobody(daemon->socket());
    INFO(line);
    REQUIRE(line.find('{') == 0);
    const json reply = json::parse(line);
    CHECK(reply["error"]["code"] == "permission_denied");
    CHECK_THAT(reply["error"]["message"].get<std::string>(), Catch::Contains("uid 65534"));
    // The daemon still serves its own user.
    Connection c = connect(daemon->socket());
    CHECK(ok_result(c, {{"op", "stats"}}).contains("pid"));
  }
  SECTION("listed in allow_uids: served") {
    auto daemon = start_daemon(home, "[access]\nallow_uids = [65534]\n");
    REQUIRE(::chmod(home.str().c_str(), 0711) == 0);
    const std::string line = try_as_nobody(daemon->socket());
    INFO(line);
    REQUIRE(line.find('{') == 0);
    CHECK(json::parse(line).value("ok", false));
  }
  SECTION("listed in allow_gids: served") {
    auto daemon = start_daemon(home, "[access]\nallow_gids = [65534]\n");
    REQUIRE(::chmod(home.str().c_str(), 0711) == 0);
    const std::string line = try_as_nobody(daemon->socket());
    INFO(line);
    REQUIRE(line.find('{') == 0);
    CHECK(json::parse(line).value("ok", false));
  }
  SECTION("without [access] the socket is 0600: another user cannot even connect") {
    auto daemon = start_daemon(home, "");
    REQUIRE(::chmod(home.str().c_str(), 0711) == 0);
    CHECK_THAT(try_as_nobody(daemon->socket()), Catch::StartsWith("connect: Permission denied"));
  }
}

TEST_CASE("a socket path owned by another user stops the start", "[integration][hardening]") {
  if (::geteuid() != 0) {
    WARN("skipped: giving a file to another uid needs root");
    return;
  }
  TempDir home;
  home.write("ktuned.toml", k_tiny_measure);
  const std::string socket = home.str() + "/ktuned.sock";
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);
  }
  REQUIRE(::chown(socket.c_str(), k_nobody, k_nobody) == 0);

  const std::string log = home.str() + "/stderr.txt";
  std::vector<std::string> argv_text = {ktune::test::bin_path("/ktuned"), "--config",
                                        home.str() + "/ktuned.toml", "--kernel-dir",
                                        ktune::test::source_path("/kernels_src")};
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = {"KTUNE_HOME=" + home.str(), "PATH=/usr/bin:/bin"};
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  INFO(text.str());
  CHECK_THAT(text.str(), Catch::Contains(socket));
  CHECK_THAT(text.str(), Catch::Contains("uid 65534"));
  // The other user's file is left alone.
  struct stat st {};
  REQUIRE(::lstat(socket.c_str(), &st) == 0);
  CHECK(st.st_uid == k_nobody);
}

TEST_CASE("a kernel spec cannot reach outside its own directory", "[integration][hardening]") {
  TempDir dir;
  const std::string spec_head = "[kernel]\nname = \"k\"\nlanguage = \"cpp\"\nentry = \"k\"\n"
                                "shape = [\"N\"]\ndtypes = [\"f32\"]\n";
  const std::string spec_tail = "[params]\nA = [1]\n[[args]]\nname = \"OUT\"\nkind = \"out\"\n"
                                "count = \"N\"\n[default]\nA = 1\n";
  dir.write("outside/secret.hpp", "#define SECRET 1\n");
  auto load = [&](const std::string& source) {
    dir.write("k/kernel.toml", spec_head + "source = \"" + source + "\"\n" + spec_tail);
    return ktune::load_kernel(dir.str() + "/k/kernel.toml");
  };
  auto expect_refused = [](const auto& result, const std::string& path_part) {
    REQUIRE_FALSE(result.ok());
    INFO(result.error().message);
    CHECK(result.error().code == ktune::ErrorCode::spec_error);
    CHECK_THAT(result.error().message, Catch::Contains("[kernel].source"));
    CHECK_THAT(result.error().message, Catch::Contains(path_part));
  };

  SECTION("'..' in the source") { expect_refused(load("../../etc/passwd"), "../../etc/passwd"); }
  SECTION("an absolute source") { expect_refused(load("/etc/passwd"), "/etc/passwd"); }
  SECTION("a symbolic link leading out") {
    fs::create_directories(dir.path() / "k");
    fs::create_symlink(dir.path() / "outside/secret.hpp", dir.path() / "k/kernel.cpp");
    expect_refused(load("kernel.cpp"), "outside/secret.hpp");
  }
  SECTION("a quoted include leading out, by '..', absolute or through a link") {
    for (const std::string& name :
         {std::string("../outside/secret.hpp"), (dir.path() / "outside/secret.hpp").string(),
          std::string("link.hpp")}) {
      dir.write("k/kernel.cpp", "#include \"" + name + "\"\nextern \"C\" void k(void**) {}\n");
      std::error_code ec;
      fs::remove(dir.path() / "k/link.hpp", ec);
      fs::create_symlink(dir.path() / "outside/secret.hpp", dir.path() / "k/link.hpp");
      INFO(name);
      expect_refused(load("kernel.cpp"), "outside/secret.hpp");
    }
  }
  SECTION("a link that stays inside is fine") {
    dir.write("k/real.cpp", "#include \"inc.hpp\"\nextern \"C\" void k(void**) {}\n");
    dir.write("k/inc.hpp", "#define X 1\n");
    fs::create_symlink(dir.path() / "k/real.cpp", dir.path() / "k/kernel.cpp");
    auto loaded = load("kernel.cpp");
    INFO((loaded ? std::string() : loaded.error().message));
    CHECK(loaded.ok());
  }
}

TEST_CASE("client numbers and shapes are bounded: a deadline over the limit and a shape of 100k "
          "dimensions are refused, and the daemon goes on",
          "[integration][hardening]") {
  TempDir home;
  auto daemon = start_daemon(home, "[limits]\nbench_timeout_max_s = 60\n");
  Connection c = connect(daemon->socket());
  // A per-job deadline beyond the daemon's limit would let a hanging candidate hold its lane.
  REQUIRE(c.send_raw(R"({"v":1,"id":1,"op":"tune","kernel":"reduce_sum","shape":"N=4096",)"
                     R"("bench_timeout_s":1e308})" "\n").ok());
  const json refused = read_json(c);
  INFO(refused.dump());
  CHECK(refused["error"]["code"] == "bad_request");
  CHECK_THAT(refused["error"]["message"].get<std::string>(),
             Catch::Contains("bench_timeout_s") && Catch::Contains("bench_timeout_max_s") &&
                 Catch::Contains("60"));
  CHECK(code_of(c, R"({"v":1,"id":2,"op":"tune","kernel":"reduce_sum","shape":"N=4096",)"
                   R"("compile_timeout_s":1e9})") == "bad_request");
  // Within the limit it is taken.
  const json accepted = ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"},
                                      {"bench_timeout_s", 30}, {"budget", 1}});
  CHECK(accepted.at("job").get<std::int64_t>() >= 1);

  // 100k dimensions, 0.9 MB: once parsed in quadratic time (143k took 33 s, every client frozen).
  std::string shape;
  for (int i = 0; i < 100000; ++i) shape += (i ? ",D" : "D") + std::to_string(i) + "=1";
  const json lookup = {{"v", 1}, {"id", 3}, {"op", "lookup"}, {"kernel", "reduce_sum"},
                       {"shape", shape}};
  REQUIRE(lookup.dump().size() < 1024 * 1024);
  REQUIRE(c.send_raw(lookup.dump() + "\n").ok());
  const json bad = read_json(c);
  CHECK(bad["error"]["code"] == "bad_shape");
  CHECK_THAT(bad["error"]["message"].get<std::string>(), Catch::Contains("more than 64"));
  CHECK(bad.dump().size() < 1000);
  CHECK(ok_result(c, {{"op", "stats"}}).at("pid") == daemon->pid());
}

TEST_CASE("what ktuned creates is private to its user whatever the umask it was started with",
          "[integration][hardening]") {
  TempDir home;
  const mode_t before = ::umask(022);  // the usual umask: files 0644, directories 0755
  auto daemon = start_daemon(home, "");
  ::umask(before);
  Connection c = connect(daemon->socket());
  // A tune writes the database, its WAL and the compile cache.
  (void)ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"},
                      {"budget", 1}, {"wait", true}});
  int checked = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(home.path())) {
    if (entry.is_symlink() || entry.path().filename() == "ktuned.toml") continue;
    struct stat st {};
    REQUIRE(::lstat(entry.path().c_str(), &st) == 0);
    INFO(entry.path().string() << " mode " << std::oct << (st.st_mode & 0777));
    CHECK((st.st_mode & 0077) == 0);
    ++checked;
  }
  CHECK(std::filesystem::exists(home.path() / "ktune.db"));
  CHECK(checked >= 3);
}

TEST_CASE("a client that pipelines 100k lookups and reads late gets every reply",
          "[integration][hardening]") {
  TempDir home;
  // A short line deadline: the time ktuned does not read (its reply backlog is full) must not
  // count against the client.
  auto daemon = start_daemon(home, "[limits]\nmessage_timeout_s = 1\n");
  Connection c = connect(daemon->socket());
  (void)ok_result(c, {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"},
                      {"budget", 1}, {"wait", true}});
  constexpr int k_lookups = 100'000;
  std::atomic<bool> send_failed{false};
  std::thread writer([&] {
    std::string batch;
    for (int i = 0; i < k_lookups; ++i) {
      batch += R"({"id":)" + std::to_string(i) +
               R"(,"op":"lookup","kernel":"reduce_sum","shape":"N=4096"})" + "\n";
      if (batch.size() > 64 * 1024 || i + 1 == k_lookups) {
        // Blocks while ktuned does not read.
        if (!c.send_raw(batch).ok()) {
          send_failed = true;
          return;
        }
        batch.clear();
      }
    }
  });
  std::this_thread::sleep_for(3s);  // reads nothing meanwhile: the backlog fills, ktuned pauses
  int replies = 0, errors = 0;
  std::string first_error;
  while (replies < k_lookups) {
    auto line = c.read_line(20s);
    if (!line) {
      first_error = line.error().message;
      break;
    }
    const json reply = json::parse(*line);
    if (!reply.value("ok", false)) {
      ++errors;
      if (first_error.empty()) first_error = reply.dump();
    }
    ++replies;
  }
  writer.join();
  INFO(first_error);
  CHECK_FALSE(send_failed);
  CHECK(replies == k_lookups);
  CHECK(errors == 0);
}

TEST_CASE("a missing kernel directory, a duplicate family name and a division by zero in a "
          "constraint are each reported as what they are",
          "[integration][hardening]") {
  TempDir home, first, second;
  const std::string spec = "[kernel]\nname = \"twice\"\nlanguage = \"cpp\"\nsource = \"k.cpp\"\n"
                           "entry = \"k\"\nshape = [\"N\"]\ndtypes = [\"f32\"]\n[params]\nA = [0, 1]\n"
                           "[space]\nconstraints = [\"N % A == 0\"]\n[[args]]\nname = \"OUT\"\n"
                           "kind = \"out\"\ncount = \"N\"\n[default]\nA = 1\n";
  for (const TempDir* dir : {&first, &second}) {
    dir->write("twice/kernel.toml", spec);
    dir->write("twice/k.cpp", "extern \"C\" void k(void**) {}\n");
  }
  const std::string missing = home.str() + "/no-such-kernels";
  home.write("ktuned.toml", k_tiny_measure);
  const std::string log = home.str() + "/stderr.txt";
  DaemonProcess daemon(home.str(),
                       {"--config", (home.path() / "ktuned.toml").string(), "--kernel-dir",
                        first.str(), "--kernel-dir", second.str(), "--kernel-dir", missing},
                       log);
  REQUIRE(daemon.wait_ready(k_start_timeout));
  Connection c = connect(daemon.socket());
  const json kernels = ok_result(c, {{"op", "kernels"}});
  INFO(kernels.dump());
  CHECK(kernels.at("missing_dirs") == json::array({missing}));
  bool duplicate = false;
  for (const auto& b : kernels.at("broken")) {
    duplicate = duplicate || b.at("error").get<std::string>().find("already defined") != std::string::npos;
  }
  CHECK(duplicate);
  // The family of the first directory is the one loaded; its constraint divides by zero at A = 0.
  auto reply = c.request({{"op", "tune"}, {"kernel", "twice"}, {"shape", "N=64"}}, {}, k_reply_timeout);
  REQUIRE(reply.ok());
  INFO(reply->dump());
  REQUIRE_FALSE(reply->value("ok", true));
  CHECK(reply->at("error").value("code", "") == "spec_error");
  CHECK_THAT(reply->at("error").value("message", ""),
             Catch::Contains("remainder by zero") && Catch::Contains("A=0") &&
                 Catch::Contains("N % A == 0"));
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains(missing + " does not exist"));
}
