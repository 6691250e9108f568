#include <catch2/catch.hpp>

#include "compiler/subprocess.hpp"

#include <csignal>
#include <fcntl.h>
#include <unistd.h>

using ktune::ProcessEnd;
using ktune::run_captured;

TEST_CASE("run_captured runs a program without a shell and captures its output", "[compiler]") {
  SECTION("stdout and stderr are captured together, with the exit status") {
    auto result = run_captured({"sh", "-c", "echo out; echo err >&2; exit 3"}, 1024);
    REQUIRE(result.ok());
    CHECK(result->end == ProcessEnd::exited);
    CHECK(result->code == 3);
    CHECK_FALSE(result->succeeded());
    CHECK_THAT(result->output, Catch::Contains("out\n") && Catch::Contains("err\n"));
    CHECK_FALSE(result->truncated);
  }

  SECTION("arguments are passed verbatim, not through a shell") {
    auto result = run_captured({"echo", "a; echo b", "$HOME"}, 1024);
    REQUIRE(result.ok());
    CHECK(result->succeeded());
    CHECK(result->output == "a; echo b $HOME\n");
  }

  SECTION("output beyond the limit is drained and dropped") {
    auto result = run_captured({"sh", "-c", "head -c 100000 /dev/zero"}, 100);
    REQUIRE(result.ok());
    CHECK(result->succeeded());
    CHECK(result->output.size() == 100);
    CHECK(result->truncated);
  }

  SECTION("a signal is reported") {
    auto result = run_captured({"sh", "-c", "kill -TERM $$"}, 1024);
    REQUIRE(result.ok());
    CHECK(result->end == ProcessEnd::signaled);
    CHECK(result->code == SIGTERM);
  }

  SECTION("a missing program is an error naming it") {
    auto result = run_captured({"/nonexistent/ktune-no-such-program"}, 1024);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().code == ktune::ErrorCode::spawn_failed);
    CHECK_THAT(result.error().message, Catch::Contains("ktune-no-such-program"));
  }

  SECTION("an empty command line is an error") {
    auto result = run_captured({}, 1024);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().code == ktune::ErrorCode::spawn_failed);
  }

  SECTION("stdin is /dev/null") {
    auto result = run_captured({"cat"}, 1024);
    REQUIRE(result.ok());
    CHECK(result->succeeded());
    CHECK(result->output.empty());
  }
}

TEST_CASE("UniqueFd closes what it owns", "[compiler]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  {
    ktune::UniqueFd read_end(fds[0]);
    ktune::UniqueFd moved(std::move(read_end));
    CHECK_FALSE(read_end.valid());
    CHECK(moved.get() == fds[0]);
  }
  CHECK(::fcntl(fds[0], F_GETFD) == -1);
  ktune::UniqueFd write_end(fds[1]);
  write_end.reset();
  CHECK(::fcntl(fds[1], F_GETFD) == -1);
}
