#include "cli/top_command.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/format.hpp"
#include "cli/table.hpp"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <sstream>

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;

const json& member(const json& object, const char* key) {
  static const json null_value;
  if (!object.is_object()) return null_value;
  const auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

std::string text_of(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

double number_of(const json& v) { return v.is_number() ? v.get<double>() : 0.0; }

std::string seconds_text(double seconds) {
  char buf[32];
  if (seconds < 100) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  } else if (seconds < 6000) {
    std::snprintf(buf, sizeof buf, "%.0fm", seconds / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fh", seconds / 3600);
  }
  return buf;
}

std::string progress_text(const json& job) {
  const auto done = static_cast<std::int64_t>(number_of(member(job, "done")));
  const auto total = static_cast<std::int64_t>(number_of(member(job, "total")));
  std::string text = std::to_string(done) + "/" + std::to_string(total);
  if (total > 0) text += " " + std::to_string(done * 100 / total) + "%";
  return text;
}

// A config as NAME=value pairs in the kernel's parameter order (`params`, as ktuned sends it).
std::string config_text(const json& config, const json& params) {
  if (!config.is_object() || !params.is_array()) return format_config(config, ",");
  json ordered = json::object();
  for (const auto& name : params) {
    if (name.is_string() && config.contains(name.get<std::string>())) {
      ordered[name.get<std::string>()] = config.at(name.get<std::string>());
    }
  }
  for (const auto& [name, value] : config.items()) {
    if (!ordered.contains(name)) ordered[name] = value;
  }
  return format_config(ordered, ",");
}

std::string best_text(const json& job) {
  const json& median = member(job, "best_median_ms");
  if (!median.is_number()) return "-";
  return format_ms(median.get<double>()) + " ms  " +
         config_text(member(job, "best_config"), member(job, "params"));
}

void section(std::vector<std::string>& lines, const std::string& title, const Table& table) {
  lines.emplace_back();
  lines.push_back(title);
  std::ostringstream text;
  table.print(text);
  std::string line;
  std::istringstream in(text.str());
  while (std::getline(in, line)) lines.push_back("  " + line);
}

// Cuts `line` to `width` code points (0 = no limit).
std::string fit(const std::string& line, std::size_t width) {
  if (width == 0 || display_width(line) <= width) return line;
  std::string out;
  std::size_t points = 0;
  for (const char c : line) {
    const bool starts_point = (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (starts_point && ++points > width) break;
    out += c;
  }
  return out;
}

// The terminal as the live view needs it: no echo, no line buffering, the alternate screen, the
// cursor hidden; everything restored by the destructor (also after Ctrl-C, which ends the loop).
class LiveTerminal {
public:
  LiveTerminal() {
    if (::tcgetattr(STDIN_FILENO, &m_saved) == 0) {
      termios raw = m_saved;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      m_restore = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    write_out("\x1b[?1049h\x1b[?25l");
  }
  ~LiveTerminal() {
    write_out("\x1b[?25h\x1b[?1049l");
    if (m_restore) ::tcsetattr(STDIN_FILENO, TCSANOW, &m_saved);
  }
  LiveTerminal(const LiveTerminal&) = delete;
  LiveTerminal& operator=(const LiveTerminal&) = delete;

  static void write_out(const std::string& text) {
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = ::write(STDOUT_FILENO, text.data() + written, text.size() - written);
      if (n <= 0) return;
      written += static_cast<std::size_t>(n);
    }
  }

  // Rows and columns; 24 x 80 when the terminal does not say.
  static std::pair<std::size_t, std::size_t> size() {
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      return {ws.ws_row, ws.ws_col};
    }
    return {24, 80};
  }

private:
  termios m_saved{};
  bool m_restore = false;
};

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) { g_interrupted = 1; }

// Waits up to `timeout_ms` for a key; true when it was q or Q (or Ctrl-C arrived).
bool quit_requested(int timeout_ms) {
  pollfd in{STDIN_FILENO, POLLIN, 0};
  const int ready = ::poll(&in, 1, timeout_ms);
  if (g_interrupted) return true;
  if (ready <= 0) return false;
  char keys[64];
  const ssize_t n = ::read(STDIN_FILENO, keys, sizeof keys);
  if (n == 0) return true; // stdin closed: nobody can press q any more
  for (ssize_t i = 0; i < n; ++i) {
    if (keys[i] == 'q' || keys[i] == 'Q') return true;
  }
  return false;
}

int live(Connection& conn, const std::string& socket, const TopOptions& options, Output& io) {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  ::sigemptyset(&action.sa_mask);
  struct sigaction old_int {}, old_term {};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  std::optional<Error> failure;
  {
    LiveTerminal terminal;
    const int interval_ms = static_cast<int>(options.interval_s * 1000);
    while (!g_interrupted) {
      auto view = call(conn, {{"v", 1}, {"op", "top"}}, k_request_timeout);
      if (!view) {
        failure = view.error();
        break;
      }
      const auto [rows, columns] = LiveTerminal::size();
      auto lines = render_top(*view, columns);
      std::string frame = "\x1b[H";
      for (std::size_t i = 0; i < lines.size() && i < rows; ++i) {
        frame += fit(lines[i], columns);
        frame += "\x1b[K";
        if (i + 1 < rows && i + 1 < lines.size()) frame += "\r\n";
      }
      frame += "\x1b[J";
      LiveTerminal::write_out(frame);
      if (quit_requested(interval_ms)) break;
    }
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (failure) return report(io, *failure, socket);
  return k_exit_ok;
}

} // namespace

namespace {

// The first two lines: uptime, connections, a stalled store; throughput and the compile cache.
void add_summary(std::vector<std::string>& lines, const json& view) {
  const json& throughput = member(view, "throughput");
  const json& cache = member(view, "compile_cache");
  lines.push_back("ktune top - ktuned up " + format_duration(number_of(member(view, "uptime_s"))) +
                  ", " + text_of(member(view, "connections")) + " connection(s)" +
                  (member(member(view, "store"), "stalled") == json(true)
                       ? ", STORE STALLED (writes wait)"
                       : "") +
                  "   q quits");
  lines.push_back("throughput: " + text_of(member(throughput, "results_last_minute")) +
                  " results in the last minute, " + text_of(member(throughput, "results")) +
                  " since start; " + text_of(member(throughput, "lookups")) +
                  " lookups; compile cache " + text_of(member(cache, "hits")) + " hits, " +
                  text_of(member(cache, "misses")) + " misses");
}

void add_jobs(std::vector<std::string>& lines, const json& view) {
  Table jobs({{"JOB", Align::right}, {"STATE"}, {"PHASE"}, {"KERNEL"}, {"SHAPE"}, {"DTYPE"},
              {"DEVICE"}, {"PRIO", Align::right}, {"PROGRESS", Align::right},
              {"FAILED", Align::right}, {"TIME", Align::right}, {"BEST"}});
  for (const auto& job : member(view, "jobs")) {
    jobs.add_row({text_of(member(job, "job")), text_of(member(job, "state")),
                  text_of(member(job, "phase")), text_of(member(job, "kernel")),
                  text_of(member(job, "shape")), text_of(member(job, "dtype")),
                  text_of(member(job, "device")), text_of(member(job, "priority")),
                  progress_text(job), text_of(member(job, "failed")),
                  member(job, "state") == json("running")
                      ? seconds_text(number_of(member(job, "running_s")))
                      : "-",
                  best_text(job)});
  }
  section(lines, "JOBS (" + std::to_string(jobs.rows()) + ")", jobs);
  if (jobs.rows() == 0) lines.emplace_back("  no job queued or running");
}

void add_lanes_and_workers(std::vector<std::string>& lines, const json& view) {
  Table lanes({{"DEVICE"}, {"JOB", Align::right}, {"MEASURING"}, {"WAITING", Align::right},
               {"COMPILE", Align::right}, {"BENCH", Align::right}, {"IDLE", Align::right},
               {"RESTARTS", Align::right}});
  for (const auto& lane : member(view, "lanes")) {
    const json& seconds = member(lane, "seconds");
    lanes.add_row({text_of(member(lane, "device")), text_of(member(lane, "job")),
                   text_of(member(lane, "busy")), text_of(member(lane, "waiting")),
                   seconds_text(number_of(member(seconds, "compile"))),
                   seconds_text(number_of(member(seconds, "bench"))),
                   seconds_text(number_of(member(seconds, "idle"))),
                   text_of(member(lane, "restarts"))});
  }
  section(lines, "LANES", lanes);

  Table workers({{"LANE"}, {"#", Align::right}, {"STATE"}, {"COMPILE", Align::right},
                 {"BENCH", Align::right}, {"IDLE", Align::right}});
  for (const auto& worker : member(view, "workers")) {
    const json& seconds = member(worker, "seconds");
    const json& busy = member(worker, "busy");
    workers.add_row({text_of(member(worker, "lane")), text_of(member(worker, "worker")),
                     member(worker, "alive") != json(true) ? "exited"
                     : busy.is_string()                   ? busy.get<std::string>()
                                                          : "idle",
                     seconds_text(number_of(member(seconds, "compile"))),
                     seconds_text(number_of(member(seconds, "bench"))),
                     seconds_text(number_of(member(seconds, "idle")))});
  }
  section(lines, "WORKERS", workers);
  if (workers.rows() == 0) lines.emplace_back("  none started yet");
}

void add_failures(std::vector<std::string>& lines, const json& view) {
  Table failures({{"JOB", Align::right}, {"KERNEL"}, {"STATUS"}, {"CONFIG"}, {"REASON"}});
  const json& recent = member(view, "failures");
  if (recent.is_array()) {
    for (auto it = recent.rbegin(); it != recent.rend(); ++it) { // newest first
      std::string reason = text_of(member(*it, "reason"));
      if (const auto nl = reason.find('\n'); nl != std::string::npos) reason.resize(nl);
      failures.add_row({text_of(member(*it, "job")), text_of(member(*it, "kernel")),
                        text_of(member(*it, "status")),
                        config_text(member(*it, "config"), member(*it, "params")),
                        reason});
    }
  }
  section(lines, "RECENT FAILURES", failures);
  if (failures.rows() == 0) lines.emplace_back("  none");
}

} // namespace

std::vector<std::string> render_top(const json& view, std::size_t width) {
  std::vector<std::string> lines;
  add_summary(lines, view);
  add_jobs(lines, view);
  add_lanes_and_workers(lines, view);
  add_failures(lines, view);
  for (auto& line : lines) line = fit(line, width);
  return lines;
}

void add_top_command(CLI::App& app, TopCommand& command) {
  command.top = app.add_subcommand(
      "top", "Live view of ktuned: jobs, device lanes, workers, throughput, recent failures");
  command.top->add_flag("--once", command.options.once,
                        "print one frame as plain text and exit (implied without a terminal)");
  command.top->add_option("--interval", command.options.interval_s, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  command.top->footer(
      "The view is redrawn in place every --interval seconds; q (or Ctrl-C) quits. With --json\n"
      "the daemon's `top` result is printed once as one JSON document. ktune top never starts\n"
      "ktuned.\n\n"
      "Examples:\n  ktune top\n  ktune top --once\n  ktune --json top\n\n"
      "Exit codes: 0 ok, 1 error (ktuned not running, error reply), 2 usage error.");
}

std::optional<int> run_top_command(const TopCommand& command, const GlobalOptions& global,
                                   Output& io) {
  if (command.top == nullptr || !command.top->parsed()) return std::nullopt;
  return top(global, command.options, io);
}

int top(const GlobalOptions& global, const TopOptions& options, Output& io) {
  const std::string socket = socket_path(global);
  auto conn = Connection::connect(socket, k_connect_timeout);
  if (!conn) return report(io, conn.error(), socket); // not_running says how to start ktuned
  const bool terminal = ::isatty(STDOUT_FILENO) == 1 && ::isatty(STDIN_FILENO) == 1;
  if (global.json || options.once || !terminal) {
    auto view = call(*conn, {{"v", 1}, {"op", "top"}}, k_request_timeout);
    if (!view) return report(io, view.error(), socket);
    if (global.json) {
      print_json(io, *view);
    } else {
      for (const auto& line : render_top(*view, 0)) io.out << line << '\n';
    }
    return k_exit_ok;
  }
  return live(*conn, socket, options, io);
}

} // namespace ktune::cli
