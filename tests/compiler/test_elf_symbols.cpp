#include <catch2/catch.hpp>

#include "compiler/elf_symbols.hpp"
#include "compiler/subprocess.hpp"
#include "tests/support/temp_dir.hpp"

#include <fstream>
#include <sstream>

TEST_CASE("defined_dynamic_symbols lists what a shared object exports", "[compiler][batch]") {
  ktune::test::TempDir dir;
  const auto source = dir.write("lib.cpp", "#include <cstdlib>\n"
                                           "extern \"C\" int exported(int x) { return std::abs(x); }\n"
                                           "extern \"C\" __attribute__((weak)) int weak_one() { return 1; }\n"
                                           "static int hidden() { return 2; }\n"
                                           "extern \"C\" int calls_hidden() { return hidden(); }\n");
  const std::string library = (dir.path() / "lib.so").string();
  auto built = ktune::run_captured({"c++", "-shared", "-fPIC", "-O1", "-o", library, source.string()}, 4096);
  REQUIRE(built);
  INFO(built->output);
  REQUIRE(built->succeeded());
  std::ifstream in(library, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();

  const auto symbols = ktune::defined_dynamic_symbols(bytes.str());
  REQUIRE(symbols);
  CHECK(symbols->count("exported") == 1);
  CHECK(symbols->count("weak_one") == 1);
  CHECK(symbols->count("calls_hidden") == 1);
  CHECK(symbols->count("hidden") == 0);
  CHECK(symbols->count("abs") == 0);  // undefined here: libc's

  SECTION("a file that is no ELF, or is cut short") {
    CHECK_FALSE(ktune::defined_dynamic_symbols("not an ELF file"));
    CHECK_FALSE(ktune::defined_dynamic_symbols(bytes.str().substr(0, 100)));
  }
}
