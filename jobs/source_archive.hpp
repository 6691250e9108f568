#pragma once
// The source archive: a copy of every kernel source ktuned tuned, kept by its source hash, so that
// an old result can be measured again after the family's files changed (an A/B of the baseline's
// build against tonight's: daemon/ab_service.hpp) -- its artifact found in the compile cache by
// the same key, or rebuilt from these files when the cache lost it.
//
//   <root>/<source hash>/manifest.json   {"kernel":..,"spec":"<relative path>","files":[..]}
//   <root>/<source hash>/files/<path relative to the family's root>
//
// An entry is written once (to a temporary directory renamed into place, so a reader never sees
// half of one) and never changed; the files keep their places relative to the family's root
// (LoadedKernel::root), so includes and '..' sources resolve as they did, and the family loaded
// from the copy hashes to the same source hash (load_archived_kernel checks it). Safe across
// processes sharing one root.
#include "core/result.hpp"
#include "jobs/kernel_registry.hpp"

#include <optional>
#include <string>

namespace ktune {

// The archive under a compile cache directory.
[[nodiscard]] std::string source_archive_dir(const std::string& cache_dir);

// Keeps a copy of `kernel`'s files under `root` unless one of its source hash is there. Returns
// true when it wrote one. Errors: io_error naming the file (a file outside the family's root,
// unreadable, the archive unwritable); nothing half-written is left.
[[nodiscard]] Result<bool> archive_kernel(const LoadedKernel& kernel, const std::string& root);

// The family as it was at `source_hash`, loaded from its copy; nullopt when the archive has none.
// Errors: spec_error (the copy no longer loads), source_changed (it loads to another hash: the
// archive was tampered with), io_error (an unreadable manifest).
[[nodiscard]] Result<std::optional<LoadedKernel>> load_archived_kernel(const std::string& root,
                                                                       const std::string& source_hash);

} // namespace ktune
