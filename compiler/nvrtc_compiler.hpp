#pragma once
// NvrtcCompiler: CUDA C++ (language "cuda") to CUBIN with NVRTC, loaded at run time
// (cuda/cuda_api.hpp). No GPU is needed: the target is the job's `arch` ("sm_90"). Options:
//   --gpu-architecture=<arch> -std=c++17 --extra-device-vectorization --ptxas-options=-v
//   -I<include_dirs> -I<toolkit include dir> -DKTUNE_DTYPE=<c type> -DKTUNE_DTYPE_<DTYPE>=1
//   -DNAME=value... <extra_flags>
// The program is named by the source's path, so the log's errors read "<path>(<line>): error: ...".
// Entry points are extern "C" __global__ functions: their names in the CUBIN are the source's.
// The toolkit include dir lets kernels include <cuda_fp16.h>; f16 is __half, i32 int, i64
// long long, f32 float, f64 double.
//
// Artifacts: <cache_dir>/<key[0:2]>/<key>.cubin, written to a unique temp file in that directory
// and renamed into place (concurrent compiles of one key all succeed; readers never see a partial
// file; a failed compile leaves nothing). The key covers the source hash (or the source's content
// when the job has none), language, dtype, defines (sorted), extra flags, the fixed options, the
// nvrtc version, the arch and k_nvrtc_cache_version. A cached file that is not a valid CUBIN is
// compiled again.
//
// Resources: registers and stack frame per kernel are read from the CUBIN (cuda/cubin.hpp) on
// every compile and cache hit; spill stores and loads and static shared memory come from ptxas's
// verbose report in the nvrtc log, so they are known only when this call compiled.
//
// Thread safety: compile() and cache_key() may be called concurrently on one instance.
#include "compiler/compiler.hpp"
#include "cuda/cubin.hpp"

#include <memory>
#include <string>
#include <vector>

namespace ktune {

namespace cuda {
struct NvrtcApi;
}

// Bumped whenever the inputs, options or layout of the CUBIN cache change.
inline constexpr int k_nvrtc_cache_version = 1;

// <cache_dir>/<key[0:2]>/<key>.cubin
[[nodiscard]] std::string cuda_artifact_path(const std::string& cache_dir, const std::string& key);

// The C type a CUDA kernel gets as KTUNE_DTYPE: f32 float, f64 double, f16 __half, i32 int,
// i64 long long. Errors: bad_dtype naming the dtype.
[[nodiscard]] Result<std::string> cuda_dtype_c_type(std::string_view dtype);

// Whether `arch` names a real architecture the way --gpu-architecture takes it: "sm_" followed by
// digits and an optional 'a' or 'f' suffix ("sm_90", "sm_90a", "sm_100f").
[[nodiscard]] bool is_cuda_arch(std::string_view arch);

// compile() with the resources of the kernels in the CUBIN (empty unless the outcome is ok).
struct NvrtcCompileResult {
  CompileOutcome outcome;
  std::vector<cuda::KernelResources> kernels;

  // CompileOutcome::to_json() plus "kernels": [KernelResources::to_json(), ...].
  [[nodiscard]] nlohmann::json to_json() const;
};

class NvrtcCompiler final : public Compiler {
public:
  // Errors: no_device when libnvrtc cannot be loaded (the message names what was tried).
  [[nodiscard]] static Result<std::unique_ptr<NvrtcCompiler>> create();

  [[nodiscard]] std::string cache_key(const CompileJob& job) const override;
  // compile_error outcomes: a job that is not language "cuda", a missing or unsupported arch, an
  // unknown dtype, a define that is not an identifier, an unreadable source, nvrtc rejecting an
  // option or the source (the log is nvrtc's), a cache directory that cannot be written.
  [[nodiscard]] CompileOutcome compile(const CompileJob& job) override;
  [[nodiscard]] NvrtcCompileResult compile_with_resources(const CompileJob& job);

  // "13.0"
  [[nodiscard]] const std::string& version() const { return m_version; }
  // The options nvrtc gets for `job` (without the source), in order; exposed for tools and tests.
  [[nodiscard]] Result<std::vector<std::string>> options(const CompileJob& job) const;

private:
  explicit NvrtcCompiler(const cuda::NvrtcApi* api);
  const cuda::NvrtcApi* m_api;
  std::string m_version;
  std::vector<int> m_archs; // supported by this nvrtc
  std::string m_toolkit_include;
};

} // namespace ktune
