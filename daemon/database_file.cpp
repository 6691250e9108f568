#include "daemon/database_file.hpp"

#include "daemon/instance.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace ktune::daemon {

namespace {

FileId id_of(const struct stat& st) {
  return FileId{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

// The marker's text, "" when there is none. Errors: unsafe_path, io_error.
Result<std::string> read_marker(const SafeDir& dir, const std::string& marker) {
  if (!dir.contains(marker)) return std::string();
  auto fd = dir.open_file(marker, O_RDONLY, FileCreate::existing);
  if (!fd) return fd.error();
  char buf[256] = {};
  const ssize_t n = ::pread(fd->get(), buf, sizeof buf - 1, 0);
  if (n < 0) return make_error(ErrorCode::io_error, "cannot read " + dir.file_path(marker) + ": " + std::strerror(errno));
  std::string text(buf, static_cast<std::size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? std::string("(empty marker)") : text;
}

// Ok when `name` is absent from `dir` or a regular file of ours. Errors: unsafe_path.
Result<void> plain_or_absent(const SafeDir& dir, const std::string& name) {
  if (!dir.contains(name)) return {};
  auto fd = dir.open_file(name, O_RDONLY, FileCreate::existing);
  if (!fd) return fd.error();
  return {};
}

std::string restore_advice(const std::string& marker_path) {
  return "restore it (a copy made by `ktune db backup`, or the file moved back), or, to start "
         "with an empty database and no history, remove " + marker_path +
         " and start ktuned again";
}

} // namespace

std::string flock_holder(const FileId& id) {
  std::ifstream in("/proc/locks");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string number, kind, advisory, access, pid, where;
    fields >> number >> kind;
    if (kind != "FLOCK") continue;  // "->" marks a waiter; POSIX locks are SQLite's
    fields >> advisory >> access >> pid >> where;
    unsigned major_no = 0, minor_no = 0;
    unsigned long long ino = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%llu", &major_no, &minor_no, &ino) != 3) continue;
    if (ino == id.ino && ::makedev(major_no, minor_no) == static_cast<dev_t>(id.dev)) return pid;
  }
  return "unknown";
}

Result<DatabaseFile> DatabaseFile::open(const SafeDir& dir, const std::string& name) {
  DatabaseFile file;
  auto own_dir = dir.duplicate();
  if (!own_dir) return own_dir.error();
  file.m_dir = std::move(*own_dir);
  file.m_path = dir.file_path(name);
  file.m_marker = name + ".identity";
  const std::string marker_path = dir.file_path(file.m_marker);
  auto marker = read_marker(dir, file.m_marker);
  if (!marker) return marker.error();
  // SQLite opens its own files next to the database by name; none of them may be a link.
  for (const char* suffix : {"-wal", "-shm", "-journal", "-spill"}) {
    if (auto safe = plain_or_absent(dir, name + suffix); !safe) return safe.error();
  }

  Result<UniqueFd> fd = make_error(ErrorCode::io_error, "not opened");
  if (dir.contains(name)) {
    fd = dir.open_file(name, O_RDONLY, FileCreate::existing);
  } else {
    if (!marker->empty()) {
      const std::string rescued = name + ".rescued";
      const std::string saved =
          dir.contains(rescued) ? "ktuned saved its content in " + dir.file_path(rescued) +
                                      " when it was deleted: move that to " + file.m_path + "; or "
                                : std::string();
      return make_error(ErrorCode::database_missing,
                        "the database " + file.m_path + " is missing, but one was there before (" +
                            marker_path + " says " + *marker + "): it was deleted or moved away "
                            "and its history with it; " + saved + restore_advice(marker_path));
    }
    fd = dir.open_file(name, O_RDWR, FileCreate::new_only);
  }
  if (!fd) return fd.error();
  file.m_fd = std::move(*fd);

  std::string holder;
  if (auto locked = lock_now(file.m_fd.get(), file.m_path, holder); !locked) {
    if (locked.error().code != ErrorCode::already_running) return locked.error();
    struct stat st {};
    if (::fstat(file.m_fd.get(), &st) == 0) holder = flock_holder(id_of(st));
    return make_error(ErrorCode::database_in_use,
                      "database " + file.m_path + " is in use by another ktuned (pid " + holder +
                          "), maybe through another path to the same file (a hard link or a "
                          "bind mount); one daemon per database: stop that one or give this one "
                          "its own --db");
  }
  struct stat st {};
  if (::fstat(file.m_fd.get(), &st) != 0) {
    return make_error(ErrorCode::io_error, "cannot inspect " + file.m_path + ": " + std::strerror(errno));
  }
  file.m_id = id_of(st);
  if (st.st_size == 0 && !marker->empty()) {
    return make_error(ErrorCode::database_missing,
                      "the database " + file.m_path + " is empty (0 bytes), but a database with "
                      "history was there (" + marker_path + " says " + *marker + "): it was "
                      "truncated or replaced by an empty file; " +
                          restore_advice(marker_path));
  }
  if (!marker->empty() && *marker != "ktune database " + to_string(file.m_id)) {
    file.m_note = "the database " + file.m_path + " is another file than the one ktuned last "
                  "opened there (" + marker_path + " says " + *marker + ", the file is " +
                  to_string(file.m_id) + "): restored from a backup or copied in; using it";
  }
  return file;
}

Result<void> DatabaseFile::mark() const {
  return m_dir.write_atomic(m_marker, "ktune database " + to_string(m_id) + "\n");
}

bool DatabaseFile::deleted() const {
  struct stat opened {};
  return ::fstat(m_fd.get(), &opened) == 0 && opened.st_nlink == 0;
}

Result<void> DatabaseFile::check() const {
  if (deleted()) {
    return make_error(ErrorCode::db_gone,
                      "the database " + m_path + " was deleted while ktuned had it open; nothing "
                      "more is written into the deleted file (results go to the spill journal " +
                          m_path + "-spill, replayed at the next start): " +
                          (m_rescued.empty()
                               ? std::string("stop ktuned and restore the file")
                               : "its content was saved in " + m_rescued +
                                     "; stop ktuned and move that to " + m_path));
  }
  struct stat now {};
  if (::stat(m_path.c_str(), &now) != 0) {
    const int err = errno;
    return make_error(ErrorCode::db_gone, "the database " + m_path + " is no longer at its path (" +
                                     std::strerror(err) + ": moved or its directory removed); "
                                     "nothing more is written to it until it is back");
  }
  if (id_of(now) != m_id) {
    return make_error(ErrorCode::db_gone, "the database " + m_path + " was replaced by another file (" +
                                     to_string(id_of(now)) + ", ktuned opened " + to_string(m_id) +
                                     "); nothing more is written until the original is back: "
                                     "stop ktuned to use the new file");
  }
  return {};
}

} // namespace ktune::daemon
