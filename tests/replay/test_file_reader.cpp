#include "replay/file_reader.hpp"

#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <zlib.h>

#include <fstream>

using ktune::replay::read_text_file;

namespace {

void write_gzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

} // namespace

TEST_CASE("replay/file_reader: plain and gzip files", "[replay][file_reader]") {
  ktune::test::TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "{\"line\": " + std::to_string(i) + "}\n";

  SECTION("plain text is read as is") {
    const auto path = dir.write("cache.json", text);
    auto read = read_text_file(path.string());
    REQUIRE(read.ok());
    CHECK(*read == text);
  }
  SECTION("gzip is detected by content, whatever the name") {
    const std::string path = (dir.path() / "cache.json").string();
    write_gzip(path, text);
    auto read = read_text_file(path);
    REQUIRE(read.ok());
    CHECK(*read == text);
  }
  SECTION("an empty file") {
    const auto path = dir.write("empty.json", "");
    auto read = read_text_file(path.string());
    REQUIRE(read.ok());
    CHECK(read->empty());
  }
  SECTION("errors") {
    auto missing = read_text_file((dir.path() / "nope.json.gz").string());
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error().code == ktune::ErrorCode::io_error);
    CHECK_THAT(missing.error().message, Catch::Contains("nope.json.gz") && Catch::Contains("cannot open"));

    auto directory = read_text_file(dir.str());
    REQUIRE_FALSE(directory.ok());
    CHECK(directory.error().code == ktune::ErrorCode::io_error);

    const auto big = dir.write("big.json", text);
    auto too_big = read_text_file(big.string(), 1000);
    REQUIRE_FALSE(too_big.ok());
    CHECK_THAT(too_big.error().message, Catch::Contains("larger than 1000 bytes"));
  }
  SECTION("a truncated gzip stream is an error, not a short file") {
    const std::string path = (dir.path() / "whole.json.gz").string();
    write_gzip(path, text);
    const std::string bytes = read_bytes(path);
    const auto cut = dir.write("cut.json.gz", bytes.substr(0, bytes.size() / 2));
    auto read = read_text_file(cut.string());
    REQUIRE_FALSE(read.ok());
    CHECK(read.error().code == ktune::ErrorCode::io_error);
  }
}

TEST_CASE("replay/file_reader: decode_text reads bytes in memory like a file", "[replay][file_reader]") {
  using ktune::replay::decode_text;
  ktune::test::TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "{\"line\": " + std::to_string(i) + "}\n";
  const std::string path = (dir.path() / "cache.json.gz").string();
  write_gzip(path, text);
  const std::string gzip = read_bytes(path);

  SECTION("plain bytes come back unchanged, gzip is decompressed") {
    auto plain = decode_text(text, "cache.json");
    REQUIRE(plain.ok());
    CHECK(*plain == text);
    auto unzipped = decode_text(gzip, "cache.json.gz");
    REQUIRE(unzipped.ok());
    CHECK(*unzipped == text);
    auto empty = decode_text("", "empty.json");
    REQUIRE(empty.ok());
    CHECK(empty->empty());
    const std::string binary("\x1f\x00\x8b", 3);
    auto odd = decode_text(binary, "odd.bin");
    REQUIRE(odd.ok());
    CHECK(*odd == binary);
  }
  SECTION("errors name the label") {
    auto cut = decode_text(gzip.substr(0, gzip.size() / 2), "cut.json.gz");
    REQUIRE_FALSE(cut.ok());
    CHECK(cut.error().code == ktune::ErrorCode::io_error);
    CHECK_THAT(cut.error().message, Catch::StartsWith("cut.json.gz: cannot read"));
    auto too_big = decode_text(gzip, "big.json.gz", 1000);
    REQUIRE_FALSE(too_big.ok());
    CHECK_THAT(too_big.error().message, Catch::StartsWith("big.json.gz: larger than 1000 bytes"));
  }
}
