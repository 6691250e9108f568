#include "core/safe_fs.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace ktune {

namespace {

Error io_error(const std::string& what, const std::string& path, int err) {
  return make_error(ErrorCode::io_error, what + " " + path + ": " + std::strerror(err));
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "0%03o", static_cast<unsigned>(mode & 07777));
  return text;
}

bool plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos;
}

std::string join(const std::string& dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return dir + std::string(name);
  return dir + "/" + std::string(name);
}

// "/a/b/" -> "/a/b"; "" stays "".
std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Why `name` in `dir_fd` could not be opened without following it: a symlink (named with its
// target) or the system's error.
Error describe_refusal(int dir_fd, std::string_view name, const std::string& path, int err,
                       const char* what) {
  struct stat st {};
  const std::string leaf(name);
  if (::fstatat(dir_fd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    std::vector<char> target(4096);
    const ssize_t n = ::readlinkat(dir_fd, leaf.c_str(), target.data(), target.size() - 1);
    const std::string to = n > 0 ? std::string(target.data(), static_cast<std::size_t>(n)) : "?";
    return make_error(ErrorCode::unsafe_path, "refusing " + path + ": it is a symbolic link (to " + to +
                                         ", made by " + user_text(st.st_uid) +
                                         "); ktune never follows a link where it keeps its "
                                         "files (remove the link)");
  }
  return io_error(what, path, err);
}

// Opens directory `path`, following nothing in its last component; makes it (and its missing
// parents, 0700 each) when asked. Parents that exist are opened as they are.
Result<UniqueFd> open_dir(const std::string& path, DirCreate create) {
  if (path == "/") {
    UniqueFd fd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return io_error("cannot open directory", path, errno);
    return fd;
  }
  const auto slash = path.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) {
    if (errno != ENOENT || create == DirCreate::no) {
      return io_error("cannot open directory", parent, errno);
    }
    auto made = open_dir(parent, DirCreate::yes);
    if (!made) return made.error();
    parent_fd = std::move(*made);
  }
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(parent_fd.get(), leaf.c_str(), flags));
  bool made = false;
  if (!fd.valid() && errno == ENOENT && create == DirCreate::yes) {
    if (::mkdirat(parent_fd.get(), leaf.c_str(), 0700) == 0) {
      made = true;
    } else if (errno != EEXIST) {
      return io_error("cannot create directory", path, errno);
    }
    fd.reset(::openat(parent_fd.get(), leaf.c_str(), flags));
  }
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) return io_error("no directory", path, err);
    return describe_refusal(parent_fd.get(), leaf, path, err, "cannot open directory");
  }
  if (made) {
    // mkdir's mode passed through the umask; ours is 0700 whatever it was. Only when it is ours:
    // a directory someone else made in the race is refused by the check instead.
    struct stat st {};
    if (::fstat(fd.get(), &st) == 0 && st.st_uid == ::geteuid() && ::fchmod(fd.get(), 0700) != 0) {
      return io_error("cannot set the mode of", path, errno);
    }
  }
  return fd;
}

} // namespace

std::string to_string(const FileId& id) {
  char text[48];
  std::snprintf(text, sizeof text, "%llx:%llx", static_cast<unsigned long long>(id.dev),
                static_cast<unsigned long long>(id.ino));
  return text;
}

std::string user_text(uid_t uid) {
  std::string text = "uid " + std::to_string(uid);
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    text += std::string(" (") + found->pw_name + ")";
  }
  return text;
}

Result<void> check_private_dir(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot inspect directory", path, errno);
  if (!S_ISDIR(st.st_mode)) return make_error(ErrorCode::io_error, "not a directory: " + path);
  const uid_t self = ::geteuid();
  if (st.st_uid != self) {
    return make_error(ErrorCode::unsafe_path,
                      "refusing the directory " + path + ": it is owned by " + user_text(st.st_uid) +
                          ", not by " + user_text(self) + " who runs ktune; another user may "
                          "have made it to plant links in it (remove it, or point KTUNE_HOME, "
                          "XDG_RUNTIME_DIR or XDG_STATE_HOME elsewhere)");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return make_error(ErrorCode::unsafe_path,
                      "refusing the directory " + path + ": its mode " + octal_mode(st.st_mode) +
                          " lets other users create files in it, links among them (check what "
                          "is in it, then chmod 700 " + path + ")");
  }
  return {};
}

Result<SafeDir> SafeDir::open(const std::string& path, DirCreate create) {
  const std::string clean = without_trailing_slashes(path);
  if (clean.empty()) return make_error(ErrorCode::io_error, "empty directory path");
  auto fd = open_dir(clean, create);
  if (!fd) return fd.error();
  if (auto checked = check_private_dir(fd->get(), clean); !checked) return checked.error();
  return SafeDir(std::move(*fd), clean);
}

Result<SafeDir> SafeDir::open_shared(const std::string& path) {
  const std::string clean = without_trailing_slashes(path);
  if (clean.empty()) return make_error(ErrorCode::io_error, "empty directory path");
  auto fd = open_dir(clean, DirCreate::no);
  if (!fd) return fd.error();
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return io_error("cannot inspect directory", clean, errno);
  if (!S_ISDIR(st.st_mode)) return make_error(ErrorCode::io_error, "not a directory: " + clean);
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return make_error(ErrorCode::unsafe_path, "refusing the directory " + clean + ": it is owned by " +
                                         user_text(st.st_uid) + ", not by " +
                                         user_text(::geteuid()) + " who runs ktune, or root");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return make_error(ErrorCode::unsafe_path, "refusing the directory " + clean + ": its mode " +
                                         octal_mode(st.st_mode) + " lets other users replace "
                                         "files in it (writable by others and not sticky)");
  }
  return SafeDir(std::move(*fd), clean);
}

Result<SafeDir> SafeDir::subdir(std::string_view name, DirCreate create) const {
  const std::string path = file_path(name);
  if (!plain_name(name)) return make_error(ErrorCode::io_error, "not a plain file name: " + path);
  const std::string leaf(name);
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(m_fd.get(), leaf.c_str(), flags));
  bool made = false;
  if (!fd.valid() && errno == ENOENT && create == DirCreate::yes) {
    if (::mkdirat(m_fd.get(), leaf.c_str(), 0700) == 0) {
      made = true;
    } else if (errno != EEXIST) {
      return io_error("cannot create directory", path, errno);
    }
    fd.reset(::openat(m_fd.get(), leaf.c_str(), flags));
  }
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) return io_error("no directory", path, err);
    return describe_refusal(m_fd.get(), name, path, err, "cannot open directory");
  }
  if (made && ::fchmod(fd.get(), 0700) != 0) return io_error("cannot set the mode of", path, errno);
  if (auto checked = check_private_dir(fd.get(), path); !checked) return checked.error();
  return SafeDir(std::move(fd), path);
}

Result<UniqueFd> SafeDir::open_file(std::string_view name, int flags, FileCreate create,
                                    mode_t mode) const {
  const std::string path = file_path(name);
  if (!plain_name(name)) return make_error(ErrorCode::io_error, "not a plain file name: " + path);
  // O_NONBLOCK: a FIFO put here is refused below instead of blocking the open.
  flags |= O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  if (create == FileCreate::new_only) flags |= O_CREAT | O_EXCL;
  if (create == FileCreate::either) flags |= O_CREAT;
  const std::string leaf(name);
  UniqueFd fd(::openat(m_fd.get(), leaf.c_str(), flags, mode));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ELOOP || err == EMLINK) {
      return describe_refusal(m_fd.get(), name, path, err, "cannot open");
    }
    return io_error(create == FileCreate::new_only ? "cannot create" : "cannot open", path, err);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("cannot inspect", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::unsafe_path, "refusing " + path + ": not a regular file");
  }
  if (::fcntl(fd.get(), F_SETFL, flags & ~(O_NONBLOCK | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC |
                                           O_TRUNC | O_ACCMODE)) != 0) {
    return io_error("cannot set the flags of", path, errno);
  }
  if (st.st_uid != ::geteuid()) {
    return make_error(ErrorCode::unsafe_path, "refusing " + path + ": it is owned by " +
                                         user_text(st.st_uid) + ", not by " +
                                         user_text(::geteuid()) + " who runs ktune");
  }
  if (create != FileCreate::existing && (st.st_mode & 07777) != mode && ::fchmod(fd.get(), mode) != 0) {
    return io_error("cannot set the mode of", path, errno);
  }
  return fd;
}

Result<UniqueFd> SafeDir::create_temp(std::string_view prefix, std::string& name, mode_t mode) const {
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, ".%d.%llx.tmp", static_cast<int>(::getpid()),
                  static_cast<unsigned long long>(
                      counter.fetch_add(1) ^
                      (static_cast<std::uint64_t>(::time(nullptr)) << 20)));
    name = std::string(prefix) + suffix;
    UniqueFd fd(::openat(m_fd.get(), name.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd.valid() && errno == EEXIST) continue;
    if (!fd.valid()) return io_error("cannot create", file_path(name), errno);
    if (::fchmod(fd.get(), mode) != 0) return io_error("cannot set the mode of", file_path(name), errno);
    return fd;
  }
  return make_error(ErrorCode::io_error, "cannot make a unique temp file in " + m_path);
}

Result<void> SafeDir::write_atomic(std::string_view name, std::string_view content, mode_t mode) const {
  std::string tmp;
  auto fd = create_temp("." + std::string(name), tmp, mode);
  if (!fd) return fd.error();
  const auto discard = [&](const Error& error) -> Result<void> {
    ::unlinkat(m_fd.get(), tmp.c_str(), 0);
    return error;
  };
  if (!write_all_fd(fd->get(), content)) return discard(io_error("cannot write", file_path(tmp), errno));
  if (!sync_fd(fd->get())) return discard(io_error("cannot fsync", file_path(tmp), errno));
  fd->reset();
  if (auto renamed = rename(tmp, name); !renamed) return discard(renamed.error());
  return sync();
}

Result<void> SafeDir::rename(std::string_view from, std::string_view to) const {
  if (!plain_name(from) || !plain_name(to)) {
    return make_error(ErrorCode::io_error, "not a plain file name: " + file_path(from) + " or " + file_path(to));
  }
  if (::renameat(m_fd.get(), std::string(from).c_str(), m_fd.get(), std::string(to).c_str()) != 0) {
    return io_error("cannot rename " + file_path(from) + " to", file_path(to), errno);
  }
  return {};
}

Result<void> SafeDir::remove(std::string_view name) const {
  if (!plain_name(name)) return make_error(ErrorCode::io_error, "not a plain file name: " + file_path(name));
  if (::unlinkat(m_fd.get(), std::string(name).c_str(), 0) != 0) {
    return io_error("cannot remove", file_path(name), errno);
  }
  return {};
}

Result<void> SafeDir::sync() const {
  if (!sync_fd(m_fd.get())) return io_error("cannot fsync directory", m_path, errno);
  return {};
}

bool SafeDir::contains(std::string_view name) const {
  struct stat st {};
  return plain_name(name) &&
         ::fstatat(m_fd.get(), std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Result<SafeDir> SafeDir::duplicate() const {
  UniqueFd fd(::fcntl(m_fd.get(), F_DUPFD_CLOEXEC, 0));
  if (!fd.valid()) return io_error("cannot duplicate the descriptor of", m_path, errno);
  return SafeDir(std::move(fd), m_path);
}

std::string SafeDir::file_path(std::string_view name) const { return join(m_path, name); }

} // namespace ktune
