// ktuned's settings: TOML file keys, errors naming file and key, and the layering of defaults,
// file and command line (daemon/config.hpp).
#include "daemon/config.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using ktune::daemon::apply_config_text;
using ktune::daemon::CommandLine;
using ktune::daemon::DaemonConfig;
using ktune::daemon::parse_command_line;
using ktune::daemon::resolve_config;
using ktune::test::TempDir;

namespace {

std::variant<CommandLine, int> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ktuned");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

} // namespace

TEST_CASE("config file keys", "[daemon][config]") {
  DaemonConfig config;

  SECTION("every key is read; relative paths are anchored at the file's directory") {
    const auto r = apply_config_text(R"(
[daemon]
socket = "run/k.sock"
db = "/var/lib/ktune/k.db"
cache_dir = "cache"
kernel_dirs = ["a", "/b"]
compile_workers = 3
max_message_bytes = 4096
[measure]
min_samples = 3
max_samples = 7
target_rsd = 0.5
min_time_s = 0
max_time_s = 0.25
warmup_ms = 1
flush_cache = false
seed = 9
)",
                                     "/etc/ktune/ktuned.toml", "/etc/ktune", config);
    INFO((r ? std::string() : r.error().message));
    REQUIRE(r.ok());
    CHECK(config.socket == "/etc/ktune/run/k.sock");
    CHECK(config.db == "/var/lib/ktune/k.db");
    CHECK(config.cache_dir == "/etc/ktune/cache");
    CHECK(config.kernel_dirs == std::vector<std::string>{"/etc/ktune/a", "/b"});
    CHECK(config.compile_workers == 3);
    CHECK(config.max_message_bytes == 4096);
    CHECK(config.measure.min_samples == 3);
    CHECK(config.measure.max_samples == 7);
    CHECK(config.measure.target_rsd == 0.5);
    CHECK(config.measure.min_time_s == 0.0);
    CHECK(config.measure.max_time_s == 0.25);
    CHECK(config.measure.warmup_ms == 1.0);
    CHECK_FALSE(config.measure.flush_cache);
    CHECK(config.measure.seed == 9u);
  }
  SECTION("an unknown key names the file and the key") {
    const auto r = apply_config_text("[daemon]\nsockett = \"x\"\n", "ktuned.toml", "/", config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ktune::ErrorCode::config_error);
    CHECK(r.error().message.find("ktuned.toml") != std::string::npos);
    CHECK(r.error().message.find("[daemon].sockett") != std::string::npos);
  }
  SECTION("an unknown table is an error") {
    const auto r = apply_config_text("[deamon]\nsocket = \"x\"\n", "ktuned.toml", "/", config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("deamon") != std::string::npos);
  }
  SECTION("a value of the wrong type or range says what was expected") {
    auto r = apply_config_text("[measure]\nmin_samples = \"ten\"\n", "k.toml", "/", config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("[measure].min_samples: expected an integer, found a string") !=
          std::string::npos);
    r = apply_config_text("[daemon]\ncompile_workers = -1\n", "k.toml", "/", config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("compile_workers") != std::string::npos);
  }
  SECTION("a syntax error gives line and column") {
    const auto r = apply_config_text("[daemon]\ncompile_workers = = 2\n", "k.toml", "/", config);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.rfind("k.toml:2:", 0) == 0);
  }
}

TEST_CASE("settings are layered: defaults then file then command line", "[daemon][config]") {
  TempDir dir;
  const auto file = dir.write("ktuned.toml", "[daemon]\ncompile_workers = 3\nkernel_dirs = [\"k\"]\n"
                                             "[measure]\nmin_samples = 4\n");
  ktune::PathEnv env;
  env.ktune_home = dir.str();

  SECTION("the file overrides the defaults, the command line the file") {
    auto cl = parse({"--config", file.string(), "--compile-workers", "2", "--kernel-dir", "/x",
                     "--kernel-dir", "/y", "--ready-fd", "5", "--log-level", "debug"});
    REQUIRE(std::holds_alternative<CommandLine>(cl));
    const auto config = resolve_config(std::get<CommandLine>(cl), env, "/opt/ktune/bin");
    INFO((config ? std::string() : config.error().message));
    REQUIRE(config.ok());
    CHECK(config->socket == dir.str() + "/ktuned.sock");
    CHECK(config->db == dir.str() + "/ktune.db");
    CHECK(config->compile_workers == 2);
    // --kernel-dir adds to the file's list.
    CHECK(config->kernel_dirs == std::vector<std::string>{dir.str() + "/k", "/x", "/y"});
    CHECK(config->measure.min_samples == 4);
    CHECK(config->ready_fd == 5);
    CHECK(config->log_level == ktune::log::Level::debug);
    CHECK(config->worker_path == "/opt/ktune/bin/ktune-worker");
    CHECK(config->config_path == file.string());
  }
  SECTION("without overrides the file's values stand; 0 compile workers means cores - 1") {
    dir.write("zero.toml", "[daemon]\ncompile_workers = 0\n");
    auto cl = parse({"--config", (dir.path() / "zero.toml").string(), "--worker", "/w/kw"});
    REQUIRE(std::holds_alternative<CommandLine>(cl));
    const auto config = resolve_config(std::get<CommandLine>(cl), env, "/opt/ktune/bin");
    REQUIRE(config.ok());
    CHECK(config->compile_workers >= 1);
    CHECK(config->worker_path == "/w/kw");
    CHECK(config->kernel_dirs.size() == 1);
  }
  SECTION("--only-kernel-dir replaces the list, --kernel-dir still adds") {
    auto cl = parse({"--config", file.string(), "--only-kernel-dir", "/x", "--kernel-dir", "/y",
                     "--kernel-dir", "/x"});
    REQUIRE(std::holds_alternative<CommandLine>(cl));
    const auto config = resolve_config(std::get<CommandLine>(cl), env, "/opt/ktune/bin");
    REQUIRE(config.ok());
    CHECK(config->kernel_dirs == std::vector<std::string>{"/x", "/y"});
  }
  SECTION("without a config file: the built-in defaults and the shipped families next to ktuned") {
    auto cl = parse({"--kernel-dir", "/extra"});
    REQUIRE(std::holds_alternative<CommandLine>(cl));
    const auto config = resolve_config(std::get<CommandLine>(cl), env, "/opt/ktune/bin");
    INFO((config ? std::string() : config.error().message));
    REQUIRE(config.ok());
    CHECK(config->config_path.empty());
    CHECK(config->kernel_dirs ==
          std::vector<std::string>{"/opt/ktune/share/ktune/kernels", "/extra"});
    CHECK(ktune::daemon::default_config_path("/opt/ktune/bin") == "/opt/ktune/share/ktune/ktuned.toml");
  }
  SECTION("a missing config file is an error naming it") {
    auto cl = parse({"--config", (dir.path() / "absent.toml").string()});
    REQUIRE(std::holds_alternative<CommandLine>(cl));
    const auto config = resolve_config(std::get<CommandLine>(cl), env, "/opt/ktune/bin");
    REQUIRE_FALSE(config.ok());
    CHECK(config.error().message.find("absent.toml") != std::string::npos);
  }
  SECTION("inconsistent measure settings are refused") {
    dir.write("bad.toml", "[measure]\nmin_samples = 10\nmax_samples = 5\n");
    auto cl = parse({"--config", (dir.path() / "bad.toml").string()});
    REQUIRE(std::holds_alternative<CommandLine>(cl));
    const auto config = resolve_config(std::get<CommandLine>(cl), env, "/opt/ktune/bin");
    REQUIRE_FALSE(config.ok());
    CHECK(config.error().message.find("max_samples") != std::string::npos);
  }
  SECTION("a bad option is a usage error") {
    auto cl = parse({"--no-such-option"});
    REQUIRE(std::holds_alternative<int>(cl));
    CHECK(std::get<int>(cl) != 0);
  }
}
