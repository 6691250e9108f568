#include "daemon/log.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace ktune::log {

namespace {

std::atomic<Level> g_level{Level::info};

// Rotation (rotate_stderr_file); the mutex keeps a write and the rotation it triggers together.
struct Rotation {
  std::mutex mutex;
  bool on = false;
  std::string path;
  std::uint64_t max_bytes = 0;
  int keep = 0;
  std::uint64_t size = 0;
};
Rotation g_rotation;

void write_stderr(std::string_view text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; // stderr gone: nothing sensible to do about it
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Called with the mutex held, once the file has passed its cap.
void rotate_locked(Rotation& r) {
  const std::string& path = r.path;
  if (r.keep > 0) {
    for (int i = r.keep - 1; i >= 1; --i) {
      ::rename((path + "." + std::to_string(i)).c_str(), (path + "." + std::to_string(i + 1)).c_str());
    }
    ::rename(path.c_str(), (path + ".1").c_str());
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return; // keep writing to the renamed file rather than lose the log
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  } else if (::ftruncate(STDERR_FILENO, 0) != 0) {
    return;
  }
  r.size = 0;
}

std::string utc_timestamp() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t seconds = system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return text;
}

} // namespace

std::string_view to_string(Level level) {
  switch (level) {
  case Level::debug: return "debug";
  case Level::info: return "info";
  case Level::warn: return "warn";
  case Level::error: return "error";
  }
  return "?";
}

std::optional<Level> parse_level(std::string_view text) {
  for (Level l : {Level::debug, Level::info, Level::warn, Level::error}) {
    if (to_string(l) == text) return l;
  }
  return std::nullopt;
}

void set_level(Level level) { g_level.store(level, std::memory_order_relaxed); }
Level level() { return g_level.load(std::memory_order_relaxed); }

Record::~Record() {
  std::string line = utc_timestamp();
  line += ' ';
  line += to_string(m_level);
  line.append(6 - to_string(m_level).size(), ' ');
  line += m_text.str();
  line += '\n';
  write_raw(line);
}

void write_raw(std::string_view text) {
  Rotation& r = g_rotation;
  std::unique_lock lock(r.mutex);
  if (!r.on) {
    lock.unlock();
    write_stderr(text);
    return;
  }
  write_stderr(text);
  r.size += text.size();
  if (r.size > r.max_bytes) rotate_locked(r);
}

std::optional<std::string> rotate_stderr_file(std::uint64_t max_bytes, int keep) {
  struct stat st {};
  if (max_bytes == 0 || ::fstat(STDERR_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  char target[4096];
  const ssize_t n = ::readlink("/proc/self/fd/2", target, sizeof target - 1);
  if (n <= 0 || target[0] != '/') return std::nullopt;
  Rotation& r = g_rotation;
  std::lock_guard lock(r.mutex);
  r.path.assign(target, static_cast<std::size_t>(n));
  r.max_bytes = max_bytes;
  r.keep = keep;
  r.size = static_cast<std::uint64_t>(st.st_size);
  r.on = true;
  if (r.size > r.max_bytes) rotate_locked(r);
  return r.path;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](unsigned char byte) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", byte);
    out += hex;
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\t' || (byte >= 0x20 && byte < 0x7f)) {
      out += static_cast<char>(byte);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence of 2 to 4 bytes (no overlong form, no surrogate, no C1
    // control) is kept; anything else is escaped byte by byte.
    std::size_t length = byte >= 0xc2 && byte <= 0xdf ? 2 : byte >= 0xe0 && byte <= 0xef ? 3
                         : byte >= 0xf0 && byte <= 0xf4                                   ? 4
                                                                                          : 0;
    bool valid = length > 0 && i + length <= text.size();
    std::uint32_t code = valid ? byte & (0x7f >> length) : 0;
    for (std::size_t k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      code = (code << 6) | (next & 0x3f);
    }
    valid = valid && !(length == 3 && code < 0x800) && !(length == 4 && (code < 0x10000 || code > 0x10ffff)) &&
            !(code >= 0xd800 && code <= 0xdfff) && !(code >= 0x80 && code <= 0x9f);
    if (!valid) {
      escape(byte);
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

} // namespace ktune::log
