// Descriptors (daemon/descriptors.hpp): under `ulimit -n 64`, 200 clients connect at once; every
// connection is answered at once (a lookup result, or too_many_connections) instead of waiting
// in the backlog, and every lookup on an open connection is answered. When the descriptors run
// out while it serves (its limit lowered under it), waiting connections are refused on the
// reserve descriptor and lookups on open ones go on. A max_connections that cannot fit stops
// the start.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/integration/tool_run.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string k_lookup =
    R"({"v":1,"id":1,"op":"lookup","kernel":"reduce_sum","shape":"N=4096","device":"cpu"})" "\n";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The lowest descriptor number `pid` has free: with its limit lowered to it, its next open or
// accept fails with EMFILE.
int lowest_free_descriptor(pid_t pid) {
  std::set<int> used;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    used.insert(std::stoi(e.path().filename().string()));
  }
  int fd = 0;
  while (used.count(fd) != 0) ++fd;
  return fd;
}

// Sends a lookup on each connection and reads one line from each: "ok", a refusal's error code,
// or "no answer".
std::vector<std::string> ask_all(std::vector<Connection>& conns) {
  for (auto& c : conns) (void)c.send_raw(k_lookup);
  std::vector<std::string> answers;
  for (auto& c : conns) {
    auto line = c.read_line(10s);
    if (!line) {
      answers.push_back("no answer: " + line.error().message);
      continue;
    }
    const json reply = json::parse(*line);
    answers.push_back(reply.value("ok", false) ? "ok" : reply.at("error").at("code").get<std::string>());
  }
  return answers;
}

} // namespace

TEST_CASE("under ulimit -n 64 with 200 connections every connection is answered at once and "
          "every lookup on an open one",
          "[integration][hostile][descriptors]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\ncompile_workers = 1\n");
  const std::string log = home.str() + "/stderr.txt";
  DaemonProcess daemon(home.str(),
                       {"--config", home.str() + "/ktuned.toml", "--only-kernel-dir",
                        ktune::test::source_path("/kernels_src")},
                       log, {"/usr/bin/prlimit", "--nofile=64:64", "--"});
  REQUIRE(daemon.wait_ready(60s));
  CHECK_THAT(read_text(log), Catch::Contains("instead of 256"));

  std::vector<Connection> conns;
  for (int i = 0; i < 200; ++i) {
    auto c = Connection::connect(daemon.socket());
    REQUIRE(c.ok());
    conns.push_back(std::move(*c));
  }
  const auto answers = ask_all(conns);
  std::vector<Connection> open;
  int refused = 0;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    INFO("connection " << i << ": " << answers[i]);
    CHECK((answers[i] == "ok" || answers[i] == "too_many_connections"));
    if (answers[i] == "ok") open.push_back(std::move(conns[i]));
    if (answers[i] == "too_many_connections") ++refused;
  }
  WARN(open.size() << " connections served, " << refused << " refused at once");
  CHECK(open.size() >= 8);
  for (const auto& answer : ask_all(open)) CHECK(answer == "ok");

  SECTION("descriptors running out while it serves") {
    // The limit lowered under it: the next connection meets EMFILE.
    const int now = lowest_free_descriptor(daemon.pid());
    const auto lowered = ktune::test::run_tool(
        {"/usr/bin/prlimit", "--pid", std::to_string(daemon.pid()),
         "--nofile=" + std::to_string(now) + ":" + std::to_string(now)},
        {"PATH=/usr/bin:/bin"}, 30s);
    INFO(lowered.output);
    REQUIRE(lowered.code == 0);
    std::vector<Connection> more;
    for (int i = 0; i < 50; ++i) {
      auto c = Connection::connect(daemon.socket());
      REQUIRE(c.ok());
      more.push_back(std::move(*c));
    }
    for (auto& c : more) {
      auto line = c.read_line(10s);
      INFO((line ? *line : line.error().message));
      REQUIRE(line.ok());
      CHECK_THAT(*line, Catch::Contains("too_many_connections") &&
                            Catch::Contains("no file descriptor left"));
    }
    for (const auto& answer : ask_all(open)) CHECK(answer == "ok");
    // Refusals are logged, not once per connection.
    const std::string text = read_text(log);
    std::size_t lines = 0;
    for (std::size_t at = text.find("out of file descriptors"); at != std::string::npos;
         at = text.find("out of file descriptors", at + 1)) {
      ++lines;
    }
    CHECK(lines <= 2);
  }
}

TEST_CASE("a max_connections that cannot fit the descriptor limit stops the start",
          "[integration][hostile][descriptors]") {
  TempDir home;
  home.write("ktuned.toml", "[limits]\nmax_connections = 500\n");
  const std::string log = home.str() + "/stderr.txt";
  DaemonProcess daemon(home.str(),
                       {"--config", home.str() + "/ktuned.toml", "--only-kernel-dir",
                        ktune::test::source_path("/kernels_src")},
                       log, {"/usr/bin/prlimit", "--nofile=128:128", "--"});
  CHECK_FALSE(daemon.wait_ready(60s));
  CHECK(daemon.wait_exit(30s).has_value());
  const std::string text = read_text(log);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("max_connections = 500 cannot fit"));
  CHECK_THAT(text, Catch::Contains("128 file descriptors"));
}

TEST_CASE("after a worker outage the CPU is found again by the next tunes, and a known CPU is "
          "never forgotten",
          "[integration][hostile][devices]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\ncompile_workers = 1\nworker_idle_s = 0.2\n");
  const std::string outage = home.str() + "/outage";
  const auto worker = home.write("worker.sh", "#!/bin/sh\n[ -e " + outage + " ] && exit 1\nexec " +
                                                  ktune::test::bin_path("/ktune-worker") + " \"$@\"\n");
  fs::permissions(worker, fs::perms::owner_all);
  std::ofstream(outage) << "down\n";
  DaemonProcess daemon(home.str(), {"--config", home.str() + "/ktuned.toml", "--only-kernel-dir",
                                    ktune::test::source_path("/kernels_src"), "--worker", worker.string()});
  REQUIRE(daemon.wait_ready(60s));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  const json tune = {{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=4096"}, {"budget", 1}};
  {
    auto reply = c.request(tune, {}, 30s);
    REQUIRE(reply.ok());
    INFO(reply->dump());
    CHECK(reply->at("error").at("code") == "no_device");
  }
  fs::remove(outage);
  // Nobody asks for `devices`: the tunes themselves get the CPU found again.
  bool accepted = false;
  for (const auto until = std::chrono::steady_clock::now() + 20s;
       !accepted && std::chrono::steady_clock::now() < until;) {
    auto reply = c.request(tune, {}, 30s);
    REQUIRE(reply.ok());
    accepted = reply->value("ok", false);
    if (!accepted) {
      INFO(reply->dump());
      CHECK(reply->at("error").at("code") == "no_device");
      std::this_thread::sleep_for(250ms);
    }
  }
  CHECK(accepted);
  // Workers down again, and the devices asked for: the CPU found before stays.
  std::ofstream(outage) << "down\n";
  std::this_thread::sleep_for(500ms);  // the idle workers have exited
  auto devices = c.request({{"op", "devices"}}, {}, 60s);
  REQUIRE(devices.ok());
  INFO(devices->dump());
  CHECK(devices->dump().find("\"name\":\"cpu\"") != std::string::npos);
  auto again = c.request({{"op", "tune"}, {"kernel", "reduce_sum"}, {"shape", "N=8192"}, {"budget", 1}},
                         {}, 30s);
  REQUIRE(again.ok());
  INFO(again->dump());
  CHECK(again->value("ok", false));
}

TEST_CASE("the shipped ktuned.toml starts under ulimit -n 64 (max_connections left to fit)",
          "[integration][hostile][descriptors]") {
  TempDir home;
  const std::string log = home.str() + "/stderr.txt";
  DaemonProcess daemon(home.str(),
                       {"--config", ktune::test::source_path("/configs/ktuned.toml"), "--only-kernel-dir",
                        ktune::test::source_path("/kernels_src")},
                       log, {"/usr/bin/prlimit", "--nofile=64:64", "--"});
  INFO(read_text(log));
  CHECK(daemon.wait_ready(60s));
}
