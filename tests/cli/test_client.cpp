#include "client/client.hpp"
#include "tests/cli/fake_daemon.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

using ktune::Connection;
using ktune::test::FakeDaemon;
using ktune::test::FakeResponse;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

// Replies to every request with its own body as the result.
FakeResponse echo(const std::string& line) {
  return {{FakeDaemon::ok(line, json::parse(line))}};
}

} // namespace

TEST_CASE("Connection: requests and replies", "[client]") {
  ktune::test::TempDir dir;
  const std::string socket = dir.str() + "/d.sock";

  SECTION("adds v and a fresh id, and returns the reply carrying that id") {
    FakeDaemon daemon(socket, echo);
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    auto first = conn->request({{"op", "stats"}});
    REQUIRE(first.ok());
    CHECK((*first)["ok"] == true);
    CHECK((*first)["result"]["v"] == 1);
    CHECK((*first)["result"]["op"] == "stats");
    auto second = conn->request({{"op", "stats"}});
    REQUIRE(second.ok());
    CHECK((*second)["id"].is_number_integer());
    CHECK((*second)["id"] != (*first)["id"]);
  }

  SECTION("keeps an id the caller set") {
    FakeDaemon daemon(socket, echo);
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    auto reply = conn->request({{"op", "lookup"}, {"id", "abc"}});
    REQUIRE(reply.ok());
    CHECK((*reply)["id"] == "abc");
  }

  SECTION("skips replies for other ids and routes only its own events to on_event") {
    FakeDaemon daemon(socket, [](const std::string& line) {
      json other = json::parse(FakeDaemon::ok(line, {{"which", "other"}}));
      other["id"] = 999;
      json foreign_event = json::parse(FakeDaemon::event(line, {{"done", 7}}));
      foreign_event["id"] = 998;
      return FakeResponse{{other.dump(), FakeDaemon::event(line, {{"done", 1}}), foreign_event.dump(),
                           FakeDaemon::event(line, {{"done", 2}}),
                           FakeDaemon::ok(line, {{"which", "mine"}})}};
    });
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    std::vector<json> events;
    auto reply = conn->request({{"op", "tune"}, {"wait", true}},
                               [&](const json& e) { events.push_back(e); });
    REQUIRE(reply.ok());
    CHECK((*reply)["result"]["which"] == "mine");
    REQUIRE(events.size() == 2);
    CHECK(events[0]["data"]["done"] == 1);
    CHECK(events[1]["data"]["done"] == 2);
  }

  SECTION("passes an error reply through whole") {
    FakeDaemon daemon(socket, [](const std::string& line) {
      return FakeResponse{{FakeDaemon::error(line, "unknown_kernel", "no kernel 'x'")}};
    });
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    auto reply = conn->request({{"op", "lookup"}});
    REQUIRE(reply.ok());
    CHECK((*reply)["ok"] == false);
    CHECK((*reply)["error"]["code"] == "unknown_kernel");
  }

  SECTION("times out when no reply comes") {
    FakeDaemon daemon(socket, [](const std::string&) { return FakeResponse{}; });
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    auto reply = conn->request({{"op", "stats"}}, {}, milliseconds(100));
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().code == ktune::ErrorCode::io_error);
    CHECK_THAT(reply.error().message, Catch::Contains("timed out after 100 ms") &&
                                          Catch::Contains("'stats'"));
  }

  SECTION("reports a connection the daemon closes") {
    FakeDaemon daemon(socket, [](const std::string&) { return FakeResponse{{}, true}; });
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    auto reply = conn->request({{"op", "stats"}}, {}, milliseconds(5000));
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().code == ktune::ErrorCode::io_error);
    CHECK_THAT(reply.error().message, Catch::Contains("closed by the daemon"));
  }

  SECTION("rejects a line that is not JSON") {
    FakeDaemon daemon(socket, [](const std::string&) { return FakeResponse{{"this is not json"}}; });
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    auto reply = conn->request({{"op", "stats"}}, {}, milliseconds(5000));
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().code == ktune::ErrorCode::io_error);
    CHECK_THAT(reply.error().message, Catch::Contains("this is not json"));
  }

  SECTION("rejects a request that is not an object") {
    FakeDaemon daemon(socket, echo);
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    auto reply = conn->request(json::array({1, 2}));
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().code == ktune::ErrorCode::bad_request);
  }
}

TEST_CASE("Connection: raw lines", "[client]") {
  ktune::test::TempDir dir;
  const std::string socket = dir.str() + "/d.sock";
  // Answers each line with two lines, the second sent in a separate write.
  FakeDaemon daemon(socket, [](const std::string& line) {
    return FakeResponse{{"got " + line, "second\r"}};
  });
  auto conn = Connection::connect(socket);
  REQUIRE(conn.ok());

  SECTION("send_raw and read_line round trip, trimming a trailing CR") {
    REQUIRE(conn->send_raw("{broken\n").ok());
    auto first = conn->read_line(milliseconds(5000));
    REQUIRE(first.ok());
    CHECK(*first == "got {broken");
    auto second = conn->read_line(milliseconds(5000));
    REQUIRE(second.ok());
    CHECK(*second == "second");
  }

  SECTION("a line sent in pieces arrives whole") {
    REQUIRE(conn->send_raw("hel").ok());
    REQUIRE(conn->send_raw("lo\n").ok());
    auto line = conn->read_line(milliseconds(5000));
    REQUIRE(line.ok());
    CHECK(*line == "got hello");
  }

  SECTION("read_line times out when nothing arrives") {
    auto line = conn->read_line(milliseconds(50));
    REQUIRE_FALSE(line.ok());
    CHECK_THAT(line.error().message, Catch::Contains("timed out after 50 ms"));
  }

  SECTION("a moved-from connection reports that it is closed") {
    Connection moved = std::move(*conn);
    auto reply = conn->request({{"op", "stats"}});
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().code == ktune::ErrorCode::io_error);
    REQUIRE(moved.send_raw("x\n").ok());
    auto line = moved.read_line(milliseconds(5000));
    REQUIRE(line.ok());
    CHECK(*line == "got x");
  }
}

TEST_CASE("Connection: nothing listening", "[client]") {
  ktune::test::TempDir dir;

  SECTION("a missing socket file is not_running and names the path") {
    const std::string socket = dir.str() + "/missing.sock";
    auto conn = Connection::connect(socket, milliseconds(500));
    REQUIRE_FALSE(conn.ok());
    CHECK(conn.error().code == ktune::ErrorCode::not_running);
    CHECK_THAT(conn.error().message, Catch::Contains(socket));
  }

  SECTION("a stale socket file (no listener) is not_running") {
    const std::string socket = dir.str() + "/stale.sock";
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket.c_str(), socket.size());
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    ::close(fd);
    auto conn = Connection::connect(socket, milliseconds(500));
    REQUIRE_FALSE(conn.ok());
    CHECK(conn.error().code == ktune::ErrorCode::not_running);
  }

  SECTION("a path too long for sun_path is an io_error naming the limit") {
    const std::string socket = dir.str() + "/" + std::string(200, 'x');
    auto conn = Connection::connect(socket, milliseconds(500));
    REQUIRE_FALSE(conn.ok());
    CHECK(conn.error().code == ktune::ErrorCode::io_error);
    CHECK_THAT(conn.error().message, Catch::Contains("limit"));
  }
}
