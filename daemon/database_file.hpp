#pragma once
// DatabaseFile: the database file under one ktuned, held for its lifetime.
//
// - One daemon per file, whatever path reaches it: an exclusive flock on the database file
//   itself, so a hard link from another home or a bind mount meets the same lock (a lock file
//   named after the path did not: two daemons wrote one file through two WALs). SQLite locks with
//   fcntl byte ranges, which Linux keeps apart from flock, and the descriptor stays open until
//   after the store is closed (closing any descriptor of the file would drop SQLite's locks).
// - History is expected where there was some: `<db>.identity`, written once the store opened,
//   says a database lived here. A database that is missing or empty (0 bytes) while the marker is
//   there is refused with what to do, never silently created anew.
// - The file stays the one opened: check() compares the path with the open descriptor (deleted,
//   or another file renamed over it); the store's writes stop with "db_gone" while it fails.
#include "core/result.hpp"
#include "core/safe_fs.hpp"
#include "core/unique_fd.hpp"

#include <string>

namespace ktune::daemon {


class DatabaseFile {
public:
  // Opens `dir`/`name` (made 0600 when new and no marker says history was there) and locks it.
  // Errors: database_in_use (another ktuned holds it: the message names its pid), database_missing
  // (missing or empty where the marker expects history: the message says how to restore it or
  // start fresh), unsafe_path (a link there), io_error.
  [[nodiscard]] static Result<DatabaseFile> open(const SafeDir& dir, const std::string& name);

  DatabaseFile(DatabaseFile&&) noexcept = default;
  DatabaseFile& operator=(DatabaseFile&&) noexcept = default;

  // Records this file's identity in `<db>.identity` (atomically). Call once the store is open.
  [[nodiscard]] Result<void> mark() const;
  // Ok while the path names the file that was opened. Errors: db_gone ("deleted", or "replaced
  // by another file", naming the path and what to do).
  [[nodiscard]] Result<void> check() const;

  // Whether the file opened has no name left (deleted, or another file renamed over it).
  [[nodiscard]] bool deleted() const;
  // Where its content was saved after it was deleted; check()'s message names it from then on.
  void set_rescued(std::string path) { m_rescued = std::move(path); }

  [[nodiscard]] const std::string& path() const { return m_path; }
  [[nodiscard]] FileId id() const { return m_id; }
  // A line for the log when the marker named another file (restored from a backup, copied in).
  [[nodiscard]] const std::string& note() const { return m_note; }

private:
  DatabaseFile() = default;

  UniqueFd m_fd;           // flock'd; also what check() compares the path with
  std::string m_path;
  FileId m_id;
  SafeDir m_dir;           // where the file and its marker live
  std::string m_marker;    // the marker's name in the directory
  std::string m_note;
  std::string m_rescued;
};

// The pid holding an flock on the file (dev, ino), read from /proc/locks; "unknown" when none.
[[nodiscard]] std::string flock_holder(const FileId& id);

} // namespace ktune::daemon
