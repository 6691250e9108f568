#include "cuda/cuda_api.hpp"

#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

using namespace ktune;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("the driver loads, or fails with no_device and the cause", "[cuda]") {
  auto driver = cuda::load_driver();
  if (driver) {
    // A machine with an NVIDIA driver and a device.
    CHECK(driver.value()->driver_version > 0);
    CHECK(driver.value()->cuLaunchKernel != nullptr);
    return;
  }
  CHECK(driver.error().code == ktune::ErrorCode::no_device);
  const std::string& message = driver.error().message;
  const bool named_cause = message.find("libcuda.so.1 not found: no NVIDIA driver on this machine") == 0 ||
                           message.find("CUDA_ERROR_STUB_LIBRARY") != std::string::npos ||
                           message.find("CUDA_ERROR_NO_DEVICE") != std::string::npos;
  INFO(message);
  CHECK(named_cause);
  // Asking again gives the same answer without loading again.
  auto again = cuda::load_driver();
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message == message);
}

TEST_CASE("the toolkit's stub libcuda is recognised as no driver", "[cuda]") {
  const std::string include_dir = cuda::toolkit_include_dir();
  REQUIRE_FALSE(include_dir.empty());
  const std::filesystem::path root = std::filesystem::path(include_dir).parent_path();
  std::string stub;
  for (const char* dir : {"lib64/stubs", "lib/stubs", "targets/x86_64-linux/lib/stubs"}) {
    if (std::filesystem::exists(root / dir / "libcuda.so")) {
      stub = (root / dir / "libcuda.so").string();
      break;
    }
  }
  if (stub.empty()) {
    WARN("no stub libcuda.so under " << root << ": nothing to check");
    return;
  }
  auto driver = cuda::load_driver_from(stub);
  REQUIRE_FALSE(driver.ok());
  CHECK(driver.error().code == ktune::ErrorCode::no_device);
  CHECK_THAT(driver.error().message, StartsWith("cuInit returned CUDA_ERROR_STUB_LIBRARY (34)") &&
                                         Contains("stub library, not a driver"));
}

TEST_CASE("a missing library is no_device naming it", "[cuda]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "libcuda.so.1").string();
  auto driver = cuda::load_driver_from(path);
  REQUIRE_FALSE(driver.ok());
  CHECK(driver.error().code == ktune::ErrorCode::no_device);
  CHECK_THAT(driver.error().message, StartsWith(path + " not found: no NVIDIA driver on this machine"));
}

TEST_CASE("CUDA error names and classes", "[cuda]") {
  CHECK(cuda::driver_error_name(CUDA_ERROR_ILLEGAL_ADDRESS) == "CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK(cuda::driver_error_name(CUDA_ERROR_STUB_LIBRARY) == "CUDA_ERROR_STUB_LIBRARY");
  CHECK(cuda::driver_error_name(CUDA_ERROR_CONTAINED) == "CUDA_ERROR_CONTAINED");
  CHECK(cuda::driver_error_name(123456) == "CUDA_ERROR_123456");
  CHECK(cuda::is_out_of_resources(701));
  CHECK_FALSE(cuda::is_out_of_resources(700));
}

TEST_CASE("the fatal CUDA errors are those after which the process must restart", "[cuda]") {
  struct Row {
    int code;
    bool fatal;
  };
  // cuda.h: "the process must be terminated and relaunched" -- and 214, 220, 999 by choice.
  const Row table[] = {
      {CUDA_ERROR_ECC_UNCORRECTABLE, true},     {CUDA_ERROR_NVLINK_UNCORRECTABLE, true},
      {CUDA_ERROR_CONTAINED, true},             {CUDA_ERROR_ILLEGAL_ADDRESS, true},
      {CUDA_ERROR_LAUNCH_TIMEOUT, true},        {CUDA_ERROR_ASSERT, true},
      {CUDA_ERROR_HARDWARE_STACK_ERROR, true},  {CUDA_ERROR_ILLEGAL_INSTRUCTION, true},
      {CUDA_ERROR_MISALIGNED_ADDRESS, true},    {CUDA_ERROR_INVALID_ADDRESS_SPACE, true},
      {CUDA_ERROR_INVALID_PC, true},            {CUDA_ERROR_LAUNCH_FAILED, true},
      {CUDA_ERROR_TENSOR_MEMORY_LEAK, true},    {CUDA_ERROR_MPS_CLIENT_TERMINATED, true},
      {CUDA_ERROR_EXTERNAL_DEVICE, true},       {CUDA_ERROR_UNKNOWN, true},
      // A property of one candidate or one call: the context goes on.
      {CUDA_SUCCESS, false},                    {CUDA_ERROR_INVALID_VALUE, false},
      {CUDA_ERROR_OUT_OF_MEMORY, false},        {CUDA_ERROR_INVALID_IMAGE, false},
      {CUDA_ERROR_NO_BINARY_FOR_GPU, false},    {CUDA_ERROR_NOT_FOUND, false},
      {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, false}, {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, false},
      {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, false}, {CUDA_ERROR_NOT_SUPPORTED, false},
  };
  for (const Row& row : table) {
    INFO(row.code << " " << cuda::driver_error_name(row.code));
    CHECK(cuda::is_fatal_error(row.code) == row.fatal);
  }
  CHECK(cuda::is_fatal_error(226));
  CHECK(cuda::is_fatal_error(721));
  CHECK(cuda::is_fatal_error(911));
}

TEST_CASE("a driver older than the toolkit's CUDA major is refused with both versions", "[cuda]") {
  CHECK_FALSE(cuda::driver_version_problem(13000, 13000));
  CHECK_FALSE(cuda::driver_version_problem(13000, 13020)); // minor version compatibility
  CHECK_FALSE(cuda::driver_version_problem(13010, 12080));
  const auto old = cuda::driver_version_problem(12040, 13000);
  REQUIRE(old.has_value());
  CHECK(*old ==
        "the NVIDIA driver supports CUDA 12.4 (cuDriverGetVersion 12040), and ktune's CUDA backend "
        "is built for CUDA 13.0: every kernel its nvrtc compiles would fail to load. Install a "
        "driver for CUDA 13.0 or newer (on Linux, driver 580 or newer), or build ktune against the "
        "CUDA 12 toolkit");
  CHECK_THAT(*cuda::driver_version_problem(11080, 12030), Contains("driver 525 or newer"));
  // The toolkit ktune was built with needs a driver for its own major version.
  CHECK_THAT(*cuda::driver_version_problem(CUDA_VERSION - 1000, CUDA_VERSION),
             Contains("built for CUDA " + std::to_string(CUDA_VERSION / 1000) + "."));
}

namespace {

// A driver table whose calls fail in fixed ways, to exercise the checking macros without a GPU.
cuda::DriverApi failing_driver() {
  cuda::DriverApi api;
  api.cuMemAlloc = [](CUdeviceptr*, size_t) -> CUresult { return CUDA_ERROR_OUT_OF_MEMORY; };
  api.cuMemFree = [](CUdeviceptr) -> CUresult { return CUDA_ERROR_INVALID_VALUE; };
  api.cuCtxSetCurrent = [](CUcontext) -> CUresult { return CUDA_SUCCESS; };
  api.cuGetErrorString = [](CUresult result, const char** text) -> CUresult {
    *text = result == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "invalid argument";
    return CUDA_SUCCESS;
  };
  return api;
}

} // namespace

TEST_CASE("KTUNE_CU throws with file:line, the call and the error", "[cuda]") {
  const cuda::DriverApi api = failing_driver();
  CHECK_NOTHROW(KTUNE_CU(api, cuCtxSetCurrent(nullptr)));

  CUdeviceptr ptr = 0;
  const int line = __LINE__ + 2;
  try {
    KTUNE_CU(api, cuMemAlloc(&ptr, 4096));
    FAIL("KTUNE_CU did not throw");
  } catch (const cuda::CudaCallError& error) {
    CHECK(error.library() == cuda::CudaLibrary::driver);
    CHECK(error.code() == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(error.name() == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK(error.call() == "cuMemAlloc(&ptr, 4096)");
    CHECK(error.location() == "test_cuda_api.cpp:" + std::to_string(line));
    CHECK(error.summary() == "test_cuda_api.cpp:" + std::to_string(line) +
                                 ": cuMemAlloc(&ptr, 4096) failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  }
}

TEST_CASE("error names come from the driver's cuGetErrorName", "[cuda]") {
  cuda::DriverApi api = failing_driver();
  // Without cuGetErrorName: ktune's own list.
  CHECK(cuda::driver_error_name(api, CUDA_ERROR_OUT_OF_MEMORY) == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(cuda::driver_error_name(api, static_cast<CUresult>(4242)) == "CUDA_ERROR_4242");
  // With it: the driver's name, also for codes newer than ktune's list.
  api.cuGetErrorName = [](CUresult result, const char** name) -> CUresult {
    if (result != 4242) return CUDA_ERROR_INVALID_VALUE;
    *name = "CUDA_ERROR_FROM_A_NEWER_DRIVER";
    return CUDA_SUCCESS;
  };
  CHECK(cuda::driver_error_name(api, static_cast<CUresult>(4242)) == "CUDA_ERROR_FROM_A_NEWER_DRIVER");
  CHECK(cuda::driver_error_name(api, CUDA_ERROR_OUT_OF_MEMORY) == "CUDA_ERROR_OUT_OF_MEMORY");
  api.cuMemAlloc = [](CUdeviceptr*, size_t) -> CUresult { return static_cast<CUresult>(4242); };
  CUdeviceptr ptr = 0;
  try {
    KTUNE_CU(api, cuMemAlloc(&ptr, 1));
    FAIL("KTUNE_CU did not throw");
  } catch (const cuda::CudaCallError& error) {
    CHECK(error.name() == "CUDA_ERROR_FROM_A_NEWER_DRIVER");
  }
}

TEST_CASE("KTUNE_CU_NOEXCEPT reports and returns the error", "[cuda]") {
  const cuda::DriverApi api = failing_driver();
  CUresult result = CUDA_SUCCESS;
  CHECK_NOTHROW(result = KTUNE_CU_NOEXCEPT(api, cuMemFree(CUdeviceptr{0})));
  CHECK(result == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("KTUNE_NVRTC throws with the program log", "[cuda]") {
  auto loaded = cuda::load_nvrtc();
  REQUIRE(loaded.ok());
  const cuda::NvrtcApi& api = *loaded.value();
  nvrtcProgram program = nullptr;
  KTUNE_NVRTC(api, nullptr,
              nvrtcCreateProgram(&program, "extern \"C\" __global__ void k() {\n  int x = ;\n}\n",
                                 "broken.cu", 0, nullptr, nullptr));
  const char* options[] = {"--gpu-architecture=sm_90"};
  try {
    KTUNE_NVRTC(api, program, nvrtcCompileProgram(program, 1, options));
    FAIL("KTUNE_NVRTC did not throw");
  } catch (const cuda::CudaCallError& error) {
    CHECK(error.library() == cuda::CudaLibrary::nvrtc);
    CHECK(error.code() == NVRTC_ERROR_COMPILATION);
    CHECK(error.name() == "NVRTC_ERROR_COMPILATION");
    CHECK(error.call() == "nvrtcCompileProgram(program, 1, options)");
    CHECK_THAT(error.log(), Contains("broken.cu(2): error"));
    CHECK_THAT(std::string(error.what()), Contains("broken.cu(2): error"));
  }
  api.nvrtcDestroyProgram(&program);
}
