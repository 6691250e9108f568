#pragma once
// CUDA devices as the driver reports them (bench workers and `ktune devices`), and their
// fingerprint: name, compute capability, SM count, memory size, L2 size, driver version and nvrtc
// version. Two boards of one model on one driver and nvrtc share a fingerprint, so winners
// measured on either serve both. Needs libcuda.so.1 at run time (cuda/cuda_api.hpp).
#include "core/device.hpp"
#include "core/result.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace ktune {

struct CudaDeviceProperties {
  int ordinal = 0;                // as this process sees it (after CUDA_VISIBLE_DEVICES)
  std::string name;               // "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0; // compute capability
  int sm_count = 0;
  std::uint64_t memory_bytes = 0;
  std::int64_t l2_bytes = 0;
  int driver_version = 0;    // cuDriverGetVersion: 1000 * major + 10 * minor
  std::string nvrtc_version; // "13.0"; "none" when libnvrtc cannot be loaded
  std::string uuid;          // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx": this board, as nvidia-smi
                             // names it ("MIG-..." for a MIG instance, cuda::uuid_is_mig); not
                             // part of the fingerprint: boards of a model share it

  // Launch limits (not part of the fingerprint: they follow from the model).
  int max_threads_per_block = 0;
  int max_shared_bytes_per_block = 0;       // without opting in (48 KiB)
  int max_shared_bytes_per_block_optin = 0; // with cuFuncSetAttribute
  int max_registers_per_block = 0;
  int warp_size = 0;
};

// "sm_90" for compute capability 9.0.
[[nodiscard]] std::string cuda_arch(int cc_major, int cc_minor);
// "13.0" for 13000.
[[nodiscard]] std::string cuda_version_string(int version);
// The 16 bytes of a CUuuid as lowercase hex grouped 8-4-4-4-12, prefixed as nvidia-smi and
// CUDA_VISIBLE_DEVICES write it: "GPU-" for a board, "MIG-" for a MIG instance.
enum class UuidKind { board, mig };
[[nodiscard]] std::string cuda_uuid_string(const unsigned char (&bytes)[16], UuidKind kind = UuidKind::board);

// The DeviceInfo of `props`. Pure. name = "cuda:<ordinal>"; details =
// {"kind":"cuda","name":..,"compute_capability":"9.0","arch":"sm_90","sm_count":..,
//  "memory_bytes":..,"l2_bytes":..,"driver_version":"13.0","nvrtc_version":"13.0"};
// fingerprint = hash_hex(details.dump()); uuid = props.uuid.
[[nodiscard]] DeviceInfo cuda_device_from(const CudaDeviceProperties& props);

// Queries device `ordinal`. Errors (code no_device): the driver cannot be loaded (load_driver's
// message), no such device, or a failing query (naming the call and the CUDA error).
[[nodiscard]] Result<CudaDeviceProperties> query_cuda_device(int ordinal);

// Every CUDA device this process can see, in ordinal order. Errors (code no_device): the driver
// cannot be loaded, or it sees no device ("no CUDA device is visible ... (CUDA_VISIBLE_DEVICES=..)").
[[nodiscard]] Result<std::vector<DeviceInfo>> list_cuda_devices();

} // namespace ktune
