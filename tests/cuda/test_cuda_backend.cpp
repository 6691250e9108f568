// Whether this build has the CUDA backend, and that its NVRTC loads (no GPU needed).
#include "tests/cuda/skip.hpp"

#include <catch2/catch.hpp>

#ifdef KTUNE_HAVE_CUDA
#include "cuda/cuda_api.hpp"
#endif

TEST_CASE("the CUDA backend loads NVRTC", "[cuda]") {
#ifndef KTUNE_HAVE_CUDA
  ktune::test::skip_test("the CUDA backend is compiled out (no CUDA toolkit at configure time)");
#else
  auto api = ktune::cuda::load_nvrtc();
  REQUIRE(api.ok());
  const ktune::cuda::NvrtcApi& nvrtc = *api.value();
  CHECK(nvrtc.major >= 11);
  CHECK_FALSE(nvrtc.library.empty());
  const auto archs = nvrtc.supported_archs();
  CHECK(std::find(archs.begin(), archs.end(), 80) != archs.end());
  CHECK(std::find(archs.begin(), archs.end(), 90) != archs.end());
  // One table per process.
  auto again = ktune::cuda::load_nvrtc();
  REQUIRE(again.ok());
  CHECK(again.value() == api.value());
#endif
}
