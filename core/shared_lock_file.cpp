#include "core/shared_lock_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ktune {

namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

Error refused(const std::string& path, const std::string& why) {
  return make_error(ErrorCode::lock_unavailable, "lock file " + path + " " + why);
}

// Why an existing file cannot be opened, with what lstat says of it.
Error cannot_open(const std::string& path, int error) {
  std::string why = std::string("cannot be opened: ") + std::strerror(error);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    why += " (owner uid " + std::to_string(st.st_uid) + ", mode " + octal_mode(st.st_mode) + ")";
    if (error == EACCES || error == EPERM) {
      why += ": made by a ktuned of another user before lock files were shared (mode " +
             octal_mode(k_shared_lock_mode) + "); remove it so that every user's ktuned can take it";
    }
  }
  return refused(path, why);
}

Result<UniqueFd> checked(const std::string& path, UniqueFd fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return refused(path, std::string("cannot be read: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return refused(path, "is not a regular file: refused");
  return fd;
}

} // namespace

Result<UniqueFd> open_shared_lock_file(const std::string& path) {
  constexpr int k_flags = O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  // A few rounds: another ktuned may create the file between our open and our O_EXCL create,
  // and a file another user created a moment ago may not have its shared mode yet.
  constexpr int k_rounds = 6;
  for (int round = 0; round < k_rounds; ++round) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | k_flags));
    if (!fd.valid() && (errno == EACCES || errno == EPERM)) {
      fd.reset(::open(path.c_str(), O_RDONLY | k_flags));
      if (!fd.valid() && (errno == EACCES || errno == EPERM)) {
        // Another user's ktuned may have just created it, its fchmod to the shared mode not
        // yet done: ask again shortly before calling the file unusable.
        if (round + 1 < k_rounds) {
          ::usleep(2000);
          continue;
        }
        return cannot_open(path, errno);
      }
    }
    if (fd.valid()) return checked(path, std::move(fd));
    if (errno == ELOOP) {
      return refused(path, "is a symbolic link: refused (lock files are never followed)");
    }
    if (errno != ENOENT) return cannot_open(path, errno);
    fd.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | k_flags, k_shared_lock_mode));
    if (fd.valid()) {
      // The umask took bits away: give them back, so that other users open it read-write.
      if (::fchmod(fd.get(), k_shared_lock_mode) != 0) {
        return refused(path, std::string("was created, but cannot be made mode ") +
                                 octal_mode(k_shared_lock_mode) + ": " + std::strerror(errno));
      }
      return checked(path, std::move(fd));
    }
    if (errno != EEXIST) {
      return refused(path, std::string("cannot be created: ") + std::strerror(errno));
    }
  }
  return refused(path, "keeps appearing and disappearing: refused");
}

} // namespace ktune
