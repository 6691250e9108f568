// KernelDirs: directories added at run time, checked, kept in the journal next to the database
// and read back by the next daemon; a torn last line is ignored.
#include <catch2/catch.hpp>

#include "daemon/kernel_dirs.hpp"
#include "tests/support/temp_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using ktune::daemon::KernelDirs;

namespace {

std::filesystem::path make_dir(const ktune::test::TempDir& tmp, const std::string& name,
                               mode_t mode = 0700) {
  const auto dir = tmp.path() / name;
  std::filesystem::create_directories(dir);
  REQUIRE(::chmod(dir.c_str(), mode) == 0);
  return std::filesystem::canonical(dir);
}

} // namespace

TEST_CASE("KernelDirs: an added directory comes after the configured ones and outlives the daemon",
          "[daemon][kernel_dirs]") {
  ktune::test::TempDir tmp;
  const std::string journal = ktune::daemon::added_kernel_dirs_file((tmp.path() / "k.db").string());
  CHECK(journal == (tmp.path() / "k.db-kernel-dirs").string());
  const auto configured = make_dir(tmp, "shipped");
  const auto mine = make_dir(tmp, "mine");
  const auto other = make_dir(tmp, "other");
  {
    KernelDirs dirs({configured.string()}, journal);
    CHECK(dirs.added().empty());
    CHECK(dirs.warnings().empty());
    auto added = dirs.add((tmp.path() / "mine/../mine").string(), ::getuid());
    INFO((added ? std::string() : added.error().message));
    REQUIRE(added.ok());
    CHECK(added->path == mine.string());
    CHECK(added->changed);
    CHECK_FALSE(dirs.add(mine.string(), ::getuid())->changed);       // already there
    CHECK_FALSE(dirs.add(configured.string(), ::getuid())->changed); // configured
    REQUIRE(dirs.add(other.string(), ::getuid()).ok());
    CHECK(dirs.all() == std::vector<std::string>{configured.string(), mine.string(), other.string()});
    REQUIRE(dirs.remove(other.string(), ::getuid())->changed);
    CHECK_FALSE(dirs.remove(other.string(), ::getuid())->changed);
    auto configured_removal = dirs.remove(configured.string(), ::getuid());
    REQUIRE_FALSE(configured_removal.ok());
    CHECK(configured_removal.error().code == ktune::ErrorCode::bad_request);
  }
  KernelDirs restarted({configured.string()}, journal);
  CHECK(restarted.all() == std::vector<std::string>{configured.string(), mine.string()});

  SECTION("a torn or foreign line is skipped with a warning, the rest is kept") {
    {
      std::ofstream out(journal, std::ios::app);
      out << "garbage\n+/half-written";
    }
    KernelDirs torn({configured.string()}, journal);
    CHECK(torn.all() == std::vector<std::string>{configured.string(), mine.string()});
    REQUIRE(torn.warnings().size() == 2);
    CHECK_THAT(torn.warnings()[0], Catch::Contains("incomplete last line"));
    CHECK_THAT(torn.warnings()[1], Catch::Contains("'garbage' is ignored"));
  }
}

TEST_CASE("KernelDirs: only ktuned's uid or root may add, and only a directory no one else writes",
          "[daemon][kernel_dirs]") {
  ktune::test::TempDir tmp;
  KernelDirs dirs({}, (tmp.path() / "k.db-kernel-dirs").string());
  const auto fine = make_dir(tmp, "fine");
  const uid_t stranger = ::getuid() == 0 ? 1 : ::getuid() + 1;
  auto refused = dirs.add(fine.string(), stranger);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ktune::ErrorCode::permission_denied);
  CHECK_THAT(refused.error().message, Catch::Contains("uid " + std::to_string(stranger)));

  auto relative = dirs.add("fine", ::getuid());
  REQUIRE_FALSE(relative.ok());
  CHECK_THAT(relative.error().message, Catch::Contains("absolute"));
  auto missing = dirs.add((tmp.path() / "nope").string(), ::getuid());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ktune::ErrorCode::bad_request);
  const auto file = tmp.write("plain", "x");
  auto not_dir = dirs.add(file.string(), ::getuid());
  REQUIRE_FALSE(not_dir.ok());
  CHECK_THAT(not_dir.error().message, Catch::Contains("is not a directory"));
  const auto shared = make_dir(tmp, "shared", 0775);
  auto writable = dirs.add(shared.string(), ::getuid());
  REQUIRE_FALSE(writable.ok());
  CHECK_THAT(writable.error().message, Catch::Contains("writable by its group or by others"));
  if (::getuid() == 0) {
    const auto foreign = make_dir(tmp, "foreign");
    REQUIRE(::chown(foreign.c_str(), 65534, 65534) == 0);
    auto owned = dirs.add(foreign.string(), ::getuid());
    REQUIRE_FALSE(owned.ok());
    CHECK_THAT(owned.error().message, Catch::Contains("belongs to uid 65534"));
  }
  CHECK(dirs.added().empty());
}
