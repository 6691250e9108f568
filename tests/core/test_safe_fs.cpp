// core/safe_fs: directories checked by descriptor, files never reached through a link, 0700
// whatever the umask, atomic writes.
#include "core/safe_fs.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using ktune::DirCreate;
using ktune::FileCreate;
using ktune::SafeDir;
namespace fs = std::filesystem;

namespace {

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

TEST_CASE("SafeDir makes directories and their missing parents 0700 whatever the umask", "[safe_fs]") {
  ktune::test::TempDir tmp;
  const mode_t before = ::umask(0);
  auto dir = SafeDir::open((tmp.path() / "a" / "b" / "c").string(), DirCreate::yes);
  auto sub = dir ? dir->subdir("d", DirCreate::yes) : ktune::Result<SafeDir>(dir.error());
  ::umask(before);
  INFO((dir ? "" : dir.error().message));
  REQUIRE(dir.ok());
  REQUIRE(sub.ok());
  for (const char* p : {"a", "a/b", "a/b/c", "a/b/c/d"}) {
    INFO(p);
    CHECK(mode_of(tmp.path() / p) == 0700);
  }
  CHECK(dir->path() == (tmp.path() / "a" / "b" / "c").string());
}

TEST_CASE("SafeDir refuses a symlink, a directory others can write and a missing one", "[safe_fs]") {
  ktune::test::TempDir tmp;
  fs::create_directories(tmp.path() / "real");
  ::chmod((tmp.path() / "real").c_str(), 0700);
  fs::create_directory_symlink(tmp.path() / "real", tmp.path() / "link");
  auto linked = SafeDir::open((tmp.path() / "link").string(), DirCreate::yes);
  REQUIRE_FALSE(linked.ok());
  CHECK(linked.error().code == ktune::ErrorCode::unsafe_path);
  CHECK_THAT(linked.error().message, Catch::Contains("is a symbolic link"));

  fs::create_directories(tmp.path() / "open");
  ::chmod((tmp.path() / "open").c_str(), 0777);
  auto open = SafeDir::open((tmp.path() / "open").string(), DirCreate::no);
  REQUIRE_FALSE(open.ok());
  CHECK(open.error().code == ktune::ErrorCode::unsafe_path);
  CHECK_THAT(open.error().message, Catch::Contains("0777"));

  auto missing = SafeDir::open((tmp.path() / "none").string(), DirCreate::no);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ktune::ErrorCode::io_error);
  // Sticky and shared (as /tmp): fine for a socket's directory only.
  ::chmod((tmp.path() / "open").c_str(), 01777);
  CHECK(SafeDir::open_shared((tmp.path() / "open").string()).ok());
  CHECK_FALSE(SafeDir::open((tmp.path() / "open").string(), DirCreate::no).ok());
}

TEST_CASE("SafeDir::open_file never follows a link and creates 0600 files", "[safe_fs]") {
  ktune::test::TempDir tmp;
  auto dir = SafeDir::open((tmp.path() / "d").string(), DirCreate::yes);
  REQUIRE(dir.ok());
  {
    std::ofstream(tmp.path() / "victim") << "precious";
  }
  fs::create_symlink(tmp.path() / "victim", tmp.path() / "d" / "lock");
  for (FileCreate create : {FileCreate::existing, FileCreate::either, FileCreate::new_only}) {
    auto fd = dir->open_file("lock", O_RDWR | O_TRUNC, create);
    REQUIRE_FALSE(fd.ok());
  }
  auto fd = dir->open_file("lock", O_RDWR, FileCreate::either);
  REQUIRE_FALSE(fd.ok());
  CHECK(fd.error().code == ktune::ErrorCode::unsafe_path);
  CHECK_THAT(fd.error().message, Catch::Contains("is a symbolic link"));
  CHECK(read_text(tmp.path() / "victim") == "precious");

  ::mkfifo((tmp.path() / "d" / "fifo").c_str(), 0600);
  auto fifo = dir->open_file("fifo", O_RDONLY, FileCreate::existing);
  REQUIRE_FALSE(fifo.ok());
  CHECK_THAT(fifo.error().message, Catch::Contains("not a regular file"));

  const mode_t before = ::umask(0);
  auto made = dir->open_file("new", O_WRONLY, FileCreate::new_only);
  ::umask(before);
  REQUIRE(made.ok());
  CHECK(mode_of(tmp.path() / "d" / "new") == 0600);
  CHECK_FALSE(dir->open_file("new", O_WRONLY, FileCreate::new_only).ok());
}

TEST_CASE("SafeDir::write_atomic replaces a file whole, and a link by a file", "[safe_fs]") {
  ktune::test::TempDir tmp;
  auto dir = SafeDir::open((tmp.path() / "d").string(), DirCreate::yes);
  REQUIRE(dir.ok());
  {
    std::ofstream(tmp.path() / "victim") << "precious";
  }
  fs::create_symlink(tmp.path() / "victim", tmp.path() / "d" / "pid");
  REQUIRE(dir->write_atomic("pid", "42\n").ok());
  CHECK(read_text(tmp.path() / "victim") == "precious");
  CHECK_FALSE(fs::is_symlink(tmp.path() / "d" / "pid"));
  CHECK(read_text(tmp.path() / "d" / "pid") == "42\n");
  CHECK(mode_of(tmp.path() / "d" / "pid") == 0600);
  // No temp file is left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path() / "d")) ++entries;
  CHECK(entries == 1);
}
