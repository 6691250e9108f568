#pragma once
// Files in the directories ktune keeps (runtime, state, database, compile cache, log): never
// reached through a link another user planted, never made in a directory another user can write.
//
// A SafeDir is an open directory checked once, by its descriptor: opened O_DIRECTORY|O_NOFOLLOW
// (the last component is no symlink), owned by this process's effective uid, and writable by no
// group and no other user. Every file in it is opened relative to that descriptor, O_NOFOLLOW
// always and O_EXCL where the file must be new, so a directory renamed or swapped after the check
// changes nothing. Directories it makes are 0700 whatever the umask (mkdirat, then fchmod); so are
// the missing parents it makes. Parents that exist are not checked (a home reached through a
// symlink is fine); only the directory that holds our files must be ours alone.
//
// With UniqueFd and path_env_from_process, the one exception to core's "no I/O": every binary
// (ktuned, ktune-worker, ktune) creates its files through it. Thread-safe: a SafeDir is immutable
// once made, and every call works on its descriptor.
#include "core/file_io.hpp"
#include "core/result.hpp"
#include "core/unique_fd.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace ktune {


enum class DirCreate { no, yes };            // a missing directory: io_error / made 0700
enum class FileCreate { existing, new_only, either };

// Identity of a file: the device and inode it lives at.
struct FileId {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};
[[nodiscard]] std::string to_string(const FileId& id);  // "dev:ino" in hex, e.g. "803:1a2b"

class SafeDir {
public:
  SafeDir() = default;

  // Opens `path` (made with its missing parents when `create` is yes) and checks it.
  // Errors: unsafe_path (a symlink, another user's, writable by group or others: the message
  // names the directory, the owner or mode found and what to do), io_error (missing with
  // DirCreate::no, not a directory, or the system's error, naming the path).
  [[nodiscard]] static Result<SafeDir> open(const std::string& path, DirCreate create);

  // A directory shared with other users that may still hold our files (the directory of a socket
  // given by path, e.g. /tmp): opened O_NOFOLLOW, owned by us or root, and when writable by
  // others, sticky (nobody can then remove or rename our files). Files opened in it are checked
  // as in any SafeDir (no link followed, owned by us). Never made. Errors as open().
  [[nodiscard]] static Result<SafeDir> open_shared(const std::string& path);

  // A directory `name` inside this one, opened and checked the same way (made 0700 when asked).
  [[nodiscard]] Result<SafeDir> subdir(std::string_view name, DirCreate create) const;

  // Opens the file `name` in this directory with `flags` (O_RDONLY, O_WRONLY or O_RDWR, plus
  // O_APPEND / O_TRUNC), always O_NOFOLLOW|O_CLOEXEC. new_only: O_CREAT|O_EXCL (fails when it
  // exists); either: O_CREAT, and a file that was there must be a regular file owned by us;
  // existing: no O_CREAT. `mode` applies to a created file (fchmod'ed to it, whatever the umask).
  // Errors: unsafe_path (a symlink, another user's file, not a regular file), io_error.
  [[nodiscard]] Result<UniqueFd> open_file(std::string_view name, int flags, FileCreate create,
                                           mode_t mode = 0600) const;

  // Replaces `name` with `content` atomically: a new temp file (O_EXCL) in this directory,
  // written, fsync'd, renamed over `name`, then the directory fsync'd. Errors: io_error.
  [[nodiscard]] Result<void> write_atomic(std::string_view name, std::string_view content,
                                          mode_t mode = 0600) const;

  // A new empty file with a unique name starting with `prefix` (O_EXCL); its name goes to `name`.
  [[nodiscard]] Result<UniqueFd> create_temp(std::string_view prefix, std::string& name,
                                             mode_t mode = 0600) const;

  // renameat within this directory; unlinkat of a file. Errors: io_error.
  [[nodiscard]] Result<void> rename(std::string_view from, std::string_view to) const;
  [[nodiscard]] Result<void> remove(std::string_view name) const;
  // fsync of the directory (after a rename or link, so that the name survives a power loss).
  [[nodiscard]] Result<void> sync() const;

  // Whether an entry `name` exists here (a symlink counts: opening it is then refused).
  [[nodiscard]] bool contains(std::string_view name) const;

  // A second owner of the same checked directory (a dup of its descriptor). Errors: io_error.
  [[nodiscard]] Result<SafeDir> duplicate() const;

  [[nodiscard]] bool valid() const { return m_fd.valid(); }
  [[nodiscard]] int fd() const { return m_fd.get(); }
  [[nodiscard]] const std::string& path() const { return m_path; }
  // path()/name, for messages and for interfaces that take a path (SQLite, dlopen).
  [[nodiscard]] std::string file_path(std::string_view name) const;

private:
  SafeDir(UniqueFd fd, std::string path) : m_fd(std::move(fd)), m_path(std::move(path)) {}
  UniqueFd m_fd;
  std::string m_path;
};

// Checks an open directory descriptor: a directory, owned by the effective uid, not writable by
// group or others. `path` names it in the message. Errors: unsafe_path, io_error.
[[nodiscard]] Result<void> check_private_dir(int fd, const std::string& path);

// "uid 1000 (alice)", or "uid 1000" when the user has no name.
[[nodiscard]] std::string user_text(uid_t uid);

} // namespace ktune
