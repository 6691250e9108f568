#include "bench/cuda_device.hpp"

#include "tests/cuda/gpu.hpp"

#include <catch2/catch.hpp>

using namespace ktune;

namespace {

CudaDeviceProperties h100() {
  CudaDeviceProperties p;
  p.ordinal = 0;
  p.name = "NVIDIA H100 80GB HBM3";
  p.cc_major = 9;
  p.cc_minor = 0;
  p.sm_count = 132;
  p.memory_bytes = 85'020'000'256ULL;
  p.l2_bytes = 52'428'800;
  p.driver_version = 13000;
  p.nvrtc_version = "13.0";
  p.max_threads_per_block = 1024;
  return p;
}

} // namespace

TEST_CASE("CUDA device fingerprint", "[cuda]") {
  const DeviceInfo info = cuda_device_from(h100());
  CHECK(info.name == "cuda:0");
  CHECK(info.details.at("kind") == "cuda");
  CHECK(info.details.at("arch") == "sm_90");
  CHECK(info.details.at("compute_capability") == "9.0");
  CHECK(info.details.at("sm_count") == 132);
  CHECK(info.details.at("l2_bytes") == 52'428'800);
  CHECK(info.details.at("driver_version") == "13.0");
  CHECK(info.details.at("nvrtc_version") == "13.0");
  CHECK(info.fingerprint.size() == 32);

  SECTION("the same model on another ordinal shares the fingerprint") {
    CudaDeviceProperties other = h100();
    other.ordinal = 3;
    other.max_threads_per_block = 512; // launch limits are not part of it
    other.uuid = "GPU-00000000-0000-0000-0000-000000000003";  // nor is the board
    const DeviceInfo second = cuda_device_from(other);
    CHECK(second.name == "cuda:3");
    CHECK(second.fingerprint == info.fingerprint);
    CHECK(second.uuid == other.uuid);
  }
  SECTION("each identifying field changes it") {
    auto differs = [&](auto change) {
      CudaDeviceProperties p = h100();
      change(p);
      return cuda_device_from(p).fingerprint != info.fingerprint;
    };
    CHECK(differs([](CudaDeviceProperties& p) { p.name = "NVIDIA H200"; }));
    CHECK(differs([](CudaDeviceProperties& p) { p.cc_minor = 1; }));
    CHECK(differs([](CudaDeviceProperties& p) { p.sm_count = 114; }));
    CHECK(differs([](CudaDeviceProperties& p) { p.memory_bytes += 1; }));
    CHECK(differs([](CudaDeviceProperties& p) { p.l2_bytes = 0; }));
    CHECK(differs([](CudaDeviceProperties& p) { p.driver_version = 12080; }));
    CHECK(differs([](CudaDeviceProperties& p) { p.nvrtc_version = "12.8"; }));
  }
}

TEST_CASE("CUDA arch and version strings", "[cuda]") {
  CHECK(cuda_arch(8, 6) == "sm_86");
  CHECK(cuda_arch(10, 0) == "sm_100");
  CHECK(cuda_version_string(12080) == "12.8");
  CHECK(cuda_version_string(13000) == "13.0");
  const unsigned char bytes[16] = {0x6f, 0x1c, 0x2e, 0x0a, 0x9b, 0x3d, 0x41, 0x02,
                                   0xa7, 0xff, 0x00, 0x10, 0x20, 0x30, 0x40, 0x5e};
  CHECK(cuda_uuid_string(bytes) == "GPU-6f1c2e0a-9b3d-4102-a7ff-00102030405e");
  CHECK(cuda_uuid_string(bytes, UuidKind::mig) == "MIG-6f1c2e0a-9b3d-4102-a7ff-00102030405e");
}

TEST_CASE("listing CUDA devices answers a list or no_device", "[cuda]") {
  auto devices = list_cuda_devices();
  if (!devices) {
    CHECK(devices.error().code == ktune::ErrorCode::no_device);
    CHECK_FALSE(devices.error().message.empty());
    auto props = query_cuda_device(0);
    REQUIRE_FALSE(props.ok());
    CHECK(props.error().code == ktune::ErrorCode::no_device);
    return;
  }
  REQUIRE_FALSE(devices->empty());
  CHECK(devices->front().name == "cuda:0");
}

TEST_CASE("the properties of device 0", "[cuda][gpu]") {
  test::require_cuda_device();
  auto props = query_cuda_device(0);
  REQUIRE(props.ok());
  CHECK_FALSE(props->name.empty());
  CHECK(props->cc_major >= 5);
  CHECK(props->sm_count > 0);
  CHECK(props->memory_bytes > 0);
  CHECK(props->l2_bytes > 0);
  CHECK(props->max_threads_per_block >= 1024);
  CHECK(props->max_shared_bytes_per_block >= 48 * 1024);
  CHECK(props->max_shared_bytes_per_block_optin >= props->max_shared_bytes_per_block);
  CHECK(props->warp_size == 32);
  CHECK(props->uuid.rfind("GPU-", 0) == 0);
  CHECK(props->uuid.size() == 40);
  auto missing = query_cuda_device(1000);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ktune::ErrorCode::no_device);
}
