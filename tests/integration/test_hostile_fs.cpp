// A hostile machine's file system (core/safe_fs.hpp): another user who made ktune's runtime
// directory first, or who could write in its state directory, plants links to files of the user
// running ktune (here root's); ktuned and the CLI refuse to start with the reason and never write
// through a link. A link left in ktune's own directories is refused too. Under umask 000 every
// directory ktune makes is 0700. Foreign users need root (the links and directories are given to
// nobody); those cases are skipped with a warning otherwise.
#include "tests/support/paths.hpp"
#include "tests/integration/tool_run.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
using ktune::test::run_tool;
using ktune::test::TempDir;
using ktune::test::ToolRun;
namespace fs = std::filesystem;

namespace {

constexpr uid_t k_nobody = 65534;
constexpr auto k_tool_timeout = 60s;
const std::string k_precious = "precious: not for ktune to touch\n";

const std::string k_tiny_measure = R"(
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
)";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A user's layout without KTUNE_HOME: XDG_RUNTIME_DIR and XDG_STATE_HOME under a private temp
// directory, victims (files of the user running the test) beside them.
struct Machine {
  TempDir root;
  fs::path run = root.path() / "run";          // XDG_RUNTIME_DIR: the runtime dir is run/ktune
  fs::path state_home = root.path() / "state"; // XDG_STATE_HOME: the state dir is state/ktune
  fs::path victims = root.path() / "victims";

  Machine() {
    fs::create_directories(run);
    ::chmod(run.c_str(), 0700);
    fs::create_directories(victims);
    root.write("ktuned.toml", k_tiny_measure);
  }
  [[nodiscard]] fs::path runtime_dir() const { return run / "ktune"; }
  [[nodiscard]] fs::path state_dir() const { return state_home / "ktune"; }
  [[nodiscard]] std::vector<std::string> env() const {
    return {"PATH=/usr/bin:/bin", "HOME=" + (root.path() / "home").string(),
            "XDG_RUNTIME_DIR=" + run.string(), "XDG_STATE_HOME=" + state_home.string(),
            "KTUNE_AUTOSTART_IDLE_S=5"};
  }
  // A victim file and a link `link` to it (made by `owner` when given).
  fs::path plant(const fs::path& link, const std::string& victim_name, uid_t owner = ~0u) {
    const fs::path victim = victims / victim_name;
    std::ofstream(victim, std::ios::binary) << k_precious;
    ::chmod(victim.c_str(), 0644);
    fs::create_directories(link.parent_path());
    fs::create_symlink(victim, link);
    if (owner != ~0u) REQUIRE(::lchown(link.c_str(), owner, owner) == 0);
    return victim;
  }
  [[nodiscard]] std::vector<std::string> victim_changes() const {
    std::vector<std::string> changed;
    for (const auto& entry : fs::directory_iterator(victims)) {
      if (read_text(entry.path()) != k_precious) changed.push_back(entry.path().string());
    }
    return changed;
  }
  [[nodiscard]] ToolRun ktuned() const {
    return run_tool({ktune::test::bin_path("/ktuned"), "--config", (root.path() / "ktuned.toml").string(),
                     "--kernel-dir", ktune::test::source_path("/kernels_src")},
                    env(), k_tool_timeout);
  }
  [[nodiscard]] ToolRun ktune(std::vector<std::string> args, mode_t umask_value = 022) const {
    args.insert(args.begin(), ktune::test::bin_path("/ktune"));
    return run_tool(args, env(), k_tool_timeout, umask_value);
  }
  [[nodiscard]] ToolRun daemon_start(mode_t umask_value = 022) const {
    return ktune({"daemon", "start", "--config", (root.path() / "ktuned.toml").string(),
                  "--only-kernel-dir", ktune::test::source_path("/kernels_src")},
                 umask_value);
  }
};

bool root() { return ::geteuid() == 0; }

} // namespace

TEST_CASE("another user's runtime directory with links in it stops ktuned and the CLI before "
          "they open anything there",
          "[integration][hostile]") {
  if (!root()) {
    WARN("skipped: giving a directory to another uid needs root");
    return;
  }
  Machine m;
  const fs::path runtime = m.runtime_dir();
  fs::create_directories(runtime);
  ::chmod(runtime.c_str(), 0777);
  for (const char* name : {"ktuned.lock", "ktuned.pid", "ktuned.sock.start.lock", "ktuned.sock"}) {
    (void)m.plant(runtime / name, std::string("runtime-") + name, k_nobody);
  }
  REQUIRE(::chown(runtime.c_str(), k_nobody, k_nobody) == 0);

  const auto refused = [&](const ToolRun& run) {
    INFO(run.output);
    CHECK(run.code != 0);
    CHECK(run.code != -1);
    CHECK_THAT(run.output, Catch::Contains("refusing the directory " + runtime.string()));
    CHECK_THAT(run.output, Catch::Contains("uid 65534"));
  };
  SECTION("ktuned") { refused(m.ktuned()); }
  SECTION("a command that starts ktuned") { refused(m.ktune({"kernels"})); }
  SECTION("ktune daemon start") { refused(m.daemon_start()); }
  CHECK(m.victim_changes().empty());
}

TEST_CASE("a state directory another user could write, with links in it, stops the start",
          "[integration][hostile]") {
  if (!root()) {
    WARN("skipped: links made by another uid need root");
    return;
  }
  Machine m;
  const fs::path state = m.state_dir();
  fs::create_directories(state / "log");
  for (const char* name : {"ktune.db", "ktune.db-wal", "ktune.db-shm", "ktune.db-spill",
                           "ktune.db.identity", "log/ktuned.log", "log/ktuned.log.1"}) {
    std::string victim = name;
    std::replace(victim.begin(), victim.end(), '/', '-');
    (void)m.plant(state / name, "state-" + victim, k_nobody);
  }
  std::string expected;
  SECTION("writable by everyone (made under umask 000 by an older ktune)") {
    ::chmod(state.c_str(), 0777);
    ::chmod((state / "log").c_str(), 0777);
    expected = "its mode 0777 lets other users create files in it";
  }
  SECTION("owned by another user") {
    REQUIRE(::chown(state.c_str(), k_nobody, k_nobody) == 0);
    REQUIRE(::chown((state / "log").c_str(), k_nobody, k_nobody) == 0);
    expected = "is owned by uid 65534";
  }
  const ToolRun daemon = m.ktuned();
  INFO(daemon.output);
  CHECK(daemon.code != 0);
  CHECK_THAT(daemon.output, Catch::Contains(expected));
  const ToolRun start = m.daemon_start();
  INFO(start.output);
  CHECK(start.code != 0);
  CHECK_THAT(start.output, Catch::Contains(expected));
  CHECK(m.victim_changes().empty());
  // Nothing was made in the refused directory either.
  CHECK_FALSE(fs::exists(fs::symlink_status(state / "cache")));
}

TEST_CASE("a link left in ktune's own directories is refused, never followed",
          "[integration][hostile]") {
  Machine m;
  fs::create_directories(m.runtime_dir());
  fs::create_directories(m.state_dir() / "log");
  for (const auto& dir : {m.runtime_dir(), m.state_dir(), m.state_dir() / "log"}) {
    ::chmod(dir.c_str(), 0700);
    ::chmod(dir.parent_path().c_str(), 0700);
  }
  std::string name;
  bool by_cli = false;
  SECTION("the instance lock") { name = "ktuned.lock"; }
  SECTION("the database") { name = "ktune.db"; }
  SECTION("the database's WAL") { name = "ktune.db-wal"; }
  SECTION("the database's spill journal") { name = "ktune.db-spill"; }
  SECTION("the database's identity marker") { name = "ktune.db.identity"; }
  SECTION("ktuned's log (made by the CLI)") {
    name = "log/ktuned.log";
    by_cli = true;
  }
  SECTION("the CLI's start lock") {
    name = "ktuned.sock.start.lock";
    by_cli = true;
  }
  const bool in_runtime = name == "ktuned.lock" || name == "ktuned.sock.start.lock";
  const fs::path link = (in_runtime ? m.runtime_dir() : m.state_dir()) / name;
  (void)m.plant(link, "victim");
  const ToolRun run = by_cli ? m.ktune({"kernels"}) : m.ktuned();
  INFO(run.output);
  CHECK(run.code != 0);
  CHECK(run.code != -1);
  CHECK_THAT(run.output, Catch::Contains("refusing " + link.string() + ": it is a symbolic link"));
  CHECK(m.victim_changes().empty());
  CHECK(fs::is_symlink(link));
}

TEST_CASE("under umask 000 every directory ktune makes is 0700 and every file private",
          "[integration][hostile]") {
  Machine m;
  const ToolRun start = m.daemon_start(0);
  INFO(start.output);
  REQUIRE(start.code == 0);
  const ToolRun tune = m.ktune({"tune", "reduce_sum", "--shape", "N=4096", "--budget", "2", "--wait"}, 0);
  INFO(tune.output);
  CHECK(tune.code == 0);
  const ToolRun stop = m.ktune({"daemon", "stop"}, 0);
  INFO(stop.output);
  CHECK(stop.code == 0);

  int dirs = 0;
  int files = 0;
  for (const fs::path& top : {m.runtime_dir(), m.state_home}) {
    REQUIRE(fs::is_directory(top));
    std::vector<fs::path> all{top};
    for (const auto& entry : fs::recursive_directory_iterator(top)) all.push_back(entry.path());
    for (const auto& path : all) {
      struct stat st {};
      REQUIRE(::lstat(path.c_str(), &st) == 0);
      INFO(path.string() << " mode " << std::oct << (st.st_mode & 07777));
      if (S_ISDIR(st.st_mode)) {
        CHECK((st.st_mode & 07777) == 0700);
        ++dirs;
      } else {
        CHECK((st.st_mode & 0077) == 0);
        ++files;
      }
    }
  }
  // run/ktune; state, state/ktune, its log and cache directories and the cache's key directories.
  CHECK(dirs >= 6);
  CHECK(files >= 4);
  CHECK(fs::exists(m.state_dir() / "ktune.db"));
  CHECK(fs::exists(m.state_dir() / "log" / "ktuned.log"));
}
