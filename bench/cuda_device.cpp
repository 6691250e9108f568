#include "bench/cuda_device.hpp"

#include "core/hash.hpp"
#include "core/protocol.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/nvml.hpp"

#include <cstdlib>

namespace ktune {
namespace {

int attribute(const cuda::DriverApi& drv, CUdevice device, CUdevice_attribute which) {
  int value = 0;
  KTUNE_CU(drv, cuDeviceGetAttribute(&value, which, device));
  return value;
}

} // namespace

std::string cuda_arch(int cc_major, int cc_minor) {
  return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor);
}

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

DeviceInfo cuda_device_from(const CudaDeviceProperties& props) {
  DeviceInfo info;
  info.name = "cuda:" + std::to_string(props.ordinal);
  info.details = {
      {"kind", "cuda"},
      {"name", props.name},
      {"compute_capability", std::to_string(props.cc_major) + "." + std::to_string(props.cc_minor)},
      {"arch", cuda_arch(props.cc_major, props.cc_minor)},
      {"sm_count", props.sm_count},
      {"memory_bytes", props.memory_bytes},
      {"l2_bytes", props.l2_bytes},
      {"driver_version", cuda_version_string(props.driver_version)},
      {"nvrtc_version", props.nvrtc_version},
  };
  info.fingerprint = hash_hex(info.details.dump());
  info.uuid = props.uuid;
  return info;
}

std::string cuda_uuid_string(const unsigned char (&bytes)[16], UuidKind kind) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out = kind == UuidKind::mig ? "MIG-" : "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += k_hex[bytes[i] >> 4];
    out += k_hex[bytes[i] & 15];
  }
  return out;
}

Result<CudaDeviceProperties> query_cuda_device(int ordinal) {
  auto loaded = cuda::load_driver();
  if (!loaded) return loaded.error();
  const cuda::DriverApi& drv = *loaded.value();

  CudaDeviceProperties props;
  props.ordinal = ordinal;
  props.driver_version = drv.driver_version;
  auto nvrtc = cuda::load_nvrtc();
  props.nvrtc_version = nvrtc ? nvrtc.value()->version() : std::string("none");
  try {
    int count = 0;
    KTUNE_CU(drv, cuDeviceGetCount(&count));
    if (ordinal < 0 || ordinal >= count) {
      const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
      return make_error(ErrorCode::no_device,
                        "cuda:" + std::to_string(ordinal) + ": this process sees " + std::to_string(count) +
                            " CUDA device(s) (" +
                            (env != nullptr ? "CUDA_VISIBLE_DEVICES=" + std::string(env)
                                            : std::string("CUDA_VISIBLE_DEVICES is not set")) +
                            ")");
    }
    CUdevice device = 0;
    KTUNE_CU(drv, cuDeviceGet(&device, ordinal));
    char name[256] = {};
    KTUNE_CU(drv, cuDeviceGetName(name, static_cast<int>(sizeof name) - 1, device));
    props.name = name;
    std::size_t memory = 0;
    KTUNE_CU(drv, cuDeviceTotalMem(&memory, device));
    props.memory_bytes = memory;
    CUuuid uuid{};
    KTUNE_CU(drv, cuDeviceGetUuid(&uuid, device));
    unsigned char uuid_bytes[16];
    for (int i = 0; i < 16; ++i) uuid_bytes[i] = static_cast<unsigned char>(uuid.bytes[i]);
    props.uuid = cuda_uuid_string(uuid_bytes);
    if (cuda::uuid_is_mig(props.uuid.substr(4))) props.uuid = cuda_uuid_string(uuid_bytes, UuidKind::mig);
    props.cc_major = attribute(drv, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    props.cc_minor = attribute(drv, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    props.sm_count = attribute(drv, device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    props.l2_bytes = attribute(drv, device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    props.max_threads_per_block = attribute(drv, device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    props.max_shared_bytes_per_block =
        attribute(drv, device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    props.max_shared_bytes_per_block_optin =
        attribute(drv, device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    props.max_registers_per_block = attribute(drv, device, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    props.warp_size = attribute(drv, device, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  } catch (const cuda::CudaCallError& error) {
    return make_error(ErrorCode::no_device, "cuda:" + std::to_string(ordinal) + ": " + error.summary());
  }
  return props;
}

Result<std::vector<DeviceInfo>> list_cuda_devices() {
  auto loaded = cuda::load_driver();
  if (!loaded) return loaded.error();
  const cuda::DriverApi& drv = *loaded.value();
  int count = 0;
  try {
    KTUNE_CU(drv, cuDeviceGetCount(&count));
  } catch (const cuda::CudaCallError& error) {
    return make_error(ErrorCode::no_device, error.summary());
  }
  if (count == 0) {
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    return make_error(ErrorCode::no_device,
                      "no CUDA device is visible to this process (" +
                          (env != nullptr ? "CUDA_VISIBLE_DEVICES=" + std::string(env)
                                          : std::string("CUDA_VISIBLE_DEVICES is not set")) +
                          ")");
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    auto props = query_cuda_device(i);
    if (!props) return props.error();
    devices.push_back(cuda_device_from(*props));
  }
  return devices;
}

} // namespace ktune
