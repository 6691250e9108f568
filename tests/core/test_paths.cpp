#include "core/paths.hpp"

#include <catch2/catch.hpp>

TEST_CASE("core/paths: resolve_paths", "[core][paths]") {
  SECTION("KTUNE_HOME puts everything under it") {
    ktune::PathEnv env{"/srv/kt", "/run/user/1000", "/home/u/.state", "/home/u", 1000};
    const auto p = ktune::resolve_paths(env);
    CHECK(p.runtime_dir == "/srv/kt");
    CHECK(p.socket == "/srv/kt/ktuned.sock");
    CHECK(p.lock_file == "/srv/kt/ktuned.lock");
    CHECK(p.pid_file == "/srv/kt/ktuned.pid");
    CHECK(p.state_dir == "/srv/kt");
    CHECK(p.db == "/srv/kt/ktune.db");
    CHECK(p.cache_dir == "/srv/kt/cache");
    CHECK(p.log_dir == "/srv/kt/log");
  }
  SECTION("XDG directories") {
    ktune::PathEnv env{"", "/run/user/1000", "/home/u/.state", "/home/u", 1000};
    const auto p = ktune::resolve_paths(env);
    CHECK(p.runtime_dir == "/run/user/1000/ktune");
    CHECK(p.socket == "/run/user/1000/ktune/ktuned.sock");
    CHECK(p.lock_file == "/run/user/1000/ktune/ktuned.lock");
    CHECK(p.state_dir == "/home/u/.state/ktune");
    CHECK(p.db == "/home/u/.state/ktune/ktune.db");
    CHECK(p.cache_dir == "/home/u/.state/ktune/cache");
  }
  SECTION("neither: /tmp and HOME") {
    ktune::PathEnv env{"", "", "", "/home/u", 1234};
    const auto p = ktune::resolve_paths(env);
    CHECK(p.runtime_dir == "/tmp/ktune-1234");
    CHECK(p.socket == "/tmp/ktune-1234/ktuned.sock");
    CHECK(p.state_dir == "/home/u/.local/state/ktune");
    CHECK(p.log_dir == "/home/u/.local/state/ktune/log");
  }
  SECTION("no HOME either") {
    ktune::PathEnv env{"", "", "", "", 7};
    const auto p = ktune::resolve_paths(env);
    CHECK(p.runtime_dir == "/tmp/ktune-7");
    CHECK(p.db.rfind("/tmp/ktune-7/", 0) == 0);
  }
}
