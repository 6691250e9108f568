#pragma once
// NvrtcCompiler: CUDA C++ (language "cuda") to CUBIN with NVRTC, loaded at run time
// (cuda/cuda_api.hpp). No GPU is needed: the target is the job's `arch` ("sm_90"). Options:
//   --gpu-architecture=<arch> -std=c++17 --extra-device-vectorization --ptxas-options=-v
//   -I<include_dirs> -I<toolkit include dir> [-I<toolkit include dir>/cccl]
//   [--pre-include=cuda_fp16.h | cuda_bf16.h] -DKTUNE_DTYPE=<c type> -DKTUNE_DTYPE_<DTYPE>=1
//   -DNAME=value... <extra_flags>
// The toolkit's include dirs (cuda::toolkit_include_dirs: CUDA 13 keeps <cuda/std/...>, CUB and
// Thrust in include/cccl) let kernels include <cuda_fp16.h>, <cuda/std/...> and friends. f16 is
// __half and bf16 __nv_bfloat16, whose headers nvrtc pre-includes, so a kernel using
// KTUNE_DTYPE needs no #include of its own; i32 is int, i64 long long, f32 float, f64 double.
//
// Two ways to build a config:
//   - Alone, as above: the source is the program (named by its path, so the log's errors read
//     "<path>(<line>): error: ..."), the config's defines on the command line. Jobs without an
//     entry or whose source cannot share a unit (unit_obstacle, compiler/batch_unit.hpp) take it.
//   - In a unit (batch_unit_text): the others. Their entry is renamed to <entry>_k<the key's
//     first 16 hex digits>, and each config lives in the namespace ktune_k<the same digits>, so
//     an artifact serves the same whether a batch or a single compile built it; the outcome's
//     entry_symbol names the CUBIN's function for cuModuleGetFunction. The unit's configs have
//     their defines in the program text (the command line is a single compile's without them),
//     and nvrtc's log names errors by the source's path and line as above. Whether the entry is
//     renamed is part of the key.
//
// Batches: compile_batch answers cached jobs from the cache and compiles the others, those that
// agree on everything but their defines (and rename their entry) in one program, the rest
// alone (with batch_error saying why when they were asked together). A program that fails is
// split in halves, each compiled again, down to single programs: a config that does not compile
// fails alone, with its own log; when every config then compiles, the batch's first error line
// is each one's batch_error. A batch's CUBIN is written once and hard-linked (copied where that
// fails) to every config's <key[0:2]>/<key>.cubin, so the cache keeps one entry per key and a
// later job finds each config as if compiled alone. Each config's compile_ms is the program's
// wall time divided by its configs (batch_size); its log is the program's.
//
// Precompiled headers: a unit whose prelude is not empty (pre-included dtype headers, the
// source's hoisted #include <...> lines) is compiled with a PCH of that prelude, created by the
// first compile that needs it (--create-pch) and used by the next (--use-pch). nvrtc loads a
// PCH only into the library instance that created it (its PCH heap), so PCHs are per process:
// created in a directory of their own ($TMPDIR/ktune-pch.<pid>.XXXXXX, removed right after;
// one left by a process killed meanwhile is removed by the next compiler that finds its pid
// gone) and kept as an open descriptor of the unlinked file (--use-pch=/proc/self/fd/<n>), so
// nothing stays on disk however the process ends.
// A PCH's key covers the nvrtc version, the unit's options, the prelude, and the path, size
// and modification time of every header the prelude reaches (k_nvrtc_pch_version). A PCH that
// cannot be created or used is never tried again for its key; the compile goes on without it
// (a PCH never changes the CUBIN, only the time to parse the headers).
//
// Artifacts: <cache_dir>/<key[0:2]>/<key>.cubin, written to a unique temp file in that directory
// and renamed or linked into place (concurrent compiles of one key all succeed; readers never
// see a partial file; a failed compile leaves nothing). The key covers the source hash (or the
// source's content when the job has none), language, dtype, defines (sorted), extra flags, the
// fixed options, the toolkit include dirs, the entry and whether it is renamed, the nvrtc
// version, the arch and k_nvrtc_cache_version. A cached file that is not a valid CUBIN with
// the job's entry symbol is compiled again.
//
// Resources: registers and stack frame per kernel are read from the CUBIN (cuda/cubin.hpp) on
// every compile and cache hit; spill stores and loads and static shared memory come from ptxas's
// verbose report in the nvrtc log, so they are known only when this call compiled. A config's
// kernels are its entry's function and the __global__ functions of its namespace (all of the
// CUBIN's when its entry is not renamed); the outcome's registers, spills and shared_bytes are
// the largest over them.
//
// Thread safety: compile(), compile_batch() and cache_key() may be called concurrently on one
// instance.
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
inline constexpr int k_nvrtc_cache_version = 2;
// Bumped whenever what goes into a precompiled header or its key changes.
inline constexpr int k_nvrtc_pch_version = 1;

// <cache_dir>/<key[0:2]>/<key>.cubin
[[nodiscard]] std::string cuda_artifact_path(const std::string& cache_dir, const std::string& key);

// The C type a CUDA kernel gets as KTUNE_DTYPE: f32 float, f64 double, f16 __half, bf16
// __nv_bfloat16, i32 int, i64 long long. Errors: bad_dtype naming the dtype.
[[nodiscard]] Result<std::string> cuda_dtype_c_type(std::string_view dtype);

// The toolkit header that declares a dtype's C type, pre-included by nvrtc: f16 cuda_fp16.h,
// bf16 cuda_bf16.h; "" for the others.
[[nodiscard]] std::string cuda_dtype_header(std::string_view dtype);

// Whether `arch` names a real architecture the way --gpu-architecture takes it: "sm_" followed by
// digits and an optional 'a' or 'f' suffix ("sm_90", "sm_90a", "sm_100f").
[[nodiscard]] bool is_cuda_arch(std::string_view arch);

// compile() with the resources of the config's kernels (empty unless the outcome is ok).
struct NvrtcCompileResult {
  CompileOutcome outcome;
  std::vector<cuda::KernelResources> kernels;

  // CompileOutcome::to_json() plus "kernels": [KernelResources::to_json(), ...].
  [[nodiscard]] nlohmann::json to_json() const;
};

class PchCache;

class NvrtcCompiler final : public Compiler {
public:
  // Errors: no_device when libnvrtc cannot be loaded (the message names what was tried).
  [[nodiscard]] static Result<std::unique_ptr<NvrtcCompiler>> create();
  ~NvrtcCompiler() override;
  NvrtcCompiler(const NvrtcCompiler&) = delete;
  NvrtcCompiler& operator=(const NvrtcCompiler&) = delete;

  [[nodiscard]] std::string cache_key(const CompileJob& job) const override;
  // compile_batch of `job` alone.
  // compile_error outcomes: a job that is not language "cuda", a missing or unsupported arch, an
  // unknown dtype, a define that is not an identifier, an unreadable source, nvrtc rejecting an
  // option or the source (the log is nvrtc's). A cache directory that cannot be written is the
  // host's failure: compile_error with `infra` saying why.
  [[nodiscard]] CompileOutcome compile(const CompileJob& job) override;
  [[nodiscard]] NvrtcCompileResult compile_with_resources(const CompileJob& job);
  // One result per job, in job order.
  [[nodiscard]] std::vector<NvrtcCompileResult> compile_batch(const std::vector<CompileJob>& jobs);

  // "13.0"
  [[nodiscard]] const std::string& version() const { return m_version; }
  // The options nvrtc gets for `job` compiled alone (its defines on the command line), in
  // order; exposed for tools, benchmarks and tests.
  [[nodiscard]] Result<std::vector<std::string>> options(const CompileJob& job) const;
  // Precompiled headers this compiler created and used since it was made.
  struct PchCounts {
    std::size_t created = 0;
    std::size_t used = 0;
    std::size_t failed = 0;
  };
  [[nodiscard]] PchCounts pch_counts() const;

private:
  explicit NvrtcCompiler(const cuda::NvrtcApi* api);
  // `job`'s options; with `with_defines` false, without its config defines (a unit's).
  [[nodiscard]] Result<std::vector<std::string>> options_of(const CompileJob& job,
                                                            bool with_defines) const;
  // The key of `job`'s artifact; `renamed`: its entry is renamed in it.
  [[nodiscard]] std::string key_of(const CompileJob& job, bool renamed) const;

  const cuda::NvrtcApi* m_api;
  std::string m_version;
  std::vector<int> m_archs; // supported by this nvrtc
  std::vector<std::string> m_toolkit_includes;
  std::unique_ptr<PchCache> m_pch;
};

} // namespace ktune
