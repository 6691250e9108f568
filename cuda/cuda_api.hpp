#pragma once
// The CUDA libraries ktune uses, loaded at run time: libnvrtc (compiling .cu sources to CUBIN)
// and libcuda.so.1 (the driver API, for device queries and benchmarking). ktune never links
// either, so every binary starts on a machine without a driver or without a toolkit; each
// library is reached through one table of function pointers, filled by dlsym.
//
// The tables' members carry the names of the C functions as cuda.h spells them after its own
// macros, so `api.cuMemAlloc(...)` calls the cuMemAlloc_v2 symbol exactly like code linked
// against libcuda would; the symbol looked up is always the one the header maps the name to.
//
// Every call goes through one checking macro:
//   KTUNE_CU(drv, cuMemAlloc(&ptr, bytes));          // driver call on table `drv`
//   KTUNE_NVRTC(nv, program, nvrtcCompileProgram(program, n, options));
// A failing call throws CudaCallError naming file:line, the call's text, the error's name and
// description and, for nvrtc, the program's log. The exception is the module's internal
// transport (nvbench's cuda_call.cuh shape): the public entry points of ktune_cuda's users
// (NvrtcCompiler::compile, CudaRunner::run, list_cuda_devices) catch it and return an outcome or
// a Result, so it never escapes to their callers. Destructors use the non-throwing form,
//   KTUNE_CU_NOEXCEPT(drv, cuModuleUnload(module));
// which reports a failure on stderr and returns the CUresult.
//
// Thread safety: the tables are immutable once loaded; load_nvrtc() and load_driver() may be
// called from any thread (the first call loads, later calls return the same table).
#include "core/result.hpp"

#include <cuda.h>
#include <nvrtc.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ktune::cuda {

// X-macro lists of the functions each table holds.
#define KTUNE_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)                \
  X(nvrtcGetNumSupportedArchs)   \
  X(nvrtcGetSupportedArchs)      \
  X(nvrtcCreateProgram)          \
  X(nvrtcCompileProgram)         \
  X(nvrtcGetCUBINSize)           \
  X(nvrtcGetCUBIN)               \
  X(nvrtcGetProgramLogSize)      \
  X(nvrtcGetProgramLog)          \
  X(nvrtcDestroyProgram)         \
  X(nvrtcGetErrorString)

// Precompiled headers (CUDA 12.8+): resolved when the library has them, else null (NvrtcApi::has_pch).
#define KTUNE_NVRTC_PCH_FUNCTIONS(X) \
  X(nvrtcGetPCHCreateStatus)         \
  X(nvrtcGetPCHHeapSizeRequired)     \
  X(nvrtcSetPCHHeapSize)

#define KTUNE_DRIVER_FUNCTIONS(X) \
  X(cuInit)                       \
  X(cuDriverGetVersion)           \
  X(cuDeviceGet)                  \
  X(cuDeviceGetCount)             \
  X(cuDeviceGetName)              \
  X(cuDeviceGetAttribute)         \
  X(cuDeviceTotalMem)             \
  X(cuDeviceGetUuid)              \
  X(cuDevicePrimaryCtxRetain)     \
  X(cuDevicePrimaryCtxRelease)    \
  X(cuCtxSetCurrent)              \
  X(cuModuleLoadData)             \
  X(cuModuleUnload)               \
  X(cuModuleGetFunction)          \
  X(cuFuncGetAttribute)           \
  X(cuFuncSetAttribute)           \
  X(cuMemAlloc)                   \
  X(cuMemFree)                    \
  X(cuMemGetInfo)                 \
  X(cuMemcpyHtoD)                 \
  X(cuMemcpyDtoH)                 \
  X(cuMemcpyDtoDAsync)            \
  X(cuMemsetD8Async)              \
  X(cuMemsetD16Async)             \
  X(cuStreamCreate)               \
  X(cuStreamDestroy)              \
  X(cuStreamSynchronize)          \
  X(cuEventCreate)                \
  X(cuEventRecord)                \
  X(cuEventSynchronize)           \
  X(cuEventElapsedTime)           \
  X(cuEventDestroy)               \
  X(cuLaunchKernel)               \
  X(cuGetErrorName)               \
  X(cuGetErrorString)

#define KTUNE_CUDA_DECLARE_MEMBER(fn) decltype(&::fn) fn = nullptr;

struct NvrtcApi {
  KTUNE_NVRTC_FUNCTIONS(KTUNE_CUDA_DECLARE_MEMBER)
  KTUNE_NVRTC_PCH_FUNCTIONS(KTUNE_CUDA_DECLARE_MEMBER)
  std::string library; // the file that was loaded
  int major = 0;       // nvrtcVersion
  int minor = 0;

  // "13.0"
  [[nodiscard]] std::string version() const;
  // The architectures this nvrtc compiles for, ascending (75, 80, 86, 89, 90, ...).
  [[nodiscard]] std::vector<int> supported_archs() const;
  // Whether the library has the precompiled-header calls (KTUNE_NVRTC_PCH_FUNCTIONS).
  [[nodiscard]] bool has_pch() const;
};

struct DriverApi {
  KTUNE_DRIVER_FUNCTIONS(KTUNE_CUDA_DECLARE_MEMBER)
  std::string library;    // the file that was loaded
  int driver_version = 0; // cuDriverGetVersion: 1000 * major + 10 * minor
};

#undef KTUNE_CUDA_DECLARE_MEMBER

// Loads libnvrtc once per process and keeps it loaded. Searched in order: $KTUNE_NVRTC_LIBRARY
// (a file name or path), libnvrtc.so.<major of the toolkit ktune was built with>, the same file
// in the toolkit's library directory found at configure time, libnvrtc.so.
// Errors (code "no_device", as a CUDA job cannot run without it): no library found (naming every
// name tried and dlopen's reason), a missing symbol (naming it and the library).
[[nodiscard]] Result<const NvrtcApi*> load_nvrtc();

// Loads libcuda.so.1 once per process, resolves every symbol, calls cuInit(0) and checks the
// driver's CUDA version (driver_version_problem); later calls return the same table or the same
// error. Errors, all with code "no_device":
//   "libcuda.so.1 not found: no NVIDIA driver on this machine (<dlopen's reason>)"
//   "cuInit returned CUDA_ERROR_STUB_LIBRARY (34): <path> is the CUDA toolkit's stub library, not
//    a driver: no NVIDIA driver on this machine"
//   "cuInit returned CUDA_ERROR_NO_DEVICE (100): no CUDA device is visible to this process
//    (CUDA_VISIBLE_DEVICES=...)"
//   any cuInit failure in a process under an address-space limit (RLIMIT_AS) names the limit:
//    the driver reserves a large virtual range at cuInit (docs/gpu.md)
//   "<path>: the NVIDIA driver supports CUDA 12.4, and ktune's CUDA backend is built for CUDA
//    13.0: ..." (driver_version_problem)
//   any other cuInit failure or a missing symbol, named with the library's path.
[[nodiscard]] Result<const DriverApi*> load_driver();

// The same as load_driver() for one named library file, without caching; the library stays
// loaded for the life of the process. For tests and diagnostics.
[[nodiscard]] Result<const DriverApi*> load_driver_from(const std::string& library);

// The toolkit's include directory found at configure time ("" when it no longer exists), so
// kernels may include <cuda_fp16.h> and friends through nvrtc.
[[nodiscard]] std::string toolkit_include_dir();
// The directories nvrtc searches for the toolkit's headers, in nvcc's order: toolkit_include_dir()
// then its cccl/ subdirectory where that exists (CUDA 13 keeps libcu++ <cuda/std/...>, CUB and
// Thrust there). Empty when toolkit_include_dir() is.
[[nodiscard]] std::vector<std::string> toolkit_include_dirs();

// The enum name of a CUresult ("CUDA_ERROR_ILLEGAL_ADDRESS"), from ktune's copy of cuda.h's
// list; for codes it does not know, "CUDA_ERROR_<code>". Works without a driver.
[[nodiscard]] std::string driver_error_name(int code);
// The driver's own name for `result` (cuGetErrorName), so codes newer than ktune's list are
// named too; driver_error_name(result) when the table has no cuGetErrorName or it fails.
[[nodiscard]] std::string driver_error_name(const DriverApi& api, CUresult result);

// nullopt when a driver reporting `driver_version` (cuDriverGetVersion: 1000 * major + 10 *
// minor) runs code built with the CUDA `toolkit_version` (CUDA_VERSION, same encoding): the
// driver's major version must be at least the toolkit's (minor versions are compatible).
// Otherwise the error message: both versions, the Linux driver that first supports the
// toolkit's major (CUDA 12: 525, CUDA 13: 580) and what would go wrong -- every CUBIN the
// toolkit's nvrtc writes would fail to load.
[[nodiscard]] std::optional<std::string> driver_version_problem(int driver_version, int toolkit_version);

// Errors after which the context, and for some the whole process, is unusable: the worker must
// reply and exit, and a new process gets a new context. The list (cuda_api.cpp) is every code
// cuda.h documents as "the process must be terminated and relaunched" (226, 700, 702, 710,
// 714-719, 721, 810, 911), plus 214 and 220 (uncorrectable ECC or NVLink errors: the device's
// memory can no longer be trusted) and 999 (unknown: nothing says the context survived).
[[nodiscard]] bool is_fatal_error(int code);
// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701): a property of one launch configuration.
[[nodiscard]] bool is_out_of_resources(int code);

enum class CudaLibrary { driver, nvrtc };

// A failed driver or nvrtc call. what() is the full one-line message plus, for nvrtc, the log.
class CudaCallError : public std::runtime_error {
public:
  CudaCallError(CudaLibrary library, int code, std::string name, std::string description, std::string call,
                std::string location, std::string log);

  [[nodiscard]] CudaLibrary library() const { return m_library; }
  [[nodiscard]] int code() const { return m_code; }                // CUresult or nvrtcResult
  [[nodiscard]] const std::string& name() const { return m_name; } // "CUDA_ERROR_OUT_OF_MEMORY"
  [[nodiscard]] const std::string& description() const { return m_description; }
  [[nodiscard]] const std::string& call() const { return m_call; }         // "cuMemAlloc(&ptr, bytes)"
  [[nodiscard]] const std::string& location() const { return m_location; } // "cuda_runner.cpp:120"
  [[nodiscard]] const std::string& log() const { return m_log; }           // nvrtc program log, or ""
  // "cuda_runner.cpp:120: cuMemAlloc(&ptr, bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
  [[nodiscard]] const std::string& summary() const { return m_summary; }

private:
  CudaLibrary m_library;
  int m_code;
  std::string m_name, m_description, m_call, m_location, m_log, m_summary;
};

// Throws CudaCallError when `result` is not CUDA_SUCCESS. Used through KTUNE_CU.
void check_driver(const DriverApi& api, CUresult result, const char* call, const char* file, int line);
// Reports a failure on stderr ("ktune: <location>: <call> failed: <name> (<description>)") and
// returns `result`. Used through KTUNE_CU_NOEXCEPT.
CUresult report_driver(const DriverApi& api, CUresult result, const char* call, const char* file,
                       int line) noexcept;
// Throws CudaCallError when `result` is not NVRTC_SUCCESS; the error carries `program`'s log
// when `program` is not null. Used through KTUNE_NVRTC.
void check_nvrtc(const NvrtcApi& api, nvrtcResult result, nvrtcProgram program, const char* call,
                 const char* file, int line);

// The log of `program` ("" when it has none or it cannot be read). Never throws.
[[nodiscard]] std::string program_log(const NvrtcApi& api, nvrtcProgram program) noexcept;

} // namespace ktune::cuda

#define KTUNE_CU(api, call) ::ktune::cuda::check_driver((api), (api).call, #call, __FILE__, __LINE__)
#define KTUNE_CU_NOEXCEPT(api, call) \
  ::ktune::cuda::report_driver((api), (api).call, #call, __FILE__, __LINE__)
#define KTUNE_NVRTC(api, program, call) \
  ::ktune::cuda::check_nvrtc((api), (api).call, (program), #call, __FILE__, __LINE__)
