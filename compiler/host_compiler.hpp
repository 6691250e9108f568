#pragma once
// HostCompiler: the system C++ compiler (c++, or $KTUNE_CXX) building a shared object:
//   <cxx> -std=c++17 -O3 -march=native -shared -fPIC -I<include_dirs> -DKTUNE_DTYPE=<c type>
//         -DKTUNE_DTYPE_<DTYPE>=1 -DNAME=value... <extra_flags> -o <tmp> <source>
// less the fixed flags named in removed_flags (-std=c++17, -O3, -march=native; others are a
// compile_error), without the KTUNE_DTYPE defines when the job's dtype is empty, and with
// <tmp>.cpp (#include "<source>" then the job's shim) in place of <source> when it has a shim.
// into <cache_dir>/<key[0:2]>/<key>.so. The compiler's identity (`<cxx> --version` first line)
// is part of the key, and so is the host CPU (model and ISA flags from /proc/cpuinfo), since
// -march=native artifacts do not run on every CPU that may share a cache directory.
//
// The compiler runs through posix_spawnp (no shell); its stdout and stderr become the outcome's
// log. The artifact is written to a unique temp file in the final directory and renamed into
// place, so concurrent compiles of one key (threads or processes) all succeed and readers never
// see a partial file. A failed compile leaves no file behind.
//
// Thread safety: compile() and cache_key() may be called concurrently on one instance.
#include "compiler/compiler.hpp"

namespace ktune {

// Bumped whenever the inputs or the layout of the compile cache change.
inline constexpr int k_cache_version = 1;

// <cache_dir>/<key[0:2]>/<key>.so
[[nodiscard]] std::string host_artifact_path(const std::string& cache_dir, const std::string& key);

// The host compiler's command: $KTUNE_CXX when set and not empty, else "c++".
[[nodiscard]] std::string host_cxx();

// The compiler command HostCompiler::compile runs for `job`: `cxx`, the fixed flags less
// job.removed_flags, -I, the dtype and config defines, the spec's flags, -o `output`, `input`
// (the source, or with a shim the unit that includes the source and then the shim).
[[nodiscard]] std::vector<std::string> host_compile_argv(const CompileJob& job,
                                                         const std::string& cxx,
                                                         const std::string& output,
                                                         const std::string& input);

class HostCompiler final : public Compiler {
public:
  explicit HostCompiler(std::string cxx = {}); // empty: $KTUNE_CXX, else "c++"
  [[nodiscard]] std::string cache_key(const CompileJob& job) const override;
  [[nodiscard]] CompileOutcome compile(const CompileJob& job) override;
  [[nodiscard]] const std::string& version() const { return m_version; }

private:
  std::string m_cxx;
  std::string m_version;
  std::string m_host_cpu;   // model name + ISA flags, the target of -march=native
};

// The host compiler's `--version` first line ("c++ (Debian 12.2.0-14) 12.2.0"); empty if it
// cannot be run or fails. Spawns a child and waits for it; when a process-wide SIGCHLD handler
// reaped the child first, the line read from its output still counts.
[[nodiscard]] std::string host_compiler_version(const std::string& cxx);

} // namespace ktune
