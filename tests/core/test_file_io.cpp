// core/file_io: the whole-file reader, the atomic writer, the first line of a log.
#include "core/file_io.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

using ktune::AtomicFile;
using ktune::ErrorCode;
using ktune::MoreLines;
using ktune::first_line;
using ktune::read_file;
using ktune::write_file_atomic;
namespace fs = std::filesystem;

TEST_CASE("read_file returns every byte or an io_error naming the file", "[file_io]") {
  ktune::test::TempDir dir;
  SECTION("binary content with NULs and no final newline") {
    const std::string bytes("a\0b\nc", 5);
    const auto path = dir.write("bin", bytes);
    auto text = read_file(path.string());
    REQUIRE(text);
    CHECK(*text == bytes);
  }
  SECTION("a file larger than one read") {
    const std::string big(200000, 'x');
    auto text = read_file(dir.write("big", big).string());
    REQUIRE(text);
    CHECK(text->size() == big.size());
  }
  SECTION("an empty file is an empty string") {
    auto text = read_file(dir.write("empty", "").string());
    REQUIRE(text);
    CHECK(text->empty());
  }
  SECTION("a missing file") {
    const std::string missing = (dir.path() / "missing").string();
    auto text = read_file(missing);
    REQUIRE_FALSE(text);
    CHECK(text.error().code == ErrorCode::io_error);
    CHECK(text.error().message.find(missing) != std::string::npos);
    CHECK(text.error().message.find("No such file") != std::string::npos);
  }
  SECTION("a directory") {
    auto text = read_file(dir.str());
    REQUIRE_FALSE(text);
    CHECK(text.error().code == ErrorCode::io_error);
  }
}

TEST_CASE("AtomicFile replaces a file whole or leaves it as it was", "[file_io]") {
  ktune::test::TempDir dir;
  const std::string path = dir.write("table.json", "old\n").string();
  const auto entries = [&] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++n;
    return n;
  };
  SECTION("committed: the new content, no temp file left") {
    {
      AtomicFile file(path);
      file.write("new ");
      file.write("content\n");
      CHECK(*read_file(path) == "old\n");  // nothing written before commit
      REQUIRE(file.commit());
    }
    CHECK(*read_file(path) == "new content\n");
    CHECK(entries() == 1);
  }
  SECTION("dropped without commit: the old content, no temp file left") {
    {
      AtomicFile file(path);
      file.write("never seen");
    }
    CHECK(*read_file(path) == "old\n");
    CHECK(entries() == 1);
  }
  SECTION("a directory that does not exist: io_error naming the temp file, nothing made") {
    const std::string bad = (dir.path() / "no" / "file").string();
    auto written = write_file_atomic(bad, "x");
    REQUIRE_FALSE(written);
    CHECK(written.error().code == ErrorCode::io_error);
    CHECK(written.error().message.find(bad) != std::string::npos);
    CHECK(entries() == 1);
  }
  SECTION("the rename fails (a directory in the way): the temp file is removed") {
    const std::string blocked = (dir.path() / "sub").string();
    fs::create_directories(dir.path() / "sub" / "inner");
    auto written = write_file_atomic(blocked, "x");
    REQUIRE_FALSE(written);
    CHECK(written.error().message.find("cannot rename") != std::string::npos);
    CHECK(entries() == 2);  // table.json and sub
  }
}

TEST_CASE("first_line is the first non-blank line of a log", "[file_io]") {
  CHECK(first_line("") == "");
  CHECK(first_line("\n \n\t\n") == "");
  CHECK(first_line("one") == "one");
  CHECK(first_line("one\r\ntwo\n") == "one");
  CHECK(first_line("\n  \nkernel.cpp:3: error: x\nmore\n") == "kernel.cpp:3: error: x");
  CHECK(first_line("one\ntwo", MoreLines::mark) == "one ...");
  CHECK(first_line("one\n\n  \n", MoreLines::mark) == "one");
  CHECK(first_line("one", MoreLines::mark) == "one");
}
