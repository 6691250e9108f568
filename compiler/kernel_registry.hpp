#pragma once
// KernelRegistry: the kernel families found in the configured kernel directories.
// Each family is <dir>/<name>/kernel.toml plus its source. Loading reads the files, parses the
// spec and computes the source hash over the source, the spec text and every header the source
// includes with #include "..." (resolved next to the including file, then in the family's
// directory, recursively, each header once; a quoted include found in neither place is left to
// the compiler's search path and not hashed).
//
// Directories are searched in the order given; when two directories hold a family of one name,
// the first wins and the second is listed as broken (a duplicate). Not thread-safe: find()
// updates the registry's view of the family it re-reads.
#include "compiler/compiler.hpp"
#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/result.hpp"

#include <map>
#include <string>
#include <vector>

namespace ktune {

struct LoadedKernel {
  KernelSpec spec;
  std::string dir;           // absolute directory of the family
  std::string spec_path;     // absolute path of kernel.toml
  std::string source_path;   // absolute path of the source
  std::string source_hash;
};

struct BrokenKernel {
  std::string spec_path;
  Error error;               // code spec_error, message naming file, key and expression
};

class KernelRegistry {
public:
  // Scans every directory (non-existent ones are skipped). Families whose spec fails to load
  // are kept as BrokenKernel so that a request for them answers with the reason.
  void load(const std::vector<std::string>& dirs);

  // Errors: unknown_kernel (names the directories searched), spec_error (the broken spec's
  // reason). Re-reads the family's files on every call (a few small files), so an edited
  // kernel never serves a stale source hash; a family added since load() is found too.
  [[nodiscard]] Result<LoadedKernel> find(const std::string& name);

  [[nodiscard]] std::vector<std::string> names() const;   // loaded and broken, sorted
  [[nodiscard]] const std::vector<BrokenKernel>& broken() const { return m_broken; }

private:
  // Re-reads one spec, updating m_kernels and m_broken for it.
  Result<LoadedKernel> reload(const std::string& name, const std::string& spec_path);

  std::vector<std::string> m_dirs;
  std::map<std::string, LoadedKernel> m_kernels;
  std::vector<BrokenKernel> m_broken;
};

// Loads one family from its kernel.toml path.
[[nodiscard]] Result<LoadedKernel> load_kernel(const std::string& spec_path);

// The compile job for one config of a family: defines = the config, dtype, the spec's flags,
// include dir = the family's directory. Errors: bad_dtype when the family does not declare it.
[[nodiscard]] Result<CompileJob> make_compile_job(const LoadedKernel& kernel, const Config& config,
                                                  const std::string& dtype,
                                                  const std::string& cache_dir);

} // namespace ktune
