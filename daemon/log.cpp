#include "daemon/log.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <string>
#include <unistd.h>

namespace ktune::log {

namespace {

std::atomic<Level> g_level{Level::info};

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
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; // stderr gone: nothing sensible to do about it
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

} // namespace ktune::log
