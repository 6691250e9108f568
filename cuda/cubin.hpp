#pragma once
// What a compiled kernel uses per thread and per block, read without a GPU from the two places
// that record it:
//   - the CUBIN itself (an ELF file): the EIATTR_REGCOUNT and EIATTR_FRAME_SIZE records of the
//     .nv.info section (per function symbol);
//   - ptxas's verbose report, which NvrtcCompiler requests with --ptxas-options=-v and which
//     lands in the nvrtc log: registers, stack frame, spill stores and loads, static shared memory.
// Spills and static shared memory are taken from the report only (the .nv.shared.<kernel>
// section also holds memory the toolchain reserves on sm_90 and later, so its size is not the
// kernel's), so an artifact served from the compile cache (no compile, no log) has registers and
// stack but unknown spills and shared memory. On a GPU, the runner reads registers, local and
// shared memory back with cuFuncGetAttribute.
//
// Pure functions; no toolkit or driver needed.
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace ktune::cuda {

// -1 = not known.
struct KernelResources {
  std::string name;     // the entry's symbol
  int registers = -1;   // per thread
  int stack_bytes = -1; // local memory frame per thread
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;
  int shared_bytes = -1; // static shared memory per block

  // {"name":..,"registers":..,"stack_bytes":..,"spill_store_bytes":..,"spill_load_bytes":..,
  //  "shared_bytes":..}; unknown values are null.
  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static KernelResources from_json(const nlohmann::json& j);
};

// The global function symbols of a CUBIN with their registers and stack frame, in symbol table
// order. Errors ("internal"): not a 64-bit little-endian ELF, or a
// section or symbol table that points outside the file, naming what and where.
[[nodiscard]] Result<std::vector<KernelResources>> read_cubin_kernels(std::string_view cubin);

// The entry functions ptxas reported ("Compiling entry function 'k' for 'sm_90'") with what its
// "Function properties for k" and "Used N registers ..." lines say; lines of other functions and
// anything else in the log are skipped. Empty when the log has no ptxas report.
[[nodiscard]] std::vector<KernelResources> parse_ptxas_info(std::string_view log);

// One entry per kernel of `from_cubin`; values it does not know are taken from the report entry
// of the same name.
[[nodiscard]] std::vector<KernelResources> merge_resources(std::vector<KernelResources> from_cubin,
                                                           const std::vector<KernelResources>& from_log);

} // namespace ktune::cuda
