#pragma once
// CompileJob and CompileOutcome: what the daemon sends a compile worker and what comes back. A
// CompileJob is self-contained (it travels as JSON); the daemon builds it, a compile worker runs
// it through a Compiler (compiler/compiler.hpp).
#include "core/result.hpp"
#include "core/shape.hpp"
#include "core/status.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ktune {

struct CompileJob {
  std::string kernel;              // family name, for messages
  std::string language;            // "cpp" | "cuda"
  std::string source_path;         // absolute path of the source file
  std::vector<std::string> include_dirs;
  NamedValues defines;             // -DNAME=value, the config
  std::string dtype;               // passed as -DKTUNE_DTYPE=<c type> and -DKTUNE_DTYPE_<dtype>
  std::vector<std::string> extra_flags;
  std::vector<std::string> removed_flags; // host: fixed flags left out ([kernel].flags_remove)
  // Host: code compiled after the source in the same translation unit (the typed entry's shim,
  // jobs/typed_entry.hpp); empty = the source alone. Empty dtype: no KTUNE_DTYPE is defined.
  std::string shim;
  // Host: the family's entry function ([kernel].entry; a reference job's: [check].function). A
  // batchable source's artifact exports it renamed after its cache key (HostCompiler, the
  // outcome's entry_symbol); empty = nothing is renamed.
  std::string entry;
  std::string source_hash;         // of source + spec + included headers
  std::string cache_dir;           // content-addressed artifact store
  std::string arch;                // CUDA only: "sm_90"

  // {"kernel":..,"language":..,"source_path":..,"include_dirs":[..],"defines":{"BM":64,..},
  //  "dtype":..,"extra_flags":[..],"removed_flags":[..],"shim":..,"entry":..,"source_hash":..,
  //  "cache_dir":..,"arch":..}
  // Required: kernel, language, source_path, dtype, cache_dir; the rest default to empty.
  // "defines" is an object, so from_json returns the defines in name order (neither the
  // compiler nor the cache key depends on their order). Errors: "bad_request" naming the field.
  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static Result<CompileJob> from_json(const nlohmann::json& j);
};

struct CompileOutcome {
  CandidateStatus status = CandidateStatus::ok;   // ok | compile_error
  std::string artifact_path;       // set when ok
  std::string cache_key;
  bool cached = false;             // true when the artifact was already in the cache
  double compile_ms = 0;
  std::string log;                 // the compiler's output (truncated to its first 8 KiB)
  // The entry's resources where the compiler reports them (CUDA: registers from the CUBIN,
  // spill bytes and static shared memory from ptxas), -1 when unknown.
  int registers = -1;
  int spills = -1;                 // spill store + load bytes
  int shared_bytes = -1;
  // Why the compile failed when the host is to blame rather than the candidate (the cache cannot
  // be written: disk full, read-only, permissions; the compiler killed from outside); empty for
  // the candidate's own failures. The daemon retries such a candidate and never records it.
  std::string infra;
  // The symbol the artifact exports for the job's entry (what a runner looks up: the shim's,
  // when the job has one), renamed after the cache key; empty = the entry under its own name.
  std::string entry_symbol;
  // Configs built by the one compiler run that built this artifact (1: alone, n: a batch of n);
  // 0 when no compiler ran for it (cached, or refused before). Its compile_ms is that run's
  // wall time divided by batch_size.
  int batch_size = 0;
  // Set on the outcomes of a compile_batch whose configs had to be compiled alone because of
  // their source: it cannot share a translation unit (why), or a batch of them failed though
  // each compiled without the others (the batch's first error line). Empty otherwise, also when
  // a config's own compile error explains why a batch failed.
  std::string batch_error;
  // Why the artifact the cache held for this key was not used (it failed its check against the
  // content hash recorded with the key: truncated, replaced, unreadable; jobs/artifact_cache.hpp),
  // so it was compiled again and replaced. Empty for a plain miss or a hit.
  std::string repaired;

  // {"status":"ok","artifact_path":..,"cache_key":..,"cached":false,"compile_ms":..,"log":..,
  //  "registers":-1,"spills":-1,"shared_bytes":-1,"infra":"","entry_symbol":"","batch_size":1,
  //  "batch_error":"","repaired":""} (the last eight optional; an absent batch_size is 1)
  // Required: status (a candidate status name), and artifact_path when status is ok.
  // Errors: "bad_request" naming the field.
  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] static Result<CompileOutcome> from_json(const nlohmann::json& j);
};

} // namespace ktune
