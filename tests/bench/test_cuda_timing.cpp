// The CUDA timing plan (bench/cuda_timing.hpp): batches for microsecond kernels, rotating argument
// sets where a batch must not share buffers, the spin before the start event, and the spin
// kernel's PTX, checked by the toolkit's ptxas where there is one (no GPU needed).
#include "bench/cuda_timing.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

using namespace ktune;

TEST_CASE("kernels of 20 us and more are timed one launch a sample", "[bench][cuda-timing]") {
  const TimingPlan one = plan_timing(0.5, true, 1 << 20, std::size_t{1} << 30);
  CHECK(one.launches == 1);
  CHECK(one.sets == 1);
  CHECK_FALSE(one.batched());
  CHECK(plan_timing(k_batch_below_ms, false, 0, 0).launches == 1);
  CHECK(plan_timing(0, false, 0, 0).launches == 1);  // no estimate
  CHECK(plan_timing(-1, false, 0, 0).launches == 1);
}

TEST_CASE("shorter kernels are timed as a batch lasting about 200 us", "[bench][cuda-timing]") {
  const TimingPlan hot = plan_timing(0.002, false, 1 << 20, 0);
  CHECK(hot.launches == 100);
  CHECK(hot.sets == 1); // hot cache, not in place: every launch on the same buffers
  CHECK(plan_timing(0.015, false, 0, 0).launches == 14);
  CHECK(plan_timing(0.0001, false, 0, 0).launches == k_max_batch_launches);
}

TEST_CASE("a cold or in-place batch rotates over one argument set per launch, within the budget",
          "[bench][cuda-timing]") {
  const std::size_t set = std::size_t{4} << 20;
  const TimingPlan cold = plan_timing(0.004, true, set, std::size_t{1} << 30);
  CHECK(cold.launches == 50);
  CHECK(cold.sets == 50);
  // Room for 9 extra sets: a batch of 10.
  const TimingPlan tight = plan_timing(0.004, true, set, 9 * set + 1);
  CHECK(tight.launches == 10);
  CHECK(tight.sets == 10);
  // No room for a second set: one launch a sample.
  CHECK(plan_timing(0.004, true, set, set - 1).launches == 1);
}

TEST_CASE("the spin outlasts the host's queueing of a sample", "[bench][cuda-timing]") {
  CHECK(spin_ns_for(0) == 10'000);
  CHECK(spin_ns_for(20) == 45'000);
  CHECK(spin_ns_for(1e6) == 2'000'000);
  CHECK(spin_ns_for(-3) == 10'000);
}

TEST_CASE("the spin kernel's PTX assembles for sm_80 and sm_90", "[bench][cuda-timing]") {
  const std::filesystem::path ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) {
    SUCCEED("no ptxas at /usr/local/cuda/bin: the PTX is checked where the toolkit is installed");
    return;
  }
  test::TempDir dir;
  const auto ptx = dir.write("spin.ptx", k_spin_ptx);
  for (const char* arch : {"sm_80", "sm_90"}) {
    const std::string cubin = (dir.path() / (std::string(arch) + ".cubin")).string();
    const std::string command = ptxas.string() + " -arch=" + arch + " " + ptx.string() + " -o " + cubin;
    INFO(command);
    CHECK(std::system(command.c_str()) == 0);
    CHECK(std::filesystem::file_size(cubin) > 0);
  }
}
