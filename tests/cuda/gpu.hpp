#pragma once
// For [gpu] tests: skips the calling test when this process sees no usable CUDA device.
#include "bench/cuda_device.hpp"
#include "tests/cuda/skip.hpp"

namespace ktune::test {

inline void require_cuda_device() {
  auto devices = list_cuda_devices();
  if (!devices) skip_test("no CUDA device (" + devices.error().message + ")");
}

} // namespace ktune::test
