#pragma once
// ktuned's log: one line per record on stderr, "2026-11-22T02:49:27.123Z info  message".
//
//   KTUNE_LOG(info) << "listening on " << path;
//
// The level is checked before anything after the macro is evaluated, so a disabled record costs
// one comparison. Records are written with a single write(2), so lines from the daemon and its
// workers (which share stderr) do not interleave mid-line. Set the level once at startup;
// logging itself may be used from any thread.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <sstream>
#include <string_view>

namespace ktune::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

[[nodiscard]] std::string_view to_string(Level level);
[[nodiscard]] std::optional<Level> parse_level(std::string_view text); // debug|info|warn|error

void set_level(Level level);
[[nodiscard]] Level level();
[[nodiscard]] inline bool enabled(Level l) { return static_cast<int>(l) >= static_cast<int>(level()); }

// Writes `text` to the log as it is, counted for rotation like records.
void write_raw(std::string_view text);

// `text` safe to put in one record: valid UTF-8 and tabs kept, every other control byte
// (newlines included), DEL, C1 controls and bytes that are not UTF-8 written as \xNN.
[[nodiscard]] std::string printable(std::string_view text);

// Size-based rotation of a log that is a regular file on stderr (how `ktune daemon start` runs
// ktuned): once `max_bytes` have been written past the file's size, it is renamed <path>.1
// (<path>.1 to .2, ... keeping `keep` old files; 0 keeps none) and a fresh <path> takes fd 2.
// Returns the log's path, or nothing when stderr is not a regular file (a terminal, a pipe, the
// systemd journal: those keep their own bounds) or max_bytes is 0.
std::optional<std::string> rotate_stderr_file(std::uint64_t max_bytes, int keep);

// Accumulates one record and writes it when destroyed.
class Record {
public:
  explicit Record(Level level) : m_level(level) {}
  ~Record();
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;

  template <class T>
  Record& operator<<(const T& value) {
    m_text << value;
    return *this;
  }

private:
  Level m_level;
  std::ostringstream m_text;
};

// Lets KTUNE_LOG be one expression (safe in an unbraced if/else): `<<` binds tighter than `&`.
struct Voidify {
  void operator&(const Record&) const {}
};

// Milliseconds elapsed since `start`, for "took N ms" records of slow steps.
[[nodiscard]] double elapsed_ms(std::chrono::steady_clock::time_point start);

} // namespace ktune::log

#define KTUNE_LOG(lvl)                                                 \
  !::ktune::log::enabled(::ktune::log::Level::lvl)                     \
      ? (void)0                                                        \
      : ::ktune::log::Voidify() & ::ktune::log::Record(::ktune::log::Level::lvl)
