// BatchSizer: the batch size of a job's compiles from the times it measured.
#include "daemon/batch_sizer.hpp"

#include <catch2/catch.hpp>

using ktune::daemon::BatchSizer;

namespace {

// Feeds `configs` per-config times of t(B) = a / B + b, as a run of B configs reports them.
void measure(BatchSizer& sizer, std::size_t batch, double a, double b) {
  for (std::size_t i = 0; i < batch; ++i) sizer.observe(batch, a / static_cast<double>(batch) + b);
}

} // namespace

TEST_CASE("BatchSizer starts alone, probes a batch of 2, then follows the fitted times",
          "[daemon][batch]") {
  BatchSizer sizer;
  CHECK(sizer.size() == 1);
  measure(sizer, 1, 45, 37);   // the SGEMM here: 82 ms alone
  CHECK(sizer.size() == 2);

  SECTION("a shared cost that pays up to 8: the largest batch") {
    measure(sizer, 2, 45, 37);
    CHECK(sizer.measured_ms() == std::map<std::size_t, double>{{1, 82.0}, {2, 59.5}});
    CHECK(sizer.size() == 8);  // t(8) = 42.6 is 14% under t(4) = 48.3; a batch takes 341 ms
  }
  SECTION("each doubling must save 5%: here up to 4") {
    BatchSizer cheap_start;
    measure(cheap_start, 1, 10, 40);
    measure(cheap_start, 2, 10, 40);  // t(4) = 42.5 vs t(2) = 45: 5.6%; t(8) = 41.25: 2.9%
    CHECK(cheap_start.size() == 4);
  }
  SECTION("no saving: alone") {
    BatchSizer no_gain;
    measure(no_gain, 1, 0, 80);
    measure(no_gain, 2, 0, 80);
    CHECK(no_gain.size() == 1);
  }
  SECTION("a batch is kept within its wall time") {
    BatchSizer slow(1000);
    measure(slow, 1, 200, 150);
    measure(slow, 2, 200, 150);
    CHECK(slow.size() == 4);  // 8 would take 1.4 s
  }
  SECTION("stopped: alone for good") {
    measure(sizer, 2, 45, 37);
    sizer.stop();
    CHECK(sizer.stopped());
    CHECK(sizer.size() == 1);
  }
}

TEST_CASE("BatchSizer measured at one batch size probes single compiles", "[daemon][batch]") {
  BatchSizer sizer;
  measure(sizer, 4, 45, 37);
  CHECK(sizer.size() == 1);
  measure(sizer, 1, 45, 37);
  CHECK(sizer.size() == 8);
}
