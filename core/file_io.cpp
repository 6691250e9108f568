#include "core/file_io.hpp"

#include "core/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>

namespace ktune {

namespace {

std::string system_reason() { return std::strerror(errno); }

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

} // namespace

bool sync_fd(int fd) {
  for (;;) {
    if (::fsync(fd) == 0) return true;
    if (errno != EINTR) return false;
  }
}

bool write_all_fd(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

Result<std::string> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return make_error(ErrorCode::io_error, "cannot read " + path + ": " + system_reason());
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(ErrorCode::io_error, "cannot read " + path + ": " + system_reason());
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

AtomicFile::AtomicFile(std::string path) : m_path(std::move(path)) {
  static std::atomic<unsigned> serial{0};
  m_temp = m_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
}

AtomicFile::~AtomicFile() {
  if (m_created) ::unlink(m_temp.c_str());
}

Result<void> AtomicFile::commit() {
  const auto fail = [&](const std::string& what) {
    Error error = make_error(ErrorCode::io_error, what + ": " + system_reason());
    ::unlink(m_temp.c_str());
    m_created = false;
    return error;
  };
  UniqueFd fd(::open(m_temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (!fd.valid()) return make_error(ErrorCode::io_error, "cannot create " + m_temp + ": " + system_reason());
  m_created = true;
  if (!write_all_fd(fd.get(), m_text)) return fail("cannot write " + m_temp);
  if (!sync_fd(fd.get())) return fail("cannot flush " + m_temp);
  if (::rename(m_temp.c_str(), m_path.c_str()) != 0) return fail("cannot rename " + m_temp + " to " + m_path);
  m_created = false;
  return {};
}

Result<void> write_file_atomic(const std::string& path, std::string_view text) {
  AtomicFile file(path);
  file.write(text);
  return file.commit();
}

std::string first_line(std::string_view text, MoreLines more) {
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (blank(line)) continue;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string out(line);
    if (more == MoreLines::mark) {
      for (std::size_t at = start; at < text.size();) {
        const std::size_t next = std::min(text.find('\n', at), text.size());
        if (!blank(text.substr(at, next - at))) return out + " ...";
        at = next + 1;
      }
    }
    return out;
  }
  return {};
}

} // namespace ktune
