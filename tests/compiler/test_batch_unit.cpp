#include <catch2/catch.hpp>

#include "compiler/batch_unit.hpp"

#include <string>

using ktune::scan_source;

TEST_CASE("scan_source finds system includes, defined macros and what keeps a source alone",
          "[compiler][batch]") {
  SECTION("includes and macros, once each, in order") {
    const auto scan = scan_source("#include <cstdint>\n"
                                  "  #  include<vector>  // spaced\n"
                                  "#include <cstdint>\n"
                                  "#ifndef BM\n#define BM 32\n#endif\n"
                                  "#if BM > 32\n# define WIDE(x) (x)\n#endif\n"
                                  "#pragma GCC unroll 8\n"
                                  "// #include \"commented.hpp\" is no include\n"
                                  "#define BM_TOO 1\n");
    CHECK(scan.not_batchable.empty());
    CHECK(scan.system_includes == std::vector<std::string>{"cstdint", "vector"});
    CHECK(scan.defined_macros == std::vector<std::string>{"BM", "WIDE", "BM_TOO"});
    CHECK(scan.defined_before_include.empty());
  }
  SECTION("macros defined before an include") {
    const auto scan = scan_source("#ifndef BM\n#define BM 32\n#endif\n#define EIGEN_NO_DEBUG\n"
                                  "#include <cmath>\n#define AFTER 1\n");
    CHECK(scan.not_batchable.empty());
    CHECK(scan.defined_before_include == std::vector<std::string>{"BM", "EIGEN_NO_DEBUG"});
  }
  SECTION("#pragma once") {
    CHECK_THAT(scan_source("#pragma once\nint f();\n").not_batchable, Catch::Contains("pragma once"));
  }
  SECTION("a local header") {
    CHECK_THAT(scan_source("#include \"tile.hpp\"\n").not_batchable,
               Catch::Contains("\"tile.hpp\""));
    CHECK_FALSE(scan_source("#include KERNEL_HEADER\n").not_batchable.empty());
  }
  SECTION("pragmas whose effect outlasts the source") {
    for (const char* pragma : {"#pragma GCC optimize(\"unroll-loops\")", "#pragma GCC target(\"avx2\")",
                               "#pragma GCC push_options", "#pragma pack(1)"}) {
      INFO(pragma);
      CHECK_THAT(scan_source(std::string(pragma) + "\n").not_batchable, Catch::Contains("outlasts"));
    }
  }
}

TEST_CASE("batch_unit_text hoists the includes, then each config in its own namespace with its "
          "macros undefined after it", "[compiler][batch]") {
  const auto scan = scan_source("#include <cstdint>\n#if BM > 32\n#define WIDE 1\n#endif\n");
  const std::string unit = ktune::batch_unit_text(
      "/k/kernel.cpp", scan, "extern \"C\" void shim_f(void**) {}",
      {{{{"BM", 64}}, {{"f", "f_k1"}}, {}}, {{{"BM", 16}}, {{"f", "f_k2"}}, {}}});
  const auto at = [&](const std::string& text) {
    const auto pos = unit.find(text);
    INFO(text << " in\n" << unit);
    REQUIRE(pos != std::string::npos);
    return pos;
  };
  CHECK(at("#include <cstdint>\n") < at("#define BM 64\n"));
  CHECK(at("#define BM 64\n#define f f_k1\nnamespace ktune_batch_0 {\n#include \"/k/kernel.cpp\"\n"
           "extern \"C\" void shim_f(void**) {}\n}\n#undef BM\n#undef f\n#undef WIDE\n") <
        at("#define BM 16\n#define f f_k2\nnamespace ktune_batch_1 {\n"));
  CHECK(unit.rfind("#undef WIDE\n") > at("namespace ktune_batch_1"));
}

TEST_CASE("batch_unit_text: a config's own namespace, and text between the includes and the "
          "first config", "[compiler][batch]") {
  const auto scan = scan_source("#include <cuda_fp16.h>\n");
  const std::string unit = ktune::batch_unit_text("/k/kernel.cu", scan, "",
                                                  {{{{"BM", 64}}, {{"f", "f_k1"}}, "ktune_k1"},
                                                   {{{"BM", 16}}, {{"f", "f_k2"}}, ""}},
                                                  "namespace ktune_unit {}\n");
  INFO(unit);
  CHECK(unit.find("#include <cuda_fp16.h>\nnamespace ktune_unit {}\n#define BM 64\n") != std::string::npos);
  CHECK(unit.find("namespace ktune_k1 {\n#include \"/k/kernel.cu\"\n") != std::string::npos);
  CHECK(unit.find("namespace ktune_batch_1 {\n") != std::string::npos);
}

TEST_CASE("unit_obstacle says why a job's configs cannot share a unit", "[compiler][batch]") {
  ktune::CompileJob job;
  job.entry = "k";
  job.defines = {{"BM", 1}};
  const std::string text = "#include <cmath>\nextern \"C\" void k(void**) {}\n";
  CHECK(ktune::unit_obstacle(job, text, scan_source(text)).empty());
  ktune::CompileJob no_entry = job;
  no_entry.entry.clear();
  CHECK_THAT(ktune::unit_obstacle(no_entry, text, scan_source(text)), Catch::Contains("no entry"));
  ktune::CompileJob other_entry = job;
  other_entry.entry = "kk";
  CHECK_THAT(ktune::unit_obstacle(other_entry, text, scan_source(text)), Catch::Contains("never names"));
  ktune::CompileJob ndebug = job;
  ndebug.defines = {{"NDEBUG", 1}};
  CHECK_THAT(ktune::unit_obstacle(ndebug, text, scan_source(text)), Catch::Contains("NDEBUG"));
  const std::string once = "#pragma once\n" + text;
  CHECK_THAT(ktune::unit_obstacle(job, once, scan_source(once)), Catch::Contains("pragma once"));
}
