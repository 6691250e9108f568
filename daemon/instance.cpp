#include "daemon/instance.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string_view>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ktune::daemon {

namespace {

Error io_error(const std::string& what, const std::string& path, int err) {
  return make_error("io_error", what + " " + path + ": " + std::strerror(err));
}

std::string read_small(int fd) {
  char buf[64] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Takes the exclusive flock on `lock_file` without waiting and writes this process's pid into
// it. On EWOULDBLOCK the holder's pid (read from the file) goes into `holder`.
Result<UniqueFd> lock_exclusive(const std::string& lock_file, std::string& holder) {
  UniqueFd fd(::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return io_error("cannot open lock file", lock_file, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      holder = trim(read_small(fd.get()));
      if (holder.empty()) holder = "unknown";
      return make_error(k_already_running, holder);
    }
    return io_error("cannot lock", lock_file, errno);
  }
  const std::string pid_line = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 || !write_all(fd.get(), pid_line)) {
    return io_error("cannot write pid into", lock_file, errno);
  }
  return fd;
}

} // namespace

bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

Result<InstanceLock> InstanceLock::acquire(const std::string& lock_file, const std::string& pid_file) {
  std::string holder;
  auto fd = lock_exclusive(lock_file, holder);
  if (!fd) {
    if (fd.error().code != k_already_running) return fd.error();
    return make_error(k_already_running, "ktuned already running (pid " + holder + ")");
  }
  const std::string pid_line = std::to_string(::getpid()) + "\n";

  // The pid file is written whole under a temporary name, so readers never see it half-written.
  const std::string tmp = pid_file + ".tmp";
  UniqueFd pid_fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!pid_fd.valid()) return io_error("cannot create pid file", tmp, errno);
  if (!write_all(pid_fd.get(), pid_line)) return io_error("cannot write pid file", tmp, errno);
  pid_fd.reset();
  if (::rename(tmp.c_str(), pid_file.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot rename pid file to", pid_file, err);
  }
  return InstanceLock(std::move(*fd), pid_file);
}

Result<InstanceLock> InstanceLock::acquire_database(const std::string& db_path) {
  std::string holder;
  auto fd = lock_exclusive(db_path + ".lock", holder);
  if (!fd) {
    if (fd.error().code != k_already_running) return fd.error();
    return make_error(k_database_in_use,
                      "database " + db_path + " is in use by another ktuned (pid " + holder +
                          "); one daemon per database: stop that one or give this one its own --db");
  }
  return InstanceLock(std::move(*fd), {});
}

InstanceLock::~InstanceLock() {
  if (!m_fd.valid()) return; // moved from
  if (!m_pid_file.empty()) ::unlink(m_pid_file.c_str());
  // The lock itself is released when m_fd closes.
}

Result<void> ensure_private_dir(const std::string& dir) {
  if (dir.empty()) return make_error("io_error", "empty directory path");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return make_error("io_error", "not a directory: " + dir);
  }
  const auto slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto r = ensure_private_dir(dir.substr(0, slash)); !r) return r;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return io_error("cannot create directory", dir, errno);
  }
  return {};
}

} // namespace ktune::daemon

