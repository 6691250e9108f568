#include "core/error_code.hpp"
#include "core/result.hpp"

#include "tests/support/paths.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

using ktune::ErrorCode;

namespace {

// The codes of docs/protocol.md § Error codes: the first column of its table.
std::set<std::string> documented_codes() {
  std::ifstream in(ktune::test::source_path("/docs/protocol.md"));
  REQUIRE(in.good());
  std::set<std::string> codes;
  bool in_section = false;
  const std::regex row(R"(^\| `([a-z_]+)` \|)");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Error codes";
    std::smatch match;
    if (in_section && std::regex_search(line, match, row)) codes.insert(match[1]);
  }
  return codes;
}

} // namespace

TEST_CASE("core/error_code: every code round-trips through its wire word", "[core][error_code]") {
  for (int i = 0; i <= static_cast<int>(ErrorCode::bad_result); ++i) {
    const auto code = static_cast<ErrorCode>(i);
    const std::string word(ktune::to_string(code));
    INFO(word);
    CHECK_FALSE(word.empty());
    CHECK(ktune::parse_error_code(word) == code);
  }
  CHECK_FALSE(ktune::parse_error_code("").has_value());
  CHECK_FALSE(ktune::parse_error_code("Internal").has_value());
  CHECK_FALSE(ktune::parse_error_code("spawn_error").has_value());
}

TEST_CASE("core/error_code: the protocol's codes are the documented words", "[core][error_code]") {
  const auto documented = documented_codes();
  REQUIRE(documented.size() >= 25);
  for (const auto& word : documented) {
    INFO(word);
    CHECK(ktune::parse_error_code(word).has_value());
  }
  for (const auto code : {ErrorCode::bad_json, ErrorCode::bad_request, ErrorCode::store_busy,
                          ErrorCode::too_many_jobs, ErrorCode::internal, ErrorCode::timeout}) {
    CHECK(documented.count(std::string(ktune::to_string(code))) == 1);
  }
}

TEST_CASE("core/error_code: an error read from the wire", "[core][error_code]") {
  SECTION("a known word keeps its code and message") {
    const auto error = ktune::error_from_wire("store_busy", "the database is locked");
    CHECK(error.code == ErrorCode::store_busy);
    CHECK(error.message == "the database is locked");
    CHECK(ktune::describe(error) == "store_busy: the database is locked");
  }
  SECTION("an unknown word becomes internal and the word stays in the message") {
    const auto error = ktune::error_from_wire("flux_capacitor", "no");
    CHECK(error.code == ErrorCode::internal);
    CHECK(error.message.find("flux_capacitor") != std::string::npos);
    CHECK(error.message.find("no") != std::string::npos);
  }
}
