#pragma once
// The machine-wide lock files every user's ktuned shares (docs/operations.md § Locks shared by
// every user; docs/ARCHITECTURE.md § One measurement per device): the CPU claims of the worker
// pools (ktune-cpu<N>.claim) and the bench workers' measurement locks (ktune-measure-*.lock), in
// one `lock_dir` (/run/lock by default: root's, mode 1777, sticky).
//
// open_shared_lock_file opens such a file so that any user's ktuned can flock it:
//   - an existing file is opened without O_CREAT (fs.protected_regular forbids O_CREAT on another
//     user's file in a sticky world-writable directory), read-write, else read-only (flock needs
//     no write access: a file another ktuned made 0644 still serves);
//   - a missing one is created with O_EXCL and then fchmod'ed to 0666, whatever the umask (ktuned
//     runs under umask 077), so the next user's ktuned can open it read-write;
//   - always with O_NOFOLLOW: a symbolic link planted under the file's name is refused, never
//     followed (its target is neither opened, created nor changed); anything but a regular file
//     is refused too.
// Like UniqueFd, one of core's few pieces of I/O: the daemon and the worker open these files the
// same way.
#include "core/result.hpp"
#include "core/unique_fd.hpp"

#include <string>

namespace ktune {

// The open file (not locked yet: flock it). Errors, code "lock_unavailable", say what the path
// is and why it cannot serve: "... is a symbolic link: refused (lock files are never followed)",
// "... is not a regular file", "... cannot be opened: Permission denied (owner uid 0, mode 0600:
// made by a ktuned of another user before lock files were shared; remove it)", or why it
// cannot be created.
[[nodiscard]] Result<UniqueFd> open_shared_lock_file(const std::string& path);

// The mode a lock file is given when open_shared_lock_file creates it.
inline constexpr unsigned k_shared_lock_mode = 0666;

} // namespace ktune
