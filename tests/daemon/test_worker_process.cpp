// WorkerProcess against fake workers: shell scripts that speak the worker protocol on fd 3.
#include "daemon/worker_pool.hpp"
#include "daemon/worker_process.hpp"

#include "tests/support/process_state.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/signal_set.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

using namespace ktune;
using namespace ktune::daemon;
using Catch::Matchers::Contains;

namespace {

// Answers its first request with `reply_fields` (the id echoed), then lingers for
// `linger_s` seconds -- time in which a second request could still be written to it -- and
// exits with status 3, as ktune-worker does after losing its CUDA context.
std::string fake_worker(const test::TempDir& dir, const std::string& reply_fields,
                        const std::string& linger_s) {
  const auto path = dir.write("fake-worker.sh",
                              "#!/bin/sh\n"
                              "echo '{\"ready\":true,\"pid\":'$$',\"role\":\"bench\"}' >&3\n"
                              "read -r line <&3\n"
                              "id=$(echo \"$line\" | sed -n 's/^{\"id\":\\([0-9]*\\),.*/\\1/p')\n"
                              "echo '{\"id\":'\"$id\"',\"ok\":true," + reply_fields + "}' >&3\n"
                              "sleep " + linger_s + "\n"
                              "exit 3\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path.string();
}

// An io_context that routes SIGCHLD to a ChildWatch, as the server does, until `done`.
struct Harness {
  asio::io_context io;
  ChildWatch children;
  asio::signal_set signals{io, SIGCHLD};
  bool done = false;

  Harness() { wait_for_children(); }
  void wait_for_children() {
    signals.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      children.reap();
      if (!done) wait_for_children();
    });
  }
};

struct Replies {
  std::optional<Result<nlohmann::json>> first;
  std::optional<bool> idle_in_handler;
  std::optional<bool> closing_in_handler;
  std::optional<Result<nlohmann::json>> second;
  bool exited = false;
};

// Spawns `path`, sends one bench request and, from inside its reply handler, a second one (what
// a scheduler that picks the next idle worker would do). Runs until the worker has exited.
Replies drive(Harness& h, const std::string& path) {
  Replies replies;
  auto spawned = WorkerProcess::spawn(h.io, h.children, path, WorkerRole::bench, {},
                                      [&](WorkerProcess&) {
                                        replies.exited = true;
                                        h.done = true;
                                      });
  REQUIRE(spawned.ok());
  std::shared_ptr<WorkerProcess> worker = spawned.value();
  worker->request("bench", nlohmann::json::object(), [&, worker](Result<nlohmann::json> outcome) {
    replies.first = std::move(outcome);
    replies.idle_in_handler = worker->idle();
    replies.closing_in_handler = worker->closing();
    // Asked even when not idle (the pool would not pick it), to see what a closing worker says.
    worker->request("bench", nlohmann::json::object(),
                    [&](Result<nlohmann::json> second) { replies.second = std::move(second); });
  });
  h.io.run_for(std::chrono::seconds(20));
  return replies;
}

} // namespace

TEST_CASE("a worker whose reply says exiting is not idle when the reply is handled", "[daemon]") {
  test::TempDir dir;
  Harness h;
  const Replies replies = drive(
      h, fake_worker(dir, R"("exiting":true,"outcome":{"status":"crash","context_lost":true})", "0.5"));
  REQUIRE(replies.first.has_value());
  REQUIRE(replies.first->ok());
  CHECK(replies.first->value().at("status") == "crash");
  CHECK(replies.first->value().at("context_lost") == true);
  REQUIRE(replies.idle_in_handler.has_value());
  CHECK_FALSE(*replies.idle_in_handler);
  CHECK(*replies.closing_in_handler);
  // The request made anyway is refused at once, never written to the dying worker.
  REQUIRE(replies.second.has_value());
  REQUIRE_FALSE(replies.second->ok());
  CHECK(replies.second->error().code == ktune::ErrorCode::worker_gone);
  CHECK_THAT(replies.second->error().message, Contains("is exiting"));
  CHECK(replies.exited);
}

TEST_CASE("a worker whose reply does not say exiting stays idle for the next request", "[daemon]") {
  test::TempDir dir;
  Harness h;
  const Replies replies = drive(h, fake_worker(dir, R"("outcome":{"status":"ok"})", "0.5"));
  REQUIRE(replies.first.has_value());
  REQUIRE(replies.first->ok());
  REQUIRE(replies.idle_in_handler.has_value());
  CHECK(*replies.idle_in_handler);
  CHECK_FALSE(*replies.closing_in_handler);
  // The fake answers one request only: the second is lost when it exits.
  REQUIRE(replies.second.has_value());
  REQUIRE_FALSE(replies.second->ok());
  CHECK(replies.second->error().code == ktune::ErrorCode::worker_gone);
  CHECK_THAT(replies.second->error().message, Contains("exited with status 3"));
  CHECK(replies.exited);
}

TEST_CASE("a worker that says it is exiting and stays is killed", "[daemon]") {
  test::TempDir dir;
  Harness h;
  const Replies replies = drive(h, fake_worker(dir, R"("exiting":true,"outcome":{"status":"crash"})", "60"));
  REQUIRE(replies.first.has_value());
  CHECK(replies.first->ok());
  CHECK(replies.exited);
}

TEST_CASE("a GPU lane's measurement lock is named by its board's UUID, else its visible ordinal",
          "[daemon]") {
  test::TempDir dir, locks;
  // Writes its command line to args-<lane>.txt, answers one request and exits.
  const auto path = dir.write("args-worker.sh",
                              "#!/bin/sh\n"
                              "echo \"$@\" > \"$(dirname \"$0\")/args-$CUDA_VISIBLE_DEVICES.txt\"\n"
                              "echo '{\"ready\":true,\"pid\":'$$',\"role\":\"bench\"}' >&3\n"
                              "read -r line <&3\n"
                              "id=$(echo \"$line\" | sed -n 's/^{\"id\":\\([0-9]*\\),.*/\\1/p')\n"
                              "echo '{\"id\":'\"$id\"',\"ok\":true,\"outcome\":{}}' >&3\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  Harness h;
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  WorkerPool pool(h.io, h.children, path.string(), 1, std::chrono::milliseconds(0), 0, locks.str());
  pool.add_lane("cuda:0", {}, "GPU-6f1c2e0a-9b3d-4102-a7ff-00102030405e");
  pool.add_lane("cuda:1");
  int replies = 0;
  for (const std::string lane : {"cuda:0", "cuda:1"}) {
    Work work;
    work.op = "bench";
    work.job = nlohmann::json::object();
    work.on_reply = [&](Result<nlohmann::json>, const Delivery&) {
      if (++replies == 2) h.done = true;
    };
    pool.submit(lane, std::move(work));
  }
  for (int i = 0; i < 200 && replies < 2; ++i) h.io.run_for(std::chrono::milliseconds(50));
  REQUIRE(replies == 2);
  auto args_of = [&](const std::string& visible) {
    std::ifstream in(dir.path() / ("args-" + visible + ".txt"));
    std::string line;
    std::getline(in, line);
    return line;
  };
  CHECK_THAT(args_of("0"), Contains("--measure-lock " + locks.str() +
                                    "/ktune-measure-GPU-6f1c2e0a-9b3d-4102-a7ff-00102030405e.lock"));
  CHECK_THAT(args_of("1"), Contains("--measure-lock " + locks.str() + "/ktune-measure-cuda1.lock"));
}

TEST_CASE("a compile_batch request carries its jobs as \"jobs\"", "[daemon]") {
  test::TempDir dir;
  // Answers one request with the request itself as the outcome, then exits.
  const auto path = dir.write("echo-worker.sh",
                              "#!/bin/sh\n"
                              "echo '{\"ready\":true,\"pid\":'$$',\"role\":\"compile\"}' >&3\n"
                              "read -r line <&3\n"
                              "id=$(echo \"$line\" | sed -n 's/^{\"id\":\\([0-9]*\\),.*/\\1/p')\n"
                              "echo '{\"id\":'\"$id\"',\"ok\":true,\"outcome\":'\"$line\"'}' >&3\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  Harness h;
  auto spawned = WorkerProcess::spawn(h.io, h.children, path.string(), WorkerRole::compile, {},
                                      [&](WorkerProcess&) { h.done = true; });
  REQUIRE(spawned.ok());
  std::optional<Result<nlohmann::json>> reply;
  const nlohmann::json jobs = nlohmann::json::array({{{"kernel", "a"}}, {{"kernel", "b"}}});
  spawned.value()->request(k_compile_batch, jobs,
                           [&](Result<nlohmann::json> r) { reply = std::move(r); });
  for (int i = 0; i < 200 && !h.done; ++i) h.io.run_for(std::chrono::milliseconds(50));
  REQUIRE(reply.has_value());
  REQUIRE(reply->ok());
  CHECK(reply->value().at("op") == "compile_batch");
  CHECK(reply->value().at("jobs") == jobs);
  CHECK_FALSE(reply->value().contains("job"));
}

namespace {

// A compile worker running the shell script `body` after its ready line; `exited` is set (and
// the harness done) when it exits.
std::shared_ptr<WorkerProcess> script_worker(Harness& h, const test::TempDir& dir,
                                             const std::string& body, bool& exited) {
  const auto path = dir.write("script-worker.sh",
                              "#!/bin/sh\n"
                              "echo '{\"ready\":true,\"pid\":'$$',\"role\":\"compile\"}' >&3\n" +
                                  body);
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  auto spawned = WorkerProcess::spawn(h.io, h.children, path.string(), WorkerRole::compile, {},
                                      [&](WorkerProcess&) {
                                        exited = true;
                                        h.done = true;
                                      });
  REQUIRE(spawned.ok());
  return spawned.value();
}

} // namespace

TEST_CASE("a paused request takes no CPU and is not killed for the time it was stopped",
          "[daemon]") {
  test::TempDir dir;
  Harness h;
  // Answers its request after 0.5 s of its own time, then waits for EOF.
  bool exited = false;
  const auto worker = script_worker(h, dir,
                                    "read -r line <&3\n"
                                    "sleep 0.5\n"
                                    "echo '{\"id\":1,\"ok\":true,\"outcome\":{}}' >&3\n"
                                    "read -r line <&3\n",
                                    exited);
  std::optional<Result<nlohmann::json>> reply;
  worker->request("compile", nlohmann::json::object(),
                  [&](Result<nlohmann::json> r) { reply = std::move(r); },
                  std::chrono::milliseconds(1000));
  worker->pause();
  CHECK(worker->paused());
  // Stopped for 1.5 s, past the request's 1 s deadline.
  asio::steady_timer stopped(h.io, std::chrono::milliseconds(1500));
  char state_while_paused = '?';
  stopped.async_wait([&](const boost::system::error_code&) {
    state_while_paused = test::process_state(worker->pid());
    worker->resume();
  });
  while (!reply && h.io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  CHECK(state_while_paused == 'T');
  CHECK_FALSE(worker->paused());
  REQUIRE(reply.has_value());
  CHECK(reply->ok());  // the deadline stopped with it
  CHECK(worker->paused_time() >= std::chrono::milliseconds(1400));
  worker->terminate();
  while (!exited && h.io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  CHECK(exited);
}

TEST_CASE("a paused worker that is terminated exits", "[daemon]") {
  test::TempDir dir;
  Harness h;
  bool exited = false;
  const auto worker = script_worker(h, dir, "read -r line <&3\nsleep 60\n", exited);
  worker->request("compile", nlohmann::json::object(), [](Result<nlohmann::json>) {});
  h.io.run_for(std::chrono::milliseconds(100));
  worker->pause();
  REQUIRE(worker->paused());
  worker->terminate();  // SIGTERM stays pending in a stopped group unless it is continued
  const auto start = std::chrono::steady_clock::now();
  while (!exited && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    h.io.run_for(std::chrono::milliseconds(50));
    h.io.restart();
  }
  CHECK(exited);
}

TEST_CASE("a worker stopped right after writing its reply is continued when the reply is read",
          "[daemon]") {
  test::TempDir dir;
  Harness h;
  bool exited = false;
  const auto worker = script_worker(h, dir,
                                    "read -r line <&3\n"
                                    "sleep 0.1\n"
                                    "echo '{\"id\":1,\"ok\":true,\"outcome\":{}}' >&3\n"
                                    "read -r line <&3\n"
                                    "echo '{\"id\":2,\"ok\":true,\"outcome\":{}}' >&3\n"
                                    "read -r line <&3\n",
                                    exited);
  std::optional<Result<nlohmann::json>> first, second;
  worker->request("compile", nlohmann::json::object(),
                  [&](Result<nlohmann::json> r) { first = std::move(r); });
  h.io.run_for(std::chrono::milliseconds(20));  // the request goes out
  h.io.restart();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the reply is written, unread
  REQUIRE_FALSE(first.has_value());
  worker->pause();
  REQUIRE(worker->paused());
  while (!first && h.io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  REQUIRE(first.has_value());
  CHECK_FALSE(worker->paused());
  CHECK(test::process_state(worker->pid()) != 'T');
  worker->request("compile", nlohmann::json::object(),
                  [&](Result<nlohmann::json> r) { second = std::move(r); },
                  std::chrono::milliseconds(5000));
  while (!second && h.io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  REQUIRE(second.has_value());
  CHECK(second->ok());
  worker->terminate();
  while (!exited && h.io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
}

TEST_CASE("a worker's stderr enters the log a record per line, labelled and printable",
          "[daemon][log]") {
  test::TempDir dir;
  const auto path = dir.write("noisy-worker.sh",
                              "#!/bin/sh\n"
                              "echo '{\"ready\":true,\"pid\":'$$',\"role\":\"compile\"}' >&3\n"
                              "read -r line <&3\n"
                              "printf 'plain words\\n' >&2\n"
                              "printf '2026-01-01T00:00:00.000Z error forged by a candidate\\n' >&2\n"
                              "printf 'bell\\007 escape\\033[31m and \\377 \\342\\200\\230quoted\\342\\200\\231' >&2\n"
                              "echo '{\"id\":1,\"ok\":true,\"outcome\":{}}' >&3\n"
                              "read -r line <&3\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  // ktuned's log is its stderr: caught in a file for the length of the request.
  const std::string log_path = dir.str() + "/log.txt";
  const int saved = ::dup(2);
  const int file = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(::dup2(file, 2) == 2);
  ::close(file);
  {
    Harness h;
    auto spawned = WorkerProcess::spawn(h.io, h.children, path.string(), WorkerRole::compile, {},
                                        [&](WorkerProcess&) { h.done = true; });
    REQUIRE(spawned.ok());
    std::shared_ptr<WorkerProcess> worker = spawned.value();
    worker->set_owner("job 7");
    bool answered = false;
    worker->request("compile", {{"kernel", "gemm"}, {"defines", {{"BM", 64}}}},
                    [&](Result<nlohmann::json>) {
                      answered = true;
                      worker->terminate();
                    });
    h.io.run_for(std::chrono::seconds(20));
    CHECK(answered);
  }
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(log_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<std::string> from_worker;
  for (const auto& line : lines) {
    // Every line of the log is a record of ktuned's: a timestamp, then a level.
    CHECK(line.size() > 25);
    CHECK(line[4] == '-');
    CHECK(line[23] == 'Z');
    if (line.find("[job 7 compile gemm BM=64]: ") != std::string::npos) from_worker.push_back(line);
  }
  REQUIRE(from_worker.size() == 3);
  CHECK_THAT(from_worker[0], Contains("compile worker") && Contains(": plain words"));
  CHECK_THAT(from_worker[1], Contains("]: 2026-01-01T00:00:00.000Z error forged"));
  CHECK_THAT(from_worker[2], Contains("bell\\x07 escape\\x1b[31m and \\xff \xe2\x80\x98quoted\xe2\x80\x99"));
}
