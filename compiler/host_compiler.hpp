#pragma once
// HostCompiler: the system C++ compiler (c++, or $KTUNE_CXX) building a shared object:
//   <cxx> -std=c++17 -O3 -march=native -shared -fPIC <layout flags, x86-64: host_layout_flags>
//         -I<include_dirs> -DKTUNE_DTYPE=<c type>
//         -DKTUNE_DTYPE_<DTYPE>=1 -DNAME=value... -D<entry>=<entry>_k<key> <extra_flags>
//         -o <tmp> <source>
// less the fixed flags named in removed_flags (-std=c++17, -O3, -march=native; others are a
// compile_error), without the KTUNE_DTYPE defines when the job's dtype is empty, and with
// <tmp>.cpp (#include "<source>" then the job's shim) in place of <source> when it has a shim.
// into <cache_dir>/<key[0:2]>/<key>.so. The compiler's identity (`<cxx> --version` first line)
// is part of the key, and so is the host CPU (model and ISA flags from /proc/cpuinfo), since
// -march=native artifacts do not run on every CPU that may share a cache directory.
//
// Entry renaming: a job whose configs may share a translation unit -- a cpp job with an entry,
// a batchable source (scan_source, compiler/batch_unit.hpp) that names it, nothing the hoisted
// <headers> read depending on the config -- gets the entry renamed to <entry>_k<the key's first
// 16 hex digits>, and with a shim the shim's symbol too (ktune_shim_<entry>_k<...>). The
// outcome's entry_symbol names what the artifact exports for a runner to call. The name is a
// function of the key alone: an artifact serves the same whether a batch or a single compile
// built it. Whether the entry is renamed is part of the key.
//
// Batches: compile_batch answers cached jobs from the cache and compiles the others, those that
// agree on everything but their defines (and rename their entry) in one translation unit
// (batch_unit_text), the rest alone (with batch_error saying why when they were asked
// together). A batch that fails is split in halves, each compiled again, down to single
// compiles: a config that does not compile fails alone, with its own log, and costs the others
// nothing; when every config then compiles, the batch's first error line is each one's
// batch_error. A host failure (the outcome's `infra`) is every config's of the unit. A batch
// that compiled must export every config's entry_symbol (read from the file, never loaded),
// else it counts as failed, and must run no code when loaded (static initializers,
// constructors: loading one config would run every config's), else each config is compiled
// alone. Its shared object is hard-linked (copied where that fails) to every config's
// <key[0:2]>/<key>.so, so the cache stays one artifact per key and a later job finds each
// config as if compiled alone. Each config's compile_ms is the batch's wall time divided by its
// configs (batch_size).
//
// The compiler runs through posix_spawnp (no shell); its stdout and stderr become the outcome's
// log (a batch's, shared by its configs). The artifact is written to a unique temp file in the
// cache and linked into place, so concurrent compiles of one key (threads or processes) all
// succeed and readers never see a partial file. A failed compile leaves no file behind.
//
// Thread safety: compile(), compile_batch() and cache_key() may be called concurrently on one
// instance.
#include "compiler/batch_unit.hpp"
#include "compiler/compiler.hpp"

#include <vector>

namespace ktune {

// Bumped whenever the inputs or the layout of the compile cache change.
inline constexpr int k_cache_version = 2;

// <cache_dir>/<key[0:2]>/<key>.so
[[nodiscard]] std::string host_artifact_path(const std::string& cache_dir, const std::string& key);

// The host compiler's command: $KTUNE_CXX when set and not empty, else "c++".
[[nodiscard]] std::string host_cxx();

// The compiler command for `job`: `cxx`, the fixed flags less job.removed_flags, -I, the dtype
// and config defines, -D<from>=<to> for each of `renames`, the spec's flags, -o `output`,
// `input` (the source, a unit that includes the source and then the shim, or a batch unit).
[[nodiscard]] std::vector<std::string> host_compile_argv(const CompileJob& job,
                                                         const std::string& cxx,
                                                         const std::string& output,
                                                         const std::string& input,
                                                         const Renames& renames = {});

class HostCompiler final : public Compiler {
public:
  explicit HostCompiler(std::string cxx = {}); // empty: $KTUNE_CXX, else "c++"
  [[nodiscard]] std::string cache_key(const CompileJob& job) const override;
  // compile_batch of `job` alone.
  [[nodiscard]] CompileOutcome compile(const CompileJob& job) override;
  // One outcome per job, in job order.
  [[nodiscard]] std::vector<CompileOutcome> compile_batch(const std::vector<CompileJob>& jobs);
  // The command compile() runs for `job` writing `output` from `input` (entry renaming
  // included), for a person to run by hand.
  [[nodiscard]] std::vector<std::string> command(const CompileJob& job, const std::string& output,
                                                 const std::string& input) const;
  [[nodiscard]] const std::string& version() const { return m_version; }

private:
  // The key of `job`'s artifact; `renamed`: its entry is renamed in it.
  [[nodiscard]] std::string key_of(const CompileJob& job, bool renamed) const;

  std::string m_cxx;
  std::string m_version;
  std::string m_host_cpu;   // model name + ISA flags, the target of -march=native
};

// The host compiler's `--version` first line ("c++ (Debian 12.2.0-14) 12.2.0"); empty if it
// cannot be run or fails. Spawns a child and waits for it; when a process-wide SIGCHLD handler
// reaped the child first, the line read from its output still counts.
[[nodiscard]] std::string host_compiler_version(const std::string& cxx);

// The code layout flags every host compile gets on x86-64, where `cxx` accepts them (asked once
// per compiler, with an empty unit): -Wa,-mbranches-within-32B-boundaries -falign-functions=64
// -falign-loops=32. Without them a kernel's time depends on where its code lands: the 512^3
// SGEMM config BM=64,BN=128,BK=16,UNROLL=1 ran 7.66 ms built alone and 10.12 ms as the third
// function of a batch; with them 7.50 / 7.52 (docs/ARCHITECTURE.md § Batched compiles).
// Removable per family ([kernel].flags_remove); empty elsewhere.
[[nodiscard]] const std::vector<std::string>& host_layout_flags(const std::string& cxx);

} // namespace ktune
