#pragma once
// KernelRegistry: the kernel families found in the configured kernel directories.
// Each family is <dir>/<name>/kernel.toml plus its source. Loading reads the files, parses the
// spec and computes the source hash over the source, the spec text and every header the source
// includes with #include "..." (resolved next to the including file, then in the family's
// directory, recursively, each header once; a quoted include found in neither place is left to
// the compiler's search path and not hashed).
//
// A family is keyed by (name, language): kernels_src/gemm (cpp) and kernels_src/cuda/gemm (cuda)
// are two families. A kernel directory holds families (<dir>/<name>/kernel.toml) and groups of
// families one level down (<dir>/<group>/<name>/kernel.toml, for a <group> without kernel.toml).
// Directories are searched in the order given, each one's own families before its groups'; when
// two places hold a family of one name and language, the first wins and the second is listed as
// broken (a duplicate). Not thread-safe: find() updates the registry's view of the family it
// re-reads.
#include "jobs/compile_job.hpp"
#include "jobs/dtype.hpp"
#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/result.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <string>
#include <vector>

namespace ktune {

// What a file was when a family was loaded from it: its identity, size and modification time.
// A family whose every input still has its stamp is not read again (KernelRegistry::find).
struct FileStamp {
  std::string path;
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0;
  bool exists = false;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};
[[nodiscard]] FileStamp stamp_of(const std::string& path);
// Whether every file still has the stamp it had (a few stat calls; reads nothing).
[[nodiscard]] bool unchanged(const std::vector<FileStamp>& inputs);

struct LoadedKernel {
  KernelSpec spec;
  std::string dir;           // absolute directory of the family
  std::string spec_path;     // absolute path of kernel.toml
  std::string source_path;   // absolute path of the source
  std::string source_hash;   // also covers the reference source, when there is one
  // [check] reference = "function": the reference's source (absolute) and its declaration.
  std::string reference_path;
  std::optional<Signature> reference_signature;
  // Every file and directory loading it read or looked in: kernel.toml, the sources, the
  // headers, the directories include lookups searched.
  std::vector<FileStamp> inputs;
  // Where the family may read files (its kernel directory, or its own when loaded alone) and
  // every file it was loaded from, absolute: the spec, the source, the headers the hash covers,
  // the reference source and data files (jobs/source_archive.hpp keeps copies of them).
  std::string root;
  std::vector<std::string> files;
};

struct BrokenKernel {
  std::string spec_path;
  Error error;               // spec_error or spec_too_large, naming file, key and expression
  std::vector<FileStamp> inputs;  // kernel.toml and its directory, as they were
};

class KernelRegistry {
public:
  // A longer name is no family (a directory name has at most 255 bytes anyway): refused before
  // any file is looked for, and quoted clipped.
  static constexpr std::size_t k_max_family_name = 128;

  // Scans every directory (non-existent ones are skipped). Families whose spec fails to load
  // are kept as BrokenKernel so that a request for them answers with the reason.
  void load(const std::vector<std::string>& dirs);

  // Errors: unknown_kernel (names the directories searched), spec_error or spec_too_large (the
  // broken spec's reason). Checks the family's files on every call (stat only) and reads them
  // again when one changed, so an edited kernel never serves a stale source hash; a family added
  // since load() is found too.
  // Without a language: the first family of that name in search order (a family directly in a
  // kernel directory before one in a group), whatever its language.
  [[nodiscard]] Result<LoadedKernel> find(const std::string& name);
  // The family of that name written in `language`; unknown_kernel names the language when only
  // other languages have it.
  [[nodiscard]] Result<LoadedKernel> find(const std::string& name, Language language);

  [[nodiscard]] std::vector<std::string> names() const;   // loaded and broken, sorted
  // Every loaded family as (name, language), sorted by name then language.
  [[nodiscard]] std::vector<std::pair<std::string, Language>> families() const;
  [[nodiscard]] const std::vector<BrokenKernel>& broken() const { return m_broken; }
  // The kernel directories load() was given that do not exist (or are not directories).
  [[nodiscard]] const std::vector<std::string>& missing_dirs() const { return m_missing_dirs; }
  // Why a kernel directory of load()'s gave no family, one line each: it does not exist, is not
  // a directory, or is itself a family (holds kernel.toml: its parent is the kernel directory).
  [[nodiscard]] const std::vector<std::string>& dir_problems() const { return m_dir_problems; }

  // Installs a family loaded elsewhere (load_kernel on a helper thread, with its `inputs`) for
  // `spec_path`, as find() would have: the result, or the error as a broken family. Returns
  // what find() would.
  Result<LoadedKernel> install(const std::string& name, const std::string& spec_path,
                               Result<LoadedKernel> loaded, std::vector<FileStamp> inputs);
  // The kernel directory (of load()'s) that holds `spec_path`; empty when none does.
  [[nodiscard]] std::string kernel_dir_of(const std::string& spec_path) const;

private:
  using Key = std::pair<std::string, Language>;
  // Re-reads one spec, updating m_kernels and m_broken for it.
  Result<LoadedKernel> reload(const std::string& name, const std::string& spec_path);
  Result<LoadedKernel> find_impl(const std::string& name, std::optional<Language> language);
  // The family directories of one kernel directory in search order.
  static std::vector<std::filesystem::path> family_dirs(const std::string& dir);
  // Every kernel.toml that may define `name`, in search order.
  [[nodiscard]] std::vector<std::string> spec_candidates(const std::string& name) const;

  std::vector<std::string> m_dirs;
  std::map<Key, LoadedKernel> m_kernels;
  std::vector<BrokenKernel> m_broken;
  std::vector<std::string> m_missing_dirs;
  std::vector<std::string> m_dir_problems;
};

// The language a device runs: cuda for "cuda" and "cuda:N", cpp otherwise.
[[nodiscard]] Language language_for_device(std::string_view device);

// Loads one family from its kernel.toml path. Files beyond SpecLimits (kernel.toml over
// max_spec_bytes, a source or header over max_source_bytes, all of them over max_family_bytes)
// are refused with spec_too_large from their size, before they are read. Pure apart from reading
// files: safe on any thread. Its source, reference source, expected files and
// the headers they include must lie (symbolic links resolved) inside `kernel_dir` (the kernel
// directory it was found in; so families of one directory may share sources through '..') or,
// when that is empty, inside the family's own directory. With [kernel].signature = "source" the entry's
// declaration is read from the source and checked against [[args]] (apply_signature); a
// reference function's declaration is read from [check].source and checked the same way.
// `inputs`, when given, receives the stamps of every file it read or looked in, also when it fails.
[[nodiscard]] Result<LoadedKernel> load_kernel(const std::string& spec_path,
                                               const std::string& kernel_dir = {},
                                               std::vector<FileStamp>* inputs = nullptr);

// The compile job for one config of a family: defines = the config, dtype (none for a family
// without a dtype axis), the spec's flags, include dir = the family's directory, its entry
// (which the compilers rename after the cache key where configs may share a unit) and, for a
// cpp family with a signature, the typed entry's shim. Errors: bad_dtype when the family does
// not declare it.
[[nodiscard]] Result<CompileJob> make_compile_job(const LoadedKernel& kernel, const Config& config,
                                                  const std::string& dtype,
                                                  const std::string& cache_dir);

// The compile job of a family's reference function ([check] reference = "function"): its source
// with no config defines, the same dtype and flags, its shim, and the function as the entry.
// Errors: bad_dtype as above, spec_error when the family has no reference function.
[[nodiscard]] Result<CompileJob> make_reference_compile_job(const LoadedKernel& kernel,
                                                            const std::string& dtype,
                                                            const std::string& cache_dir);

} // namespace ktune
