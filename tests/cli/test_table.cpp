#include "cli/table.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using ktune::cli::Align;
using ktune::cli::Table;

TEST_CASE("Table", "[cli]") {
  std::ostringstream out;

  SECTION("pads left-aligned columns, right-aligns numbers, leaves the last column ragged") {
    Table t({{"ID", Align::right}, {"NAME"}, {"NOTE"}});
    t.add_row({"7", "gemm", "fast"});
    t.add_row({"12", "reduce_sum", ""});
    t.print(out);
    CHECK(out.str() ==
          "ID  NAME        NOTE\n"
          " 7  gemm        fast\n"
          "12  reduce_sum\n");
    CHECK(t.rows() == 2);
  }

  SECTION("counts UTF-8 code points, not bytes") {
    Table t({{"A"}, {"B"}});
    t.add_row({"\xc2\xb5s", "x"});  // "µs": 2 code points, 3 bytes
    t.print(out);
    CHECK(out.str() == "A   B\n\xc2\xb5s  x\n");
  }

  SECTION("short rows are padded with empty cells") {
    Table t({{"A"}, {"B"}, {"C"}});
    t.add_row({"1"});
    t.print(out);
    CHECK(out.str() == "A  B  C\n1\n");
  }

  SECTION("a header-only table prints the header") {
    Table t({{"ONLY"}});
    t.print(out);
    CHECK(out.str() == "ONLY\n");
  }
}
