#include <catch2/catch.hpp>

#include "compiler/shared_object.hpp"
#include "compiler/subprocess.hpp"
#include "tests/support/temp_dir.hpp"

#include <fstream>
#include <sstream>

TEST_CASE("read_shared_object lists what a shared object exports and runs when loaded",
          "[compiler][batch]") {
  ktune::test::TempDir dir;
  const auto source = dir.write("lib.cpp", "#include <cstdlib>\n"
                                           "extern \"C\" int exported(int x) { return std::abs(x); }\n"
                                           "extern \"C\" __attribute__((weak)) int weak_one() { return 1; }\n"
                                           "static int hidden() { return 2; }\n"
                                           "extern \"C\" int calls_hidden() { return hidden(); }\n");
  const auto initialised = dir.write("init.cpp", "#include <vector>\n"
                                                 "static std::vector<int> table(10);\n"
                                                 "extern \"C\" int size() { return table.size(); }\n");
  const auto build = [&](const std::filesystem::path& source) {
    const std::string library = source.string() + ".so";
    auto built = ktune::run_captured({"c++", "-shared", "-fPIC", "-O1", "-o", library, source.string()}, 4096);
    REQUIRE(built);
    INFO(built->output);
    REQUIRE(built->succeeded());
    std::ifstream in(library, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  };
  const std::string bytes = build(source);

  const auto object = ktune::read_shared_object(bytes);
  REQUIRE(object);
  CHECK(object->exports.count("exported") == 1);
  CHECK(object->exports.count("weak_one") == 1);
  CHECK(object->exports.count("calls_hidden") == 1);
  CHECK(object->exports.count("hidden") == 0);
  CHECK(object->exports.count("abs") == 0);  // undefined here: libc's
  const auto with_init = ktune::read_shared_object(build(initialised));
  REQUIRE(with_init);
  CHECK(with_init->init_functions == object->init_functions + 1);  // the static initializer

  SECTION("a file that is no ELF, or is cut short") {
    CHECK_FALSE(ktune::read_shared_object("not an ELF file"));
    CHECK_FALSE(ktune::read_shared_object(bytes.substr(0, 100)));
  }
}
