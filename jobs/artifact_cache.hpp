#pragma once
// The compile cache's files, verified: one module for both compilers (HostCompiler, NvrtcCompiler)
// and the bench worker that loads what they wrote.
//
// Layout: <cache_dir>/<key[0:2]>/<key><ext> is a key's artifact (".so" from the host compiler,
// ".cubin" from nvrtc) and <key><ext>.sum its record, "xxh3-128 <32 hex> <bytes>\n": the
// artifact's content hash, written with the key. Directories are made 0700 and checked
// (core/safe_fs.hpp); no file is reached through a link.
//
// Writing (publish_artifact): the artifact is complete in a temp file of the key's directory and
// fsync'd (seal_artifact hashes it once, also for a batch published under several keys); the
// record is written (temp, fsync, rename); the artifact is hard-linked to a temp name and renamed
// over the key's name (copied where links fail), replacing whatever was there; the directory is
// fsync'd. A power loss leaves either the old state or the new one, never a half-written
// artifact that its record vouches for.
//
// Using (verify_artifact): a compile worker before it answers a cache hit, the bench worker
// before it loads an artifact. An artifact that is missing, has no record, cannot be read or
// does not match its record is no hit: the compile worker compiles it again, the bench worker
// reports an infrastructure fault (BenchOutcome::infra), which the daemon answers by compiling
// the config again -- never a candidate result, never a quarantine.
#include "core/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

inline constexpr std::string_view k_record_suffix = ".sum";

// <cache_dir>/<key[0:2]>/<key><ext>
[[nodiscard]] std::string artifact_path(const std::string& cache_dir, const std::string& key,
                                        std::string_view ext);

enum class ArtifactState { ok, missing, unrecorded, mismatch, unreadable };
[[nodiscard]] std::string_view to_string(ArtifactState state);

struct ArtifactCheck {
  ArtifactState state = ArtifactState::missing;
  std::string reason;              // for people: what was expected and found, naming the file
  [[nodiscard]] bool ok() const { return state == ArtifactState::ok; }
};

// Checks the artifact at `path` against its record. `bytes`, when given, receives the verified
// content (so that a caller that loads from memory uses exactly what was checked).
[[nodiscard]] ArtifactCheck verify_artifact(const std::string& path, std::string* bytes = nullptr);

// The record of a complete artifact in the temp file `temp_path`, which is fsync'd first.
// Errors: io_error naming the file.
[[nodiscard]] Result<std::string> seal_artifact(const std::string& temp_path);

// Publishes the sealed temp file `temp_path` (same directory as `final_path`) under
// `final_path` with `record` (from seal_artifact). The temp file stays (a batch links it to
// several keys); its owner removes it. Errors: unsafe_path, io_error naming the file.
[[nodiscard]] Result<void> publish_artifact(const std::string& temp_path, const std::string& record,
                                            const std::string& final_path);

// Writes `bytes` as the artifact at `final_path` (its directory made when missing): temp file,
// seal, publish. Errors: unsafe_path, io_error.
[[nodiscard]] Result<void> store_artifact(const std::string& final_path, std::string_view bytes);

// A new empty temp file in the directory of `final_path` (made 0700 when missing), for a
// compiler to write the artifact into. Errors: unsafe_path, io_error.
[[nodiscard]] Result<std::string> artifact_temp_file(const std::string& final_path);

// What `ktune cache verify` and `ktune cache prune` see in a cache directory.
struct CacheEntry {
  std::string path;                // the artifact (or, for an orphan record, the record)
  ArtifactCheck check;
  std::uint64_t bytes = 0;         // artifact and record
  std::int64_t mtime_s = 0;        // the artifact's (unix seconds)
};
struct CacheScan {
  std::vector<CacheEntry> entries; // artifacts and orphan records
  std::vector<std::string> temps;  // temp files left by a killed compile (older than an hour)
};
// Walks `cache_dir`'s key directories. Errors: io_error when the directory cannot be read.
[[nodiscard]] Result<CacheScan> scan_cache(const std::string& cache_dir);

} // namespace ktune
