#include "daemon/ops.hpp"

#include <catch2/catch.hpp>

#include <string>

using ktune::daemon::Op;

TEST_CASE("daemon/ops: every op round-trips through its protocol word", "[daemon][ops]") {
  for (std::size_t i = 0; i < ktune::daemon::k_op_count; ++i) {
    const auto op = static_cast<Op>(i);
    const std::string word(ktune::daemon::to_string(op));
    INFO(word);
    CHECK(ktune::daemon::parse_op(word) == op);
  }
  CHECK(ktune::daemon::parse_op("lookup") == Op::lookup);
  CHECK(ktune::daemon::parse_op("shutdown") == Op::shutdown);
  CHECK_FALSE(ktune::daemon::parse_op("Lookup").has_value());
  CHECK_FALSE(ktune::daemon::parse_op("").has_value());
  CHECK_FALSE(ktune::daemon::parse_op("frobnicate").has_value());
}

TEST_CASE("daemon/ops: the unknown_op message lists every op, the last after 'or'",
          "[daemon][ops]") {
  CHECK(ktune::daemon::op_list() ==
        "lookup, tune, job, jobs, cancel, import, kernels, add_kernel_dir, remove_kernel_dir, "
        "stats, top, devices, compile_check, confirm, canary, revalidate or shutdown");
}
