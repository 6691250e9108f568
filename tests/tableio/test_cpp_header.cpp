#include "tableio/formats.hpp"

#include "tests/tableio/fixtures.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace ktune;
using namespace ktune::test;

namespace {

// The program that includes the exported header: checks lookups at compile time and at run time,
// prints one found config, returns 0 when every check held.
constexpr const char* k_program = R"cpp(#include "tuned.hpp"
#include <cstdio>

static_assert(ktune_tuned::k_entry_count == 3, "three winners");
static_assert(ktune_tuned::lookup("gemm", "M=256,N=256,K=256", "f32", "cpu")->get("BM") == 64,
              "constexpr lookup");
static_assert(ktune_tuned::lookup("gemm", "M=1,N=1,K=1", "f32", "cpu") == nullptr, "a miss");

int main() {
  const ktune_tuned::Entry* e = ktune_tuned::lookup("gemm", "M=512,N=512,K=512", "f32", "cpu");
  if (!e || e->get("BN") != 256 || e->get("NOPE", -1) != -1 || e->param_count != 5) return 1;
  if (e->params[0].name != "BM" || e->params[4].name != "VEC") return 2;   // spec order
  const auto* by_fp = ktune_tuned::lookup("gemm", "M=4096,N=4096,K=4096", "f16",
                                          "cudafp0123456789");
  if (!by_fp || by_fp->device != "cuda:0" || by_fp->median_ms != 3.0) return 3;
  if (ktune_tuned::lookup("gemm", "M=512,N=512,K=512", "f64", "cpu") != nullptr) return 4;
  if (ktune_tuned::lookup("odd\"name", "N=1", "f32", "cpu") != nullptr) return 5;
  std::printf("BM=%lld\n", static_cast<long long>(e->get("BM")));
  return 0;
}
)cpp";

constexpr const char* k_empty_program = R"cpp(#include "tuned.hpp"
static_assert(ktune_tuned::k_entry_count == 0, "empty");
int main() { return ktune_tuned::lookup("gemm", "M=1", "f32", "cpu") == nullptr ? 0 : 1; }
)cpp";

// Runs `command` through the shell; its exit status.
int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Compiles main.cpp + tuned.hpp in `dir` with the host compiler at `standard`, runs the program.
void compile_and_run(const TempDir& dir, const std::string& standard, const std::string& expected) {
  const std::string exe = dir.str() + "/prog-" + standard;
  const std::string log = dir.str() + "/log-" + standard;
  const int compiled = run(std::string(KTUNE_TEST_CXX) + " -std=" + standard +
                           " -Wall -Wextra -Werror -pedantic -o '" + exe + "' '" + dir.str() +
                           "/main.cpp' > '" + log + "' 2>&1");
  INFO(slurp(log));
  REQUIRE(compiled == 0);
  const int ran = run("'" + exe + "' > '" + log + "' 2>&1");
  INFO(slurp(log));
  REQUIRE(ran == 0);
  REQUIRE(slurp(log) == expected);
}

} // namespace

TEST_CASE("the cpp-header export compiles on its own and finds the configs", "[tableio][compiler]") {
  auto rows = std::vector<tableio::TableRow>{
      make_row("M=256,N=256,K=256", k_config_a, 1.25, 1),
      make_row("M=512,N=512,K=512", k_config_b, 9.5, 2),
      make_row("M=4096,N=4096,K=4096", k_config_b, 3.0, 3, "cudafp0123456789")};
  rows[2].dtype = "f16";
  rows[2].device_name = "cuda:0";
  auto table = make_table(rows);
  table.host = "a \"quoted\" host\\";  // lands in a comment and must not break it

  auto header = tableio::write_cpp_header(table);
  REQUIRE(header.ok());
  TempDir dir;
  dir.write("tuned.hpp", *header);
  dir.write("main.cpp", k_program);
  SECTION("C++17") { compile_and_run(dir, "c++17", "BM=128\n"); }
  SECTION("C++20") { compile_and_run(dir, "c++20", "BM=128\n"); }
}

TEST_CASE("an empty table gives a header that compiles", "[tableio][compiler]") {
  auto header = tableio::write_cpp_header(make_table({}));
  REQUIRE(header.ok());
  TempDir dir;
  dir.write("tuned.hpp", *header);
  dir.write("main.cpp", k_empty_program);
  compile_and_run(dir, "c++17", "");
}

TEST_CASE("the cpp-header refuses what it cannot hold", "[tableio]") {
  SECTION("a non-integer parameter value, naming row and parameter") {
    auto table = make_table({make_row("M=1,N=1,K=1", R"({"BM":64,"MODE":"fast"})", 1, 1)});
    auto header = tableio::write_cpp_header(table);
    REQUIRE_FALSE(header.ok());
    REQUIRE(header.error().code == ktune::ErrorCode::invalid_table);
    REQUIRE_THAT(header.error().message, Catch::Contains("row 0"));
    REQUIRE_THAT(header.error().message, Catch::Contains("config.MODE"));
  }
  SECTION("a namespace that is not an identifier") {
    auto header = tableio::write_cpp_header(make_table({}), "not-valid");
    REQUIRE_FALSE(header.ok());
  }
}
