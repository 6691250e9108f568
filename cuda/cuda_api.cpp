#include "cuda/cuda_api.hpp"

#include "core/protocol.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#ifndef KTUNE_CUDA_INCLUDE_DIR
#define KTUNE_CUDA_INCLUDE_DIR ""
#endif
#ifndef KTUNE_CUDA_LIBRARY_DIR
#define KTUNE_CUDA_LIBRARY_DIR ""
#endif

#define KTUNE_CUDA_STRINGIFY_(x) #x
#define KTUNE_CUDA_STRINGIFY(x) KTUNE_CUDA_STRINGIFY_(x)

namespace ktune::cuda {
namespace {

// A dlopen handle. Libraries ktune resolves function tables from stay loaded until the process
// exits (release()), since unloading libcuda under a live context is undefined.
class DlLibrary {
public:
  static Result<DlLibrary> open(const std::string& name) {
    ::dlerror();
    void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* reason = ::dlerror();
      return make_error(ErrorCode::no_device, reason != nullptr ? reason : "dlopen failed");
    }
    return DlLibrary(handle);
  }

  DlLibrary(DlLibrary&& other) noexcept : m_handle(std::exchange(other.m_handle, nullptr)) {}
  DlLibrary& operator=(DlLibrary&& other) noexcept {
    if (this != &other) {
      close();
      m_handle = std::exchange(other.m_handle, nullptr);
    }
    return *this;
  }
  DlLibrary(const DlLibrary&) = delete;
  DlLibrary& operator=(const DlLibrary&) = delete;
  ~DlLibrary() { close(); }

  [[nodiscard]] void* symbol(const char* name) const { return ::dlsym(m_handle, name); }

  // The path the dynamic linker resolved the library to.
  [[nodiscard]] std::string path(const std::string& fallback) const {
    link_map* map = nullptr;
    if (::dlinfo(m_handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
        map->l_name[0] != '\0') {
      return map->l_name;
    }
    return fallback;
  }

  // Keeps the library loaded for the rest of the process.
  void release() { m_handle = nullptr; }

private:
  explicit DlLibrary(void* handle) : m_handle(handle) {}
  void close() {
    if (m_handle != nullptr) ::dlclose(m_handle);
    m_handle = nullptr;
  }
  void* m_handle = nullptr;
};

// Resolves `name` into `target`; false when the library lacks it.
template <class Fn>
bool resolve(const DlLibrary& library, const char* name, Fn& target) {
  target = reinterpret_cast<Fn>(library.symbol(name));
  return target != nullptr;
}

std::string basename_of(const char* file) {
  const std::string path(file);
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string location_of(const char* file, int line) { return basename_of(file) + ":" + std::to_string(line); }

std::string driver_error_description(const DriverApi& api, CUresult result) {
  const char* text = nullptr;
  if (api.cuGetErrorString != nullptr && api.cuGetErrorString(result, &text) == CUDA_SUCCESS &&
      text != nullptr) {
    return text;
  }
  return "no description";
}

std::string driver_failure(const DriverApi& api, CUresult result, const char* call) {
  return std::string(call) + " failed: " + driver_error_name(api, result) + " (" +
         driver_error_description(api, result) + ")";
}

// "; this process runs under an address-space limit ..." when RLIMIT_AS is set, else "".
std::string address_space_note() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return {};
  return "; this process runs under an address-space limit (RLIMIT_AS " +
         std::to_string(limit.rlim_cur >> 20) +
         " MiB), and the driver reserves a large virtual range at cuInit: run CUDA work without "
         "one (ktuned's worker_memory_mb does not apply to CUDA bench workers; docs/gpu.md)";
}

Result<const NvrtcApi*> load_nvrtc_uncached() {
  std::vector<std::string> names;
  if (const char* env = std::getenv("KTUNE_NVRTC_LIBRARY"); env != nullptr && *env != '\0') {
    names.emplace_back(env);
  }
  const std::string versioned = "libnvrtc.so." + std::to_string(CUDA_VERSION / 1000);
  names.push_back(versioned);
  if (const std::string dir = KTUNE_CUDA_LIBRARY_DIR; !dir.empty()) names.push_back(dir + "/" + versioned);
  names.emplace_back("libnvrtc.so");

  std::string reasons;
  for (const auto& name : names) {
    auto library = DlLibrary::open(name);
    if (!library) {
      reasons += (reasons.empty() ? "" : "; ") + library.error().message;
      continue;
    }
    auto api = std::make_unique<NvrtcApi>();
    api->library = library->path(name);
#define KTUNE_CUDA_RESOLVE(fn)                                                                            \
  if (!resolve(*library, KTUNE_CUDA_STRINGIFY(fn), api->fn)) {                                            \
    return make_error(                                                                                    \
        ErrorCode::no_device,                                                                        \
        api->library + " lacks the symbol " + KTUNE_CUDA_STRINGIFY(fn) + ": not a usable NVRTC library"); \
  }
    KTUNE_NVRTC_FUNCTIONS(KTUNE_CUDA_RESOLVE)
#undef KTUNE_CUDA_RESOLVE
#define KTUNE_CUDA_RESOLVE_OPTIONAL(fn) resolve(*library, KTUNE_CUDA_STRINGIFY(fn), api->fn);
    KTUNE_NVRTC_PCH_FUNCTIONS(KTUNE_CUDA_RESOLVE_OPTIONAL)
#undef KTUNE_CUDA_RESOLVE_OPTIONAL
    if (const nvrtcResult r = api->nvrtcVersion(&api->major, &api->minor); r != NVRTC_SUCCESS) {
      return make_error(ErrorCode::no_device,
                        api->library + ": nvrtcVersion failed: " + api->nvrtcGetErrorString(r));
    }
    library->release();
    return api.release();
  }
  return make_error(ErrorCode::no_device,
                    "NVRTC not found: the CUDA backend needs " + versioned +
                        " (set KTUNE_NVRTC_LIBRARY to its path); tried: " + reasons);
}

std::string visible_devices_note() {
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return "CUDA_VISIBLE_DEVICES is not set";
  return std::string("CUDA_VISIBLE_DEVICES=") + env;
}

Result<const DriverApi*> open_driver(const std::string& name) {
  auto library = DlLibrary::open(name);
  if (!library) {
    return make_error(ErrorCode::no_device, name + " not found: no NVIDIA driver on this machine (" +
                                                     library.error().message + ")");
  }
  auto api = std::make_unique<DriverApi>();
  api->library = library->path(name);
#define KTUNE_CUDA_RESOLVE(fn)                                                         \
  if (api->fn == nullptr && !resolve(*library, KTUNE_CUDA_STRINGIFY(fn), api->fn)) {   \
    return make_error(ErrorCode::no_device,                                       \
                      api->library + " lacks the symbol " + KTUNE_CUDA_STRINGIFY(fn) + \
                          ": the NVIDIA driver is older than ktune needs (CUDA " +     \
                          std::to_string(CUDA_VERSION / 1000) + "." +                  \
                          std::to_string(CUDA_VERSION % 1000 / 10) + " headers)");     \
  }
  // cuEventElapsedTime_v2 (CUDA 12.8) has the signature of the original; older drivers only
  // export the original.
  if (!resolve(*library, KTUNE_CUDA_STRINGIFY(cuEventElapsedTime), api->cuEventElapsedTime)) {
    resolve(*library, "cuEventElapsedTime", api->cuEventElapsedTime);
  }
  KTUNE_DRIVER_FUNCTIONS(KTUNE_CUDA_RESOLVE)
#undef KTUNE_CUDA_RESOLVE

  const CUresult init = api->cuInit(0);
  if (init != CUDA_SUCCESS) {
    const std::string head =
        "cuInit returned " + driver_error_name(*api, init) + " (" + std::to_string(init) + ")";
    if (init == CUDA_ERROR_STUB_LIBRARY) {
      return make_error(ErrorCode::no_device,
                        head + ": " + api->library +
                            " is the CUDA toolkit's stub library, not a driver: no NVIDIA driver on "
                            "this machine");
    }
    if (init == CUDA_ERROR_NO_DEVICE) {
      return make_error(ErrorCode::no_device, head + ": no CUDA device is visible to this process (" +
                                                       visible_devices_note() + ")");
    }
    return make_error(ErrorCode::no_device, head + " (" + driver_error_description(*api, init) +
                                                     ") from " + api->library + address_space_note());
  }
  if (const CUresult r = api->cuDriverGetVersion(&api->driver_version); r != CUDA_SUCCESS) {
    return make_error(ErrorCode::no_device,
                      api->library + ": " + driver_failure(*api, r, "cuDriverGetVersion"));
  }
  if (auto problem = driver_version_problem(api->driver_version, CUDA_VERSION)) {
    return make_error(ErrorCode::no_device, api->library + ": " + *problem);
  }
  library->release();
  return api.release();
}

} // namespace

std::string NvrtcApi::version() const { return std::to_string(major) + "." + std::to_string(minor); }

std::vector<int> NvrtcApi::supported_archs() const {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return {};
  std::vector<int> archs(static_cast<std::size_t>(count));
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  return archs;
}

bool NvrtcApi::has_pch() const {
  return nvrtcGetPCHCreateStatus != nullptr && nvrtcGetPCHHeapSizeRequired != nullptr &&
         nvrtcSetPCHHeapSize != nullptr;
}

Result<const NvrtcApi*> load_nvrtc() {
  // Heap objects reachable from these statics for the whole process: never unloaded.
  static const Result<const NvrtcApi*>* cached = new Result<const NvrtcApi*>(load_nvrtc_uncached());
  return *cached;
}

Result<const DriverApi*> load_driver() {
  static const Result<const DriverApi*>* cached = new Result<const DriverApi*>(open_driver("libcuda.so.1"));
  return *cached;
}

Result<const DriverApi*> load_driver_from(const std::string& library) {
  static std::mutex mutex;
  static auto* loaded = new std::map<std::string, Result<const DriverApi*>>();
  const std::lock_guard lock(mutex);
  auto it = loaded->find(library);
  if (it == loaded->end()) it = loaded->emplace(library, open_driver(library)).first;
  return it->second;
}

std::string toolkit_include_dir() {
  const std::string dir = KTUNE_CUDA_INCLUDE_DIR;
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return {};
  return dir;
}

std::vector<std::string> toolkit_include_dirs() {
  const std::string dir = toolkit_include_dir();
  if (dir.empty()) return {};
  std::vector<std::string> dirs{dir};
  std::error_code ec;
  if (const std::string cccl = dir + "/cccl"; std::filesystem::is_directory(cccl, ec)) dirs.push_back(cccl);
  return dirs;
}

std::string driver_error_name(int code) {
  switch (code) {
#define KTUNE_CUDA_NAME(value) \
  case value:                  \
    return #value;
    KTUNE_CUDA_NAME(CUDA_SUCCESS)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_VALUE)
    KTUNE_CUDA_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    KTUNE_CUDA_NAME(CUDA_ERROR_NOT_INITIALIZED)
    KTUNE_CUDA_NAME(CUDA_ERROR_DEINITIALIZED)
    KTUNE_CUDA_NAME(CUDA_ERROR_STUB_LIBRARY)
    KTUNE_CUDA_NAME(CUDA_ERROR_DEVICE_UNAVAILABLE)
    KTUNE_CUDA_NAME(CUDA_ERROR_NO_DEVICE)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_DEVICE)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_IMAGE)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_CONTEXT)
    KTUNE_CUDA_NAME(CUDA_ERROR_NO_BINARY_FOR_GPU)
    KTUNE_CUDA_NAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    KTUNE_CUDA_NAME(CUDA_ERROR_ECC_UNCORRECTABLE)
    KTUNE_CUDA_NAME(CUDA_ERROR_NVLINK_UNCORRECTABLE)
    KTUNE_CUDA_NAME(CUDA_ERROR_CONTAINED)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_SOURCE)
    KTUNE_CUDA_NAME(CUDA_ERROR_FILE_NOT_FOUND)
    KTUNE_CUDA_NAME(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_HANDLE)
    KTUNE_CUDA_NAME(CUDA_ERROR_NOT_FOUND)
    KTUNE_CUDA_NAME(CUDA_ERROR_NOT_READY)
    KTUNE_CUDA_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
    KTUNE_CUDA_NAME(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    KTUNE_CUDA_NAME(CUDA_ERROR_LAUNCH_TIMEOUT)
    KTUNE_CUDA_NAME(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING)
    KTUNE_CUDA_NAME(CUDA_ERROR_ASSERT)
    KTUNE_CUDA_NAME(CUDA_ERROR_HARDWARE_STACK_ERROR)
    KTUNE_CUDA_NAME(CUDA_ERROR_ILLEGAL_INSTRUCTION)
    KTUNE_CUDA_NAME(CUDA_ERROR_MISALIGNED_ADDRESS)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_ADDRESS_SPACE)
    KTUNE_CUDA_NAME(CUDA_ERROR_INVALID_PC)
    KTUNE_CUDA_NAME(CUDA_ERROR_LAUNCH_FAILED)
    KTUNE_CUDA_NAME(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
    KTUNE_CUDA_NAME(CUDA_ERROR_TENSOR_MEMORY_LEAK)
    KTUNE_CUDA_NAME(CUDA_ERROR_NOT_PERMITTED)
    KTUNE_CUDA_NAME(CUDA_ERROR_NOT_SUPPORTED)
    KTUNE_CUDA_NAME(CUDA_ERROR_SYSTEM_NOT_READY)
    KTUNE_CUDA_NAME(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    KTUNE_CUDA_NAME(CUDA_ERROR_MPS_CLIENT_TERMINATED)
    KTUNE_CUDA_NAME(CUDA_ERROR_EXTERNAL_DEVICE)
    KTUNE_CUDA_NAME(CUDA_ERROR_UNKNOWN)
#undef KTUNE_CUDA_NAME
    default:
      break;
  }
  return "CUDA_ERROR_" + std::to_string(code);
}

std::string driver_error_name(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  if (api.cuGetErrorName != nullptr && api.cuGetErrorName(result, &name) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return driver_error_name(result);
}

std::optional<std::string> driver_version_problem(int driver_version, int toolkit_version) {
  const int driver_major = driver_version / 1000;
  const int toolkit_major = toolkit_version / 1000;
  if (driver_major >= toolkit_major) return std::nullopt;
  const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  std::string minimum;
  if (toolkit_major == 12) minimum = " (on Linux, driver 525 or newer)";
  if (toolkit_major == 13) minimum = " (on Linux, driver 580 or newer)";
  return "the NVIDIA driver supports CUDA " + version(driver_version) + " (cuDriverGetVersion " +
         std::to_string(driver_version) + "), and ktune's CUDA backend is built for CUDA " +
         version(toolkit_version) + ": every kernel its nvrtc compiles would fail to load. Install a "
         "driver for CUDA " + std::to_string(toolkit_major) + ".0 or newer" + minimum +
         ", or build ktune against the CUDA " + std::to_string(driver_major) + " toolkit";
}

bool is_fatal_error(int code) {
  switch (code) {
    // cuda.h: "To continue using CUDA, the process must be terminated and relaunched."
    case CUDA_ERROR_CONTAINED:             // 226
    case CUDA_ERROR_ILLEGAL_ADDRESS:       // 700
    case CUDA_ERROR_LAUNCH_TIMEOUT:        // 702
    case CUDA_ERROR_ASSERT:                // 710
    case CUDA_ERROR_HARDWARE_STACK_ERROR:  // 714
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:   // 715
    case CUDA_ERROR_MISALIGNED_ADDRESS:    // 716
    case CUDA_ERROR_INVALID_ADDRESS_SPACE: // 717
    case CUDA_ERROR_INVALID_PC:            // 718
    case CUDA_ERROR_LAUNCH_FAILED:         // 719
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:    // 721
    case CUDA_ERROR_MPS_CLIENT_TERMINATED: // 810
    case CUDA_ERROR_EXTERNAL_DEVICE:       // 911
    // Not documented as fatal, treated so: after an uncorrectable ECC or NVLink error the data
    // on the device can no longer be trusted, and after an unknown error nothing says the
    // context survived. A restart costs one worker start; keeping a broken context would fail
    // every later candidate.
    case CUDA_ERROR_ECC_UNCORRECTABLE:     // 214
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:  // 220
    case CUDA_ERROR_UNKNOWN:               // 999
      return true;
    default:
      return false;
  }
}

bool is_out_of_resources(int code) { return code == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; }

CudaCallError::CudaCallError(CudaLibrary library, int code, std::string name, std::string description,
                             std::string call, std::string location, std::string log)
    : std::runtime_error(location + ": " + call + " failed: " + name + " (" + description + ")" +
                         (log.empty() ? std::string() : "\n" + log)),
      m_library(library),
      m_code(code),
      m_name(std::move(name)),
      m_description(std::move(description)),
      m_call(std::move(call)),
      m_location(std::move(location)),
      m_log(std::move(log)) {
  m_summary = m_location + ": " + m_call + " failed: " + m_name + " (" + m_description + ")";
}

void check_driver(const DriverApi& api, CUresult result, const char* call, const char* file, int line) {
  if (result == CUDA_SUCCESS) return;
  throw CudaCallError(CudaLibrary::driver, result, driver_error_name(api, result),
                      driver_error_description(api, result), call, location_of(file, line), {});
}

CUresult report_driver(const DriverApi& api, CUresult result, const char* call, const char* file,
                       int line) noexcept {
  if (result != CUDA_SUCCESS) {
    try {
      const std::string text =
          "ktune: " + location_of(file, line) + ": " + driver_failure(api, result, call) + "\n";
      std::fputs(text.c_str(), stderr);
    } catch (...) {
      std::fputs("ktune: a CUDA driver call failed during cleanup\n", stderr);
    }
  }
  return result;
}

std::string program_log(const NvrtcApi& api, nvrtcProgram program) noexcept {
  if (program == nullptr) return {};
  try {
    std::size_t size = 0;
    if (api.nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
    std::string log(size, '\0');
    if (api.nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return {};
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
  } catch (...) {
    return {};
  }
}

void check_nvrtc(const NvrtcApi& api, nvrtcResult result, nvrtcProgram program, const char* call,
                 const char* file, int line) {
  if (result == NVRTC_SUCCESS) return;
  const char* text = api.nvrtcGetErrorString(result);
  const std::string name = text != nullptr ? text : "NVRTC_ERROR_" + std::to_string(result);
  std::string description;
  switch (result) {
    case NVRTC_ERROR_COMPILATION:
      description = "the source did not compile";
      break;
    case NVRTC_ERROR_INVALID_OPTION:
      description = "an option was rejected";
      break;
    case NVRTC_ERROR_OUT_OF_MEMORY:
      description = "out of host memory";
      break;
    default:
      description = "nvrtc " + api.version();
      break;
  }
  throw CudaCallError(CudaLibrary::nvrtc, result, name, description, call, location_of(file, line),
                      program_log(api, program));
}

} // namespace ktune::cuda
