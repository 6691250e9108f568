#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "cli/cuda_commands.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/report_command.hpp"
#include "cli/top_command.hpp"
#include "cli/compare_command.hpp"
#include "cli/distill_command.hpp"
#include "cli/history_command.hpp"
#include "cli/repro_command.hpp"
#include "cli/kernel_commands.hpp"
#include "cli/man_pages.hpp"
#include "cli/parse_errors.hpp"
#include "cli/fleet.hpp"
#include "cli/sweep_command.hpp"
#include "cli/table_commands.hpp"
#include "core/unique_fd.hpp"
#include "replay/replay_command.hpp"
#include "search/stop_condition.hpp"

#include "cli/autostart.hpp"
#include "cli/cache_command.hpp"
#include "cli/db_command.hpp"
#include "cli/table.hpp"
#include "client/client.hpp"
#include "core/paths.hpp"
#include "core/protocol.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds k_probe_timeout{5000};       // stats while starting or stopping
constexpr std::chrono::seconds k_ready_timeout{10};
constexpr std::chrono::seconds k_stop_timeout{10};
constexpr int k_ready_fd = 3;                       // the fd ktuned sees as --ready-fd
constexpr std::size_t k_log_tail_lines = 20;

// ---- JSON access that tolerates missing or mistyped fields ------------------------------------

const json& field(const json& object, const char* key) {
  static const json null_value;
  if (!object.is_object()) return null_value;
  auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

std::int64_t as_int(const json& v, std::int64_t fallback = 0) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) return static_cast<std::int64_t>(v.get<double>());
  return fallback;
}

double as_double(const json& v, double fallback = 0) {
  return v.is_number() ? v.get<double>() : fallback;
}

std::string printf_text(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// A field as table text: strings verbatim, lists joined by ',', objects as NAME=value pairs.
std::string as_text(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) return printf_text("%g", v.get<double>());
  if (v.is_array()) {
    std::string text;
    for (const auto& item : v) {
      if (!text.empty()) text += ',';
      text += as_text(item);
    }
    return text.empty() ? "-" : text;
  }
  return format_config(v, ",");
}

std::string first_line(std::string text) {
  if (auto nl = text.find('\n'); nl != std::string::npos) text = text.substr(0, nl) + " ...";
  return text;
}

// Unix seconds (or milliseconds, when implausibly large) as ISO 8601 local time with its UTC
// offset (2026-11-25T09:13:58+01:00); strings verbatim.
std::string format_time(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number()) return "-";
  double seconds = v.get<double>();
  if (seconds > 1e11) seconds /= 1000;
  auto t = static_cast<std::time_t>(seconds);
  std::tm local{};
  if (::localtime_r(&t, &local) == nullptr) return as_text(v);
  char buf[40];
  if (std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", &local) == 0) return as_text(v);
  std::string text = buf;
  if (text.size() > 2) text.insert(text.size() - 2, ":");  // +0100 -> +01:00
  return text;
}

// ---- talking to the daemon ---------------------------------------------------------------------

json op(const char* name) { return json{{"op", name}}; }

// ---- processes and files -----------------------------------------------------------------------

// Moves `fd` to a number >= 10 (close-on-exec), so the spawn's dup2 onto 0-3 cannot clobber it.
Result<UniqueFd> raise_fd(UniqueFd fd, const char* what) {
  int raised = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 10);
  if (raised < 0)
    return make_error(ErrorCode::io_error, std::string("cannot duplicate the ") + what + ": " +
                                      std::strerror(errno));
  return UniqueFd(raised);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

// The last lines of `path` written after byte `offset`.
std::string log_tail(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > k_log_tail_lines) lines.erase(lines.begin());
  }
  std::string text;
  for (const auto& l : lines) text += "  " + l + '\n';
  return text;
}

Result<std::string> daemon_executable() {
  std::string path;
  if (const char* env = std::getenv("KTUNE_DAEMON"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec)
      return make_error(ErrorCode::io_error, "cannot locate the ktune executable (/proc/self/exe): " +
                                        ec.message());
    path = (self.parent_path() / "ktuned").string();
  }
  if (::access(path.c_str(), X_OK) != 0)
    return make_error(ErrorCode::not_found, "expected the ktuned executable at " + path + " (" +
                                       std::strerror(errno) +
                                       "); set KTUNE_DAEMON to its path");
  return path;
}

// True once `pid` no longer exists (or is a zombie nobody reaped yet).
bool process_gone(std::int64_t pid) {
  if (pid <= 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

struct Spawned {
  pid_t pid = -1;
  UniqueFd ready;  // read end of the readiness pipe
};

// Starts `argv[0]` detached (own session), stdin /dev/null, stdout+stderr onto `log`, the write
// end of a fresh pipe as fd 3, every other descriptor closed.
Result<Spawned> spawn_detached(const std::vector<std::string>& args, const UniqueFd& log) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return make_error(ErrorCode::io_error, std::string("cannot create the ready pipe: ") +
                                      std::strerror(errno));
  UniqueFd read_end(fds[0]);
  // Only the read end is non-blocking: draining it after the child exited must not hang on a
  // descendant that still holds the write end.
  ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  auto write_end = raise_fd(UniqueFd(fds[1]), "ready pipe");
  if (!write_end) return write_end.error();

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, write_end->get(), k_ready_fd);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, log.get(), 1);
  ::posix_spawn_file_actions_adddup2(&actions, log.get(), 2);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, k_ready_fd + 1);

  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&defaults, sig);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
  ::posix_spawnattr_setsigmask(&attr, &empty);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);

  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, &attr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return make_error(ErrorCode::io_error, "cannot start " + args[0] + ": " + std::strerror(rc));
  return Spawned{pid, std::move(read_end)};
}

// Reads "ready <pid>\n" from `ready`. Errors name what happened to the child instead. The pipe
// is drained before the child's exit status is looked at, so a daemon that reported ready and
// exited at once still counts as ready.
Result<std::int64_t> wait_ready(const Spawned& child, const std::string& log,
                                std::uintmax_t log_offset) {
  const auto deadline = Clock::now() + k_ready_timeout;
  std::string received;
  bool eof = false;
  for (;;) {
    if (auto nl = received.find('\n'); nl != std::string::npos) {
      std::string line = received.substr(0, nl);
      std::int64_t pid = 0;
      if (std::sscanf(line.c_str(), "ready %" SCNd64, &pid) == 1 && pid > 0) return pid;
      return make_error(ErrorCode::bad_reply, "ktuned wrote '" + line +
                                         "' on its ready fd, expected 'ready <pid>'; the end of " +
                                         log + ":\n" + log_tail(log, log_offset));
    }
    if (Clock::now() >= deadline) {
      ::kill(child.pid, SIGTERM);
      return make_error(ErrorCode::daemon_failed,
                        "ktuned (pid " + std::to_string(child.pid) + ") did not report ready within " +
                            std::to_string(k_ready_timeout.count()) +
                            " s and was sent SIGTERM; the end of " + log + ":\n" +
                            log_tail(log, log_offset));
    }
    if (!eof) {
      pollfd p{child.ready.get(), POLLIN, 0};
      int n = ::poll(&p, 1, 100);
      if (n < 0 && errno != EINTR)
        return make_error(ErrorCode::io_error, std::string("poll on the ready pipe failed: ") +
                                          std::strerror(errno));
      if (n > 0) {
        char buf[256];
        ssize_t got = ::read(child.ready.get(), buf, sizeof(buf));
        if (got > 0) {
          received.append(buf, static_cast<std::size_t>(got));
          continue;
        }
        if (got == 0) eof = true;
        else if (errno != EINTR && errno != EAGAIN)
          return make_error(ErrorCode::io_error, std::string("read from the ready pipe failed: ") +
                                            std::strerror(errno));
      }
    } else {
      // The pipe closed without a line; a descendant may still hold it, so watch the child.
      std::this_thread::sleep_for(milliseconds(20));
    }
    int status = 0;
    if (::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      // Whatever the child wrote before exiting is already in the pipe: read it first.
      char buf[256];
      ssize_t got = 0;
      while (!eof && (got = ::read(child.ready.get(), buf, sizeof(buf))) > 0)
        received.append(buf, static_cast<std::size_t>(got));
      if (received.find('\n') != std::string::npos) continue;
      const std::string tail = log_tail(log, log_offset);
      // Another start won the instance lock: ours lost the race, the daemon runs.
      if (tail.find("ktuned already running") != std::string::npos) {
        return make_error(ErrorCode::already_running, tail);
      }
      return make_error(ErrorCode::daemon_failed, "ktuned " + describe_wait_status(status) +
                                             " before it was ready; the end of " + log + ":\n" +
                                             tail);
    }
  }
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

std::string now_text() {
  std::time_t t = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

// ---- job rendering -----------------------------------------------------------------------------

// "BM=64,BN=32 median 0.123 ms, 213.5 GFLOP/s": the words of the progress line's best and of
// the winner line.
std::string candidate_text(const json& config, double median_ms, double gflops) {
  std::string text = format_config(config, ",") + " median " + format_ms(median_ms) + " ms";
  if (gflops > 0) text += ", " + format_gflops(gflops) + " GFLOP/s";
  return text;
}

std::string winner_line(const json& winner) {
  return "winner: " + candidate_text(field(winner, "config"), as_double(field(winner, "median_ms")),
                                     as_double(field(winner, "gflops")));
}

} // namespace

std::string format_duration(double seconds) {
  char buf[64];
  if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
    return buf;
  }
  auto total = static_cast<std::int64_t>(seconds);
  if (total < 3600)
    std::snprintf(buf, sizeof(buf), "%" PRId64 "m %02" PRId64 "s", total / 60, total % 60);
  else
    std::snprintf(buf, sizeof(buf), "%" PRId64 "h %02" PRId64 "m %02" PRId64 "s", total / 3600,
                  (total / 60) % 60, total % 60);
  return buf;
}

std::string finals_line(const json& search_best, const json& winner, const json& results) {
  if (!search_best.is_object() || search_best.empty() || !winner.is_object() || !results.is_array())
    return {};
  const json& winner_config = field(winner, "config");
  auto same = [](const json& a, const json& b) {
    // Compared as sets of parameters: the order of the members does not matter.
    return nlohmann::json(a) == nlohmann::json(b);
  };
  if (same(search_best, winner_config)) return {};
  for (const auto& r : results) {
    if (!same(field(r, "config"), search_best) || field(r, "remeasured") != json(true)) continue;
    return "finals: the search's best " + format_config(search_best, ",") +
           " measured " + format_ms(as_double(field(r, "median_ms"))) +
           " ms when the finalists were measured again in interleaved rounds; the winner was "
           "faster there";
  }
  return {};
}

namespace {

// When the winner is a tie-break's choice over a finalist with a lower median: the line that
// says so, else "".
std::string tie_break_line(const json& winner, const json& results) {
  if (!winner.is_object() || !results.is_array()) return {};
  const double winner_median = as_double(field(winner, "median_ms"));
  const json* fastest = nullptr;
  for (const auto& r : results) {
    if (field(r, "tied") != json(true) || as_text(field(r, "status")) != "ok") continue;
    const double median = as_double(field(r, "median_ms"));
    if (median < winner_median && (!fastest || median < as_double(field(*fastest, "median_ms"))))
      fastest = &r;
  }
  if (!fastest) return {};
  return "tie: " + candidate_text(field(*fastest, "config"), as_double(field(*fastest, "median_ms")),
                                  as_double(field(*fastest, "gflops"))) +
         " is within the tie margin; the tie-break (fewer resources, then config order) chose "
         "the winner";
}

void print_job_header(Output& io, const json& job, const json& winner) {
  io.out << "job " << as_text(field(job, "id")) << ": " << as_text(field(job, "kernel")) << ' '
         << as_text(field(job, "shape")) << ", " << as_text(field(job, "dtype")) << ", "
         << as_text(field(job, "device")) << '\n';
  std::string state = as_text(field(job, "state"));
  if (!field(job, "strategy").is_null()) state += " (" + as_text(field(job, "strategy")) + ")";
  io.out << "  state     " << state << '\n';
  io.out << "  progress  " << as_int(field(job, "done")) << '/' << as_int(field(job, "total"))
         << " done, " << as_int(field(job, "failed")) << " failed\n";
  io.out << "  created   " << format_time(field(job, "created_at")) << '\n';
  io.out << "  started   " << format_time(field(job, "started_at")) << '\n';
  std::string finished = format_time(field(job, "finished_at"));
  const json& started_at = field(job, "started_at");
  const json& finished_at = field(job, "finished_at");
  if (started_at.is_number() && finished_at.is_number()) {
    double seconds = finished_at.get<double>() - started_at.get<double>();
    if (finished_at.get<double>() > 1e11) seconds /= 1000;
    if (seconds >= 0) finished += " (took " + format_duration(seconds) + ")";
  }
  io.out << "  finished  " << finished << '\n';
  const json& timing = field(job, "timing");
  if (timing.is_object() && as_double(field(timing, "bench_ms")) + as_double(field(timing, "compile_ms")) > 0) {
    auto seconds = [&](const char* key) { return format_duration(as_double(field(timing, key)) / 1000); };
    io.out << "  time      queue " << seconds("queue_ms") << ", compile " << seconds("compile_ms")
           << ", bench " << seconds("bench_ms") << ", overhead " << seconds("overhead_ms")
           << " (" << as_int(field(timing, "compiles")) << " compiled, the rest cached or reused)\n";
  }
  // The search's record: when it found its best, and what its prior was and did.
  const json& prior = field(job, "prior");
  if (const auto best_at = as_int(field(job, "best_at")); best_at > 0 || prior.is_object()) {
    std::string search = best_at > 0 ? "best at candidate " + std::to_string(best_at) : "no full measurement";
    if (prior.is_object()) {
      const json& sources = field(prior, "sources");
      const std::size_t count = sources.is_array() ? sources.size() : 0;
      search += "; prior of " + std::to_string(count) + " earlier tune" + (count == 1 ? "" : "s") + " (" +
                std::to_string(as_int(field(prior, "results"))) + " results)";
      const json& trusted = field(prior, "trusted");
      if (trusted.is_boolean()) search += trusted.get<bool>() ? ", trusted to the end" : ", distrusted (it disagreed with the results here)";
      if (const auto rank = as_int(field(prior, "favourite_rank")); rank > 0)
        search += ", its favourite ranked " + std::to_string(rank);
    } else if (as_text(field(job, "strategy")) == "bayes") {
      search += "; no prior";
    }
    io.out << "  search    " << search << '\n';
  }
  const json& error = field(job, "error");
  if (error.is_string() && !error.get<std::string>().empty())
    io.out << "  error     " << first_line(error.get<std::string>()) << '\n';
  if (winner.is_object())
    io.out << "  winner    " << format_config(field(winner, "config"), ",") << ", median "
           << format_ms(as_double(field(winner, "median_ms"))) << " ms, "
           << format_gflops(as_double(field(winner, "gflops"))) << " GFLOP/s\n";
  else
    io.out << "  winner    none\n";
}

} // namespace

// ---- formatting --------------------------------------------------------------------------------

std::string format_config(const json& config, std::string_view separator) {
  if (!config.is_object() || config.empty()) return "-";
  std::string text;
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!text.empty()) text += separator;
    text += it.key() + "=" + as_text(it.value());
  }
  return text;
}

std::string format_ms(double ms) {
  if (ms >= 1000) return printf_text("%.1f", ms);
  if (ms >= 1) return printf_text("%.3f", ms);
  return printf_text("%.3g", ms);
}

std::string format_gflops(double gflops) {
  if (gflops <= 0) return "-";
  if (gflops >= 1) return printf_text("%.1f", gflops);
  return printf_text("%.3g", gflops);
}

std::string ProgressPrinter::line(const json& data) {
  std::int64_t done = as_int(field(data, "done"));
  std::int64_t total = as_int(field(data, "total"));
  std::int64_t failed = as_int(field(data, "failed"));
  std::string text = "[" + std::to_string(done) + "/" + std::to_string(total) + "] failed " +
                     std::to_string(failed) + "  best: ";
  const json& config = field(data, "best_config");
  if (!config.is_object() || config.empty()) return text + "-";
  return text + candidate_text(config, as_double(field(data, "best_median_ms")),
                               as_double(field(data, "best_gflops")));
}

void ProgressPrinter::update(const json& data) {
  std::int64_t done = as_int(field(data, "done"));
  std::int64_t total = as_int(field(data, "total"));
  if (m_tty) {
    m_err << '\r' << line(data) << "\x1b[K" << std::flush;
    m_open_line = true;
    return;
  }
  auto now = Clock::now();
  std::int64_t decile = total > 0 ? done * 10 / total : 0;
  bool due = !m_printed_any || decile > m_last_decile || (done == total && done != m_last_done) ||
             (done != m_last_done && now - m_last_print >= std::chrono::seconds(2));
  if (!due) return;
  m_err << line(data) << '\n' << std::flush;
  m_printed_any = true;
  m_last_decile = decile;
  m_last_done = done;
  m_last_print = now;
}

void ProgressPrinter::finish() {
  if (m_open_line) m_err << '\n' << std::flush;
  m_open_line = false;
}

// ---- commands ----------------------------------------------------------------------------------

namespace {

// While `tune --wait` is attached: Ctrl-C (SIGINT) prints that the job goes on in ktuned and how
// to follow or cancel it, then exits 130. The text is prepared outside the handler, which only
// calls write() and _exit().
char g_detach_text[256];
volatile std::sig_atomic_t g_detach_length = 0;

extern "C" void on_detach_signal(int) {
  if (g_detach_length > 0) {
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, g_detach_text, static_cast<std::size_t>(g_detach_length));
  }
  ::_exit(130);
}

class DetachNotice {
public:
  DetachNotice() {
    set_text("\nktune: detached; the job keeps running in ktuned (`ktune jobs` lists it, "
             "`ktune cancel N` cancels it)\n");
    struct sigaction action {};
    action.sa_handler = on_detach_signal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &m_previous);
  }
  ~DetachNotice() { ::sigaction(SIGINT, &m_previous, nullptr); }
  DetachNotice(const DetachNotice&) = delete;
  DetachNotice& operator=(const DetachNotice&) = delete;

  void set_job(std::int64_t job) {
    if (job == m_job) return;
    m_job = job;
    const std::string id = std::to_string(job);
    set_text("\nktune: detached; job " + id + " keeps running in ktuned (`ktune job " + id +
             "` shows it, `ktune cancel " + id + "` cancels it)\n");
  }

private:
  static void set_text(const std::string& text) {
    g_detach_length = 0;
    const std::size_t n = std::min(text.size(), sizeof g_detach_text);
    std::memcpy(g_detach_text, text.data(), n);
    g_detach_length = static_cast<std::sig_atomic_t>(n);
  }
  std::int64_t m_job = 0;
  struct sigaction m_previous {};
};

} // namespace

int daemon_start(const GlobalOptions& global, const DaemonStartOptions& options, Output& io) {
  const InstancePaths paths = resolve_paths(path_env_from_process());
  const std::string socket = global.socket.empty() ? paths.socket : global.socket;

  auto running = call(socket, op("stats"), k_probe_timeout);
  if (running) {
    if (global.json) print_json(io, *running);
    else io.out << "ktuned already running (pid " << as_text(field(*running, "pid")) << ")\n";
    return k_exit_ok;
  }
  if (running.error().code != ErrorCode::not_running) return report(io, running.error(), socket);

  auto exe = daemon_executable();
  if (!exe) return report(io, exe.error(), socket);

  // The state and log directories 0700 whatever the umask, the log never through a link.
  std::string log_path;
  auto opened = open_daemon_log(paths, log_path);
  if (!opened) return report(io, opened.error(), socket);
  auto log = raise_fd(std::move(*opened), "log file descriptor");
  if (!log) return report(io, log.error(), socket);

  std::vector<std::string> args{*exe, "--ready-fd", std::to_string(k_ready_fd)};
  if (!global.socket.empty()) {
    args.push_back("--socket");
    args.push_back(absolute(global.socket));
  }
  if (!options.config.empty()) {
    args.push_back("--config");
    args.push_back(absolute(options.config));
  }
  for (const auto& dir : options.only_kernel_dirs) {
    args.push_back("--only-kernel-dir");
    args.push_back(absolute(dir));
  }
  for (const auto& dir : options.kernel_dirs) {
    args.push_back("--kernel-dir");
    args.push_back(absolute(dir));
  }

  struct stat st{};
  std::uintmax_t log_offset = ::fstat(log->get(), &st) == 0 ? static_cast<std::uintmax_t>(st.st_size)
                                                            : 0;
  std::string banner = "--- " + now_text() + " ktune daemon start:";
  for (const auto& a : args) banner += " " + a;
  banner += '\n';
  if (::write(log->get(), banner.data(), banner.size()) > 0) log_offset += banner.size();

  auto child = spawn_detached(args, *log);
  if (!child) return report(io, child.error(), socket);
  auto pid = wait_ready(*child, log_path, log_offset);
  if (!pid && pid.error().code == ErrorCode::already_running) {
    // Started at the same time as another start, which won: report that daemon once it answers,
    // as a start finding it running would.
    const auto deadline = Clock::now() + k_ready_timeout;
    for (;;) {
      auto answered = call(socket, op("stats"), k_probe_timeout);
      if (answered) {
        if (global.json) print_json(io, *answered);
        else io.out << "ktuned already running (pid " << as_text(field(*answered, "pid")) << ")\n";
        return k_exit_ok;
      }
      if (Clock::now() >= deadline) return report(io, answered.error(), socket);
      std::this_thread::sleep_for(milliseconds(50));
    }
  }
  if (!pid) {
    io.err << "ktune: " << pid.error().message;
    if (pid.error().message.empty() || pid.error().message.back() != '\n') io.err << '\n';
    return k_exit_error;
  }

  if (global.json) {
    auto stats = call(socket, op("stats"), k_probe_timeout);
    if (!stats) return report(io, stats.error(), socket);
    print_json(io, *stats);
  } else {
    io.out << "ktuned started (pid " << *pid << ", socket " << socket << ", log " << log_path
           << ")\n";
  }
  return k_exit_ok;
}

int daemon_stop(const GlobalOptions& global, Output& io) {
  const std::string socket = socket_path(global);
  auto conn = Connection::connect(socket, k_connect_timeout);
  if (!conn) {
    if (conn.error().code != ErrorCode::not_running) return report(io, conn.error(), socket);
    if (global.json) print_json(io, json{{"running", false}});
    else io.out << "ktuned is not running (socket " << socket << ")\n";
    return k_exit_ok;
  }

  std::int64_t pid = 0;
  if (auto stats = call(*conn, op("stats"), k_probe_timeout); stats)
    pid = as_int(field(*stats, "pid"));
  auto reply = call(*conn, op("shutdown"), k_probe_timeout);
  // A daemon that exits before its reply is flushed closes the connection: that is a stop too.
  if (!reply && reply.error().code != ErrorCode::io_error) return report(io, reply.error(), socket);

  const auto deadline = Clock::now() + k_stop_timeout;
  bool socket_down = false;
  while (Clock::now() < deadline) {
    if (!socket_down) {
      auto probe = Connection::connect(socket, milliseconds(200));
      socket_down = !probe && probe.error().code == ErrorCode::not_running;
    }
    if (socket_down && process_gone(pid)) {
      if (global.json) print_json(io, reply ? *reply : json::object());
      else if (pid > 0) io.out << "ktuned stopped (pid " << pid << ")\n";
      else io.out << "ktuned stopped\n";
      return k_exit_ok;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return report(io, make_error(ErrorCode::stop_timeout, "ktuned" + (pid > 0 ? " (pid " + std::to_string(pid) + ")"
                                                               : std::string()) +
                                              " still answers at " + socket + " " +
                                              std::to_string(k_stop_timeout.count()) +
                                              " s after shutdown"),
                socket);
}

int daemon_status(const GlobalOptions& global, Output& io) {
  const std::string socket = socket_path(global);
  auto stats = call(socket, op("stats"), k_probe_timeout);
  if (!stats) {
    if (stats.error().code != ErrorCode::not_running) return report(io, stats.error(), socket);
    io.err << "ktuned is not running (socket " << socket << ")\n";
    return k_exit_error;
  }
  if (global.json) {
    print_json(io, *stats);
    return k_exit_ok;
  }
  const json& s = *stats;
  io.out << "ktuned is running (pid " << as_text(field(s, "pid")) << ", version "
         << as_text(field(s, "version")) << ")\n";
  io.out << "  uptime       " << format_duration(as_double(field(s, "uptime_s"))) << '\n';
  io.out << "  socket       " << as_text(field(s, "socket")) << '\n';
  io.out << "  database     " << as_text(field(s, "db")) << '\n';
  io.out << "  connections  " << as_text(field(s, "connections")) << '\n';
  io.out << "  jobs         " << as_int(field(s, "jobs_queued")) << " queued, "
         << as_int(field(s, "jobs_running")) << " running\n";
  const json& workers = field(s, "workers");
  io.out << "  workers      "
         << (workers.is_object() ? format_config(workers, ", ") : as_text(workers)) << '\n';
  if (const json& metrics = field(s, "metrics"); metrics.is_string()) {
    const std::string& at = metrics.get<std::string>();
    io.out << "  metrics      "
           << (at.front() == '/' ? "GET /metrics on socket " + at : "http://" + at + "/metrics")
           << '\n';
  }
  // Machine-wide locks that could not serve (docs/operations.md § Locks shared by every user).
  if (const json& lanes = field(s, "lanes"); lanes.is_array()) {
    for (const auto& lane : lanes) {
      const std::string device = as_text(field(lane, "device"));
      if (const json& problem = field(lane, "bench_cpu_claim_problem"); problem.is_string()) {
        io.out << "  locks        " << device << ": no CPU claimed: " << problem.get<std::string>() << '\n';
      }
      const json& lock = field(lane, "measure_lock");
      if (const json& why = field(lock, "unlocked"); why.is_string()) {
        io.out << "  locks        " << device << ": " << as_int(field(lock, "unlocked_measurements"))
               << " measurement(s) without the device lock: " << why.get<std::string>() << '\n';
      }
    }
  }
  return k_exit_ok;
}

int list_kernels(const GlobalOptions& global, Output& io) {
  const std::string socket = socket_path(global);
  auto result = call_daemon(socket, global, op("kernels"), k_request_timeout, io);
  if (!result) return report(io, result.error(), socket);
  if (global.json) {
    print_json(io, *result);
    return k_exit_ok;
  }
  const json& kernels = field(*result, "kernels");
  if (!kernels.is_array() || kernels.empty()) {
    io.out << "no kernels found\n";
  } else {
    Table table({{"NAME"}, {"LANGUAGE"}, {"SHAPE"}, {"DTYPES"}, {"PARAMS"}, {"SPACE", Align::right}});
    for (const auto& k : kernels) {
      std::string params;
      const json& p = field(k, "params");
      if (p.is_object()) {
        // In the spec's order ("param_names"), else as the object lists them.
        json names = field(k, "param_names");
        if (!names.is_array()) {
          names = json::array();
          for (auto it = p.begin(); it != p.end(); ++it) names.push_back(it.key());
        }
        for (const auto& name : names) {
          if (!name.is_string() || !p.contains(name.get<std::string>())) continue;
          const json& values = p.at(name.get<std::string>());
          if (!params.empty()) params += ',';
          params += name.get<std::string>() + "(" +
                    std::to_string(values.is_array() ? values.size() : 1) + ")";
        }
      }
      table.add_row({as_text(field(k, "name")), as_text(field(k, "language")),
                     as_text(field(k, "shape")), as_text(field(k, "dtypes")),
                     params.empty() ? "-" : params, as_text(field(k, "space_size"))});
    }
    table.print(io.out);
  }
  if (const json& cuda = field(*result, "cuda_backend"); cuda.is_boolean() && !cuda.get<bool>())
    io.out << "\nCUDA backend: compiled out (ktune was built without a CUDA toolkit)\n";
  const json& missing = field(*result, "missing_dirs");
  if (missing.is_array()) {
    for (const auto& dir : missing) {
      io.out << "\nwarning: kernel directory " << as_text(dir) << " does not exist\n";
    }
  }
  const json& broken = field(*result, "broken");
  if (broken.is_array() && !broken.empty()) {
    io.out << "\nbroken kernel specs (not loaded):\n";
    for (const auto& b : broken)
      io.out << "  " << as_text(field(b, "path")) << ": " << as_text(field(b, "error")) << '\n';
  }
  return k_exit_ok;
}

Result<void> parse_budget_option(const std::string& text, TuneOptions& options) {
  auto bad = [&] {
    return make_error(ErrorCode::bad_budget, "expected a number of candidates (e.g. 30), a share of the "
                                    "admitted configs (e.g. 5%) or seconds (e.g. 60s), found '" + text + "'");
  };
  if (text.empty()) return bad();
  if (search::is_time_budget(text)) {
    const auto time = search::parse_time_budget(text);
    if (!time) return bad();
    options.budget_s = static_cast<double>(time->count()) / 1000.0;
    options.budget.reset();
    options.budget_fraction.reset();
    return {};
  }
  const bool percent = text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  std::size_t used = 0;
  try {
    if (percent) {
      const double value = std::stod(number, &used);
      if (used != number.size() || !(value > 0 && value <= 100)) return bad();
      options.budget_fraction = value / 100.0;
      options.budget.reset();
      options.budget_s.reset();
    } else {
      const long long value = std::stoll(number, &used);
      if (used != number.size() || value < 1) return bad();
      options.budget = value;
      options.budget_fraction.reset();
      options.budget_s.reset();
    }
  } catch (const std::exception&) {
    return bad();
  }
  return {};
}

namespace {
// ", prior: 3 earlier tunes, 412 results" for a tune reply's "prior"; "" for null.
std::string prior_note(const json& prior) {
  if (!prior.is_object()) return "";
  const json& sources = field(prior, "sources");
  const std::size_t count = sources.is_array() ? sources.size() : 0;
  return ", prior: " + std::to_string(count) + " earlier tune" + (count == 1 ? "" : "s") + ", " +
         std::to_string(as_int(field(prior, "results"))) + " results";
}
} // namespace

int tune(const GlobalOptions& global, const TuneOptions& options, Output& io) {
  const std::string socket = socket_path(global);
  protocol::TuneRequest request;
  request.kernel = options.kernel;
  request.shape = options.shape;
  request.dtype = options.dtype;
  request.device = options.device;
  request.strategy = options.strategy;
  request.budget = options.budget;
  request.budget_fraction = options.budget_fraction;
  request.budget_s = options.budget_s;
  request.seed = options.seed;
  request.remeasure = options.remeasure;
  request.cold = options.cold;
  request.wait = options.wait;
  json body = request.to_json();
  body["op"] = "tune";
  if (options.retry_failed) body["retry_failed"] = true;
  if (options.compile_timeout_s) body["compile_timeout_s"] = *options.compile_timeout_s;
  if (options.bench_timeout_s) body["bench_timeout_s"] = *options.bench_timeout_s;

  auto conn = connect_daemon(socket, global, io);
  if (!conn) return report(io, conn.error(), socket);

  if (!options.wait) {
    auto result = call(*conn, std::move(body), k_request_timeout);
    if (!result) return report(io, result.error(), socket);
    if (global.json) {
      print_json(io, *result);
      return k_exit_ok;
    }
    // --device all: one job per device.
    const json& jobs = field(*result, "jobs");
    for (const json& queued : jobs.is_array() ? jobs : json::array({*result})) {
      const json& device = field(queued, "device");
      io.out << "job " << as_text(field(queued, "job")) << ' ' << as_text(field(queued, "state"))
             << (device.is_string() ? " on " + device.get<std::string>() : std::string()) << " ("
             << as_int(field(queued, "total")) << " candidates" << prior_note(field(queued, "prior"))
             << ")\n";
    }
    return k_exit_ok;
  }

  ProgressPrinter progress(io.err, io.err_is_tty);
  DetachNotice notice;
  std::map<std::int64_t, json> search_best;  // job -> the best config its progress line showed
  std::map<std::int64_t, std::int64_t> best_at; // job -> the candidate that found that best
  auto result = call(*conn, std::move(body), milliseconds(0), [&](const json& event) {
    const json& data = field(event, "data");
    if (const auto job = as_int(field(data, "job")); job > 0) {
      notice.set_job(job);
      if (const json& best = field(data, "best_config"); best.is_object()) search_best[job] = best;
      if (const auto at = as_int(field(data, "best_at")); at > 0) best_at[job] = at;
    }
    progress.update(data);
  });
  progress.finish();
  if (!result) return report(io, result.error(), socket);

  if (global.json) {
    print_json(io, *result);
    const json& jobs = field(*result, "jobs");
    bool success = true;
    for (const json& summary : jobs.is_array() ? jobs : json::array({*result})) {
      success = success && as_text(field(field(summary, "job"), "state")) == "done" &&
                field(summary, "winner").is_object();
    }
    return success ? k_exit_ok : k_exit_error;
  }
  // One job's end: its winner, a tie-break note, and its counts. True when it has a winner.
  auto print_summary = [&](const json& summary) {
    const json& job = field(summary, "job");
    const json& winner = field(summary, "winner");
    const std::string state = as_text(field(job, "state"));
    const std::string id = as_text(field(job, "id"));
    if (winner.is_object()) {
      io.out << winner_line(winner) << '\n';
      json job_request{{"op", "job"}, {"job", as_int(field(job, "id"))}};
      if (auto full = call(*conn, std::move(job_request), k_request_timeout)) {
        if (auto tie = tie_break_line(winner, field(*full, "results")); !tie.empty())
          io.out << tie << '\n';
        const auto best = search_best.find(as_int(field(job, "id")));
        if (best != search_best.end()) {
          if (auto finals = finals_line(best->second, winner, field(*full, "results"));
              !finals.empty())
            io.out << finals << '\n';
        }
      }
    }
    if (state == "done") {
      const auto found = best_at.find(as_int(field(job, "id")));
      io.out << "job " << id << " done: " << as_int(field(job, "total")) << " candidates, "
             << as_int(field(job, "failed")) << " failed"
             << (found == best_at.end() ? std::string()
                                        : "; the search's best came at candidate " + std::to_string(found->second))
             << '\n';
      if (!winner.is_object())
        io.err << "ktune: no candidate passed; see `ktune job " << id << "` for the reasons\n";
    } else {
      std::string error = as_text(field(job, "error"));
      io.err << "ktune: job " << id << ' ' << state << (error == "-" ? "" : ": " + error) << '\n';
    }
    return state == "done" && winner.is_object();
  };
  const json& jobs = field(*result, "jobs");
  bool success = true;
  for (const json& summary : jobs.is_array() ? jobs : json::array({*result})) {
    success = print_summary(summary) && success;
  }
  return success ? k_exit_ok : k_exit_error;
}

json arrange_results(const json& results, const JobViewOptions& view) {
  if (!results.is_array()) return json::array();
  std::vector<json> rows(results.begin(), results.end());
  auto index = [](const json& r) { return as_int(field(r, "config_index"), INT64_MAX); };
  auto ok = [](const json& r) { return as_text(field(r, "status")) == "ok"; };
  auto median = [](const json& r) { return as_double(field(r, "median_ms"), 1e300); };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const json& a, const json& b) { return index(a) < index(b); });
  if (view.sort == JobSort::median) {
    std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
      if (ok(a) != ok(b)) return ok(a);
      if (ok(a)) return median(a) < median(b);
      return as_text(field(a, "status")) < as_text(field(b, "status"));
    });
  } else if (view.sort == JobSort::status) {
    std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
      if (ok(a) != ok(b)) return ok(a);
      const auto sa = as_text(field(a, "status")), sb = as_text(field(b, "status"));
      if (sa != sb) return sa < sb;
      return median(a) < median(b);
    });
  }
  if (view.top > 0 && rows.size() > static_cast<std::size_t>(view.top)) rows.resize(view.top);
  return json(rows);
}

int show_job(const GlobalOptions& global, std::int64_t job_id, Output& io,
             const JobViewOptions& view) {
  const std::string socket = socket_path(global);
  protocol::JobRequest request;
  request.job = job_id;
  json body = request.to_json();
  body["op"] = "job";
  auto result = call_daemon(socket, global, std::move(body), k_request_timeout, io);
  if (!result) return report(io, result.error(), socket);
  const json all_results = field(*result, "results");
  const std::size_t total_rows = all_results.is_array() ? all_results.size() : 0;
  if (result->is_object() && all_results.is_array())
    (*result)["results"] = arrange_results(all_results, view);
  if (global.json) {
    print_json(io, *result);
    return k_exit_ok;
  }
  const json& winner = field(*result, "winner");
  print_job_header(io, field(*result, "job"), winner);
  if (auto tie = tie_break_line(winner, all_results); !tie.empty()) io.out << "  " << tie << '\n';
  // Rows measured without the device's machine-wide lock (another ktuned may have measured at
  // the same time): counted, with the first reason.
  std::size_t unlocked = 0;
  std::string unlocked_why;
  for (const auto& r : all_results) {
    if (const json& why = field(r, "unlocked"); why.is_string()) {
      if (unlocked++ == 0) unlocked_why = why.get<std::string>();
    }
  }
  if (unlocked > 0) {
    io.out << "  warning   " << unlocked << " result(s) measured without the device lock: "
           << unlocked_why << '\n';
  }

  const json& results = field(*result, "results");
  if (!results.is_array() || results.empty()) {
    io.out << "\nno candidates measured yet\n";
    return k_exit_ok;
  }
  std::vector<const json*> rows;
  for (const auto& r : results) rows.push_back(&r);
  // `tied` marks the winning group, the winner included: a tie needs two.
  const auto tied_count = std::count_if(all_results.begin(), all_results.end(), [](const json& r) {
    return field(r, "tied") == json(true);
  });
  const json& winner_config = field(winner, "config");
  bool marked = false;
  Table table({{"  CONFIG"}, {"STATUS"}, {"MEDIAN(ms)", Align::right},
               {"GFLOP/s", Align::right}, {"RESULT", Align::right}, {"REASON"}});
  for (const json* r : rows) {
    const json& config = field(*r, "config");
    bool is_winner = !marked && winner_config.is_object() && config == winner_config;
    marked = marked || is_winner;
    std::string status = as_text(field(*r, "status"));
    bool ok = status == "ok";
    if (ok && field(*r, "pruned") == json(true)) status = "ok (pruned)";
    if (ok && tied_count >= 2 && field(*r, "tied") == json(true)) status = "ok (tie)";
    if (ok && field(*r, "unlocked").is_string()) status += " (unlocked)";
    const json& median = field(*r, "median_ms");
    const json& reason = field(*r, "reason");
    table.add_row({(is_winner ? "* " : "  ") + format_config(config, ","), status,
                   ok && median.is_number() ? format_ms(median.get<double>()) : "-",
                   ok ? format_gflops(as_double(field(*r, "gflops"))) : "-",
                   field(*r, "id").is_number() ? std::to_string(field(*r, "id").get<std::int64_t>())
                                               : "-",
                   reason.is_string() && !reason.get<std::string>().empty()
                       ? first_line(reason.get<std::string>())
                       : ""});
  }
  io.out << '\n';
  table.print(io.out);
  if (rows.size() < total_rows)
    io.out << "(" << rows.size() << " of " << total_rows << " candidates; --top 0 shows all)\n";
  return k_exit_ok;
}

int daemon_log(const GlobalOptions& global, std::int64_t lines, bool follow, Output& io) {
  const InstancePaths paths = resolve_paths(path_env_from_process());
  const std::string log_path = paths.log_dir + "/ktuned.log";
  std::ifstream in(log_path, std::ios::binary);
  if (!in) {
    return report_error(io, ErrorCode::not_found,
                        "no daemon log at " + log_path +
                            " (ktuned writes it when `ktune` starts it; a service logs to its "
                            "journal: journalctl --user -u ktuned)");
  }
  std::vector<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (lines > 0 && tail.size() > static_cast<std::size_t>(lines)) tail.erase(tail.begin());
  }
  if (global.json && !follow) {
    print_json(io, json{{"path", log_path}, {"lines", tail}});
    return k_exit_ok;
  }
  for (const auto& l : tail) io.out << l << '\n';
  io.out << std::flush;
  if (!follow) return k_exit_ok;
  in.clear();
  for (;;) {  // until Ctrl-C
    if (std::getline(in, line)) {
      if (in.eof()) {  // a partial last line: wait for the rest
        in.clear();
        in.seekg(-static_cast<std::streamoff>(line.size()), std::ios::cur);
      } else {
        io.out << line << '\n' << std::flush;
        continue;
      }
    }
    in.clear();
    std::this_thread::sleep_for(milliseconds(200));
  }
}

int cancel_job(const GlobalOptions& global, std::int64_t job_id, Output& io) {
  const std::string socket = socket_path(global);
  protocol::JobRequest request;
  request.job = job_id;
  json body = request.to_json();
  body["op"] = "cancel";
  auto result = call_daemon(socket, global, std::move(body), k_request_timeout, io);
  if (!result) return report(io, result.error(), socket);
  if (global.json) {
    print_json(io, *result);
    return k_exit_ok;
  }
  io.out << "job " << job_id << " " << as_text(field(*result, "state"))
         << " (results measured so far are kept; see `ktune job " << job_id << "`)\n";
  return k_exit_ok;
}

int list_jobs(const GlobalOptions& global, std::int64_t limit, Output& io) {
  const std::string socket = socket_path(global);
  protocol::JobsRequest request;
  request.limit = limit;
  json body = request.to_json();
  body["op"] = "jobs";
  auto result = call_daemon(socket, global, std::move(body), k_request_timeout, io);
  if (!result) return report(io, result.error(), socket);
  if (global.json) {
    print_json(io, *result);
    return k_exit_ok;
  }
  const json& jobs = field(*result, "jobs");
  if (!jobs.is_array() || jobs.empty()) {
    io.out << "no jobs\n";
    return k_exit_ok;
  }
  Table table({{"ID", Align::right}, {"KERNEL"}, {"SHAPE"}, {"DTYPE"}, {"DEVICE"}, {"STATE"},
               {"DONE/TOTAL", Align::right}, {"FAILED", Align::right}});
  for (const auto& j : jobs)
    table.add_row({as_text(field(j, "id")), as_text(field(j, "kernel")),
                   as_text(field(j, "shape")), as_text(field(j, "dtype")),
                   as_text(field(j, "device")), as_text(field(j, "state")),
                   std::to_string(as_int(field(j, "done"))) + "/" +
                       std::to_string(as_int(field(j, "total"))),
                   std::to_string(as_int(field(j, "failed")))});
  table.print(io.out);
  return k_exit_ok;
}

int query(const GlobalOptions& global, const QueryOptions& options, Output& io) {
  const std::string socket = socket_path(global);
  protocol::LookupRequest request;
  request.kernel = options.kernel;
  request.shape = options.shape;
  request.dtype = options.dtype;
  request.device = options.device;
  json body = request.to_json();
  body["op"] = "lookup";
  auto result = call_daemon(socket, global, std::move(body), k_request_timeout, io);
  if (!result) return report(io, result.error(), socket);

  const json& r = *result;
  const json& exact_field = field(r, "exact");
  const bool exact = exact_field.is_boolean() ? exact_field.get<bool>()
                                              : as_text(field(r, "rung")) == "exact";
  if (global.json) {
    print_json(io, r);
    return exact ? k_exit_ok : k_exit_not_tuned;
  }
  const std::string config = format_config(field(r, "config"), " ");
  if (exact) {
    io.out << config << "  (median " << format_ms(as_double(field(r, "median_ms"))) << " ms, "
           << format_gflops(as_double(field(r, "gflops"))) << " GFLOP/s";
    if (!field(r, "job").is_null()) io.out << ", job " << as_text(field(r, "job"));
    io.out << ")\n";
    return k_exit_ok;
  }
  const std::string rung = as_text(field(r, "rung"));
  const json& reason = field(r, "reason");
  io.out << "no tuned winner for " << options.kernel << ' ' << options.shape << ", "
         << options.dtype << ", " << options.device << " ("
         << (reason.is_string() ? reason.get<std::string>() : std::string("not_tuned")) << "); "
         << (rung == "default" ? std::string("the kernel's default") : "fallback (" + rung + ")")
         << ": " << config << '\n';
  return k_exit_not_tuned;
}

// ---- command line ------------------------------------------------------------------------------

namespace {

// Passes everything through to `target` and keeps what it saw: the byte count and the end of
// the text (for the last error line).
class WatchingBuf : public std::streambuf {
public:
  explicit WatchingBuf(std::streambuf* target) : m_target(target) {}
  [[nodiscard]] std::size_t bytes() const { return m_bytes; }
  [[nodiscard]] const std::string& tail() const { return m_tail; }

protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    m_bytes += static_cast<std::size_t>(n);
    m_tail.append(s, static_cast<std::size_t>(n));
    if (m_tail.size() > 8192) m_tail.erase(0, m_tail.size() - 4096);
    return m_target->sputn(s, n);
  }
  int sync() override { return m_target->pubsync(); }

private:
  std::streambuf* m_target;
  std::size_t m_bytes = 0;
  std::string m_tail;
};

int run_command(int argc, const char* const* argv, Output& io);

} // namespace

int run(int argc, const char* const* argv, Output& io) {
  bool json_mode = false;
  for (int i = 1; i < argc; ++i) json_mode = json_mode || std::string_view(argv[i]) == "--json";
  if (!json_mode) return run_command(argc, argv, io);
  // --json: a command that fails without printing anything on stdout (an error written as
  // text by a command that has no JSON error path of its own) still ends with one JSON error.
  WatchingBuf out_buf(io.out.rdbuf());
  WatchingBuf err_buf(io.err.rdbuf());
  std::ostream out(&out_buf);
  std::ostream err(&err_buf);
  Output watched{out, err, io.err_is_tty, true, false};
  const int code = run_command(argc, argv, watched);
  out.flush();
  err.flush();
  if (code != k_exit_ok && out_buf.bytes() == 0) {
    std::string text = err_buf.tail();
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (const auto nl = text.find_last_of('\n'); nl != std::string::npos) text.erase(0, nl + 1);
    std::string error_code = code == k_exit_usage ? "usage" : "error";
    if (text.rfind("ktune: ", 0) == 0) {
      text.erase(0, 7);
      // "code: message" when the first word is a code (lower case and underscores).
      const auto colon = text.find(": ");
      if (colon != std::string::npos && colon > 0 &&
          text.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == colon) {
        error_code = text.substr(0, colon);
        text.erase(0, colon + 2);
      }
    }
    if (text.empty()) text = "ktune exited with status " + std::to_string(code);
    io.out << json{{"error", {{"code", error_code}, {"message", text}}}}.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
  }
  return code;
}

namespace {

int run_command(int argc, const char* const* argv, Output& io) {
  CLI::App app{"ktune: tune kernels with the ktuned daemon and look up their winners.", "ktune"};
  app.option_defaults()->always_capture_default();
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", std::string(KTUNE_VERSION));
  app.failure_message([](const CLI::App* self, const CLI::Error& e) {
    return "ktune: " + std::string(e.what()) + "\nRun `" + self->get_name() +
           " --help` (or `ktune <command> --help`) for usage.\n";
  });

  GlobalOptions global;
  app.add_option("--socket", global.socket,
                 "ktuned's Unix socket (default: $KTUNE_HOME/ktuned.sock, else "
                 "$XDG_RUNTIME_DIR/ktune/ktuned.sock)");
  app.add_flag("--json", global.json,
               "print the daemon's result object as one JSON document instead of tables");

  const std::string exit_codes =
      "\n\nExit codes: 0 ok, 1 error (ktuned not running, error reply, failed job), 2 usage "
      "error,\n            3 not tuned (query answered with a fallback config).";

  // daemon
  auto* daemon = app.add_subcommand("daemon", "Start, stop or inspect the ktuned daemon");
  daemon->require_subcommand(1);
  daemon->footer("Examples:\n  ktune daemon start --kernel-dir ~/my-kernels\n  ktune daemon status\n"
                 "  ktune daemon stop" + exit_codes);

  DaemonStartOptions start_options;
  auto* start = daemon->add_subcommand("start", "Start ktuned in the background and wait until it is ready");
  start->add_option("--config", start_options.config, "ktuned configuration file (TOML)")
      ->check(CLI::ExistingFile);
  start->add_option("--kernel-dir", start_options.kernel_dirs,
                    "a directory of kernel families (<name>/kernel.toml) added to the shipped "
                    "ones; repeatable")
      ->check(CLI::ExistingDirectory)
      ->default_str("");
  start->add_option("--only-kernel-dir", start_options.only_kernel_dirs,
                    "a directory of kernel families used instead of the shipped ones; repeatable")
      ->check(CLI::ExistingDirectory)
      ->default_str("");
  start->footer(
      "ktuned runs in its own session with stdin from /dev/null and its output appended to\n"
      "ktuned.log in the instance's log directory ($KTUNE_HOME/log, else\n"
      "$XDG_STATE_HOME/ktune/log). ktune waits up to 10 s for it to accept connections and\n"
      "prints the end of the log when it fails. Nothing happens when a daemon already answers.\n"
      "The daemon binary is $KTUNE_DAEMON, else ktuned next to ktune.\n\n"
      "Example:\n  ktune daemon start --config configs/ktuned.toml --kernel-dir kernels_src" +
      exit_codes);

  auto* stop = daemon->add_subcommand("stop", "Shut ktuned down and wait until it has exited");
  stop->footer("Sends shutdown and waits up to 10 s until the socket stops answering. Succeeds\n"
               "when nothing is running.\n\nExample:\n  ktune daemon stop" + exit_codes);

  auto* status = daemon->add_subcommand("status", "Show the running daemon (exit 1 when none)");
  status->footer("Prints pid, version, uptime, socket, database, connections, jobs and workers.\n\n"
                 "Examples:\n  ktune daemon status\n  ktune --json daemon status" + exit_codes);

  std::int64_t log_lines = 50;
  bool log_follow = false;
  auto* log_cmd = daemon->add_subcommand("log", "Print the end of the daemon's log");
  log_cmd->add_option("-n,--lines", log_lines, "this many last lines (0 = all)")
      ->check(CLI::NonNegativeNumber);
  log_cmd->add_flag("-f,--follow", log_follow, "keep printing what ktuned appends (Ctrl-C ends)");
  log_cmd->footer("The log of a ktuned that ktune started: ktuned.log in the instance's log\n"
                  "directory ($KTUNE_HOME/log, else $XDG_STATE_HOME/ktune/log). A ktuned run by\n"
                  "systemd logs to its journal (journalctl --user -u ktuned).\n\n"
                  "Examples:\n  ktune daemon log\n  ktune daemon log -f" + exit_codes);

  CudaCommands cuda_commands;
  add_cuda_commands(app, cuda_commands);
  TableCommands table_commands;
  add_table_commands(app, table_commands);
  SweepCommand sweep_command;
  add_sweep_command(app, sweep_command);
  FleetCommands fleet_commands;
  add_fleet_commands(app, fleet_commands);
  CompareCommand compare_command;
  add_compare_command(app, compare_command);
  HistoryCommand history_command;
  add_history_command(app, history_command);
  DistillCommand distill_command;
  add_distill_command(app, distill_command);
  CacheCommand cache_command;
  add_cache_command(app, cache_command);
  DbCommand db_command;
  add_db_command(app, db_command);
  ReproCommand repro_command;
  add_repro_command(app, repro_command);
  KernelCommands kernel_commands;
  add_kernel_commands(app, kernel_commands);
  ReportCommand report_command;
  add_report_command(app, report_command);
  TopCommand top_command;
  add_top_command(app, top_command);
  replay::ReplayCommand replay_command(app);
  ManCommand man_command;
  add_man_command(app, man_command);

  // kernels
  auto* kernels = app.add_subcommand("kernels", "List the kernel families ktuned loaded");
  kernels->footer(
      "Columns: NAME, LANGUAGE (cuda or cpp), SHAPE (dimension names), DTYPES, PARAMS (each\n"
      "tunable with its number of values) and SPACE (configs admitted by the constraints).\n"
      "Specs that failed to load follow, with their errors.\n\nExample:\n  ktune kernels" +
      exit_codes);

  // tune
  TuneOptions tune_options;
  std::string budget;
  auto* tune_cmd = app.add_subcommand("tune", "Tune a kernel for one shape, dtype and device");
  tune_cmd->add_option("kernel", tune_options.kernel, "kernel family, e.g. gemm")->required();
  tune_cmd->add_option("--shape", tune_options.shape,
                       "problem shape as NAME=value pairs, e.g. M=256,N=256,K=256")
      ->required();
  tune_cmd->add_option("--dtype", tune_options.dtype, "element type (f32, f16, f64, ...)");
  tune_cmd->add_option("--device", tune_options.device,
                       "device: cpu, cuda:N, or all (one job per device that has a family of "
                       "the kernel; they run in parallel, one per device lane)");
  tune_cmd->add_option("--strategy", tune_options.strategy,
                       "search strategy: exhaustive (default), random, local, annealing, "
                       "genetic or bayes");
  auto* budget_option = tune_cmd->add_option(
      "--budget", budget,
      "evaluate at most this many candidates, or this share of the admitted configs with a "
      "'%', or propose candidates for this many seconds with an 's' (e.g. 30, 5% or 60s); "
      "default: all");
  tune_cmd->add_option("--seed", tune_options.seed,
                       "seed of the strategy's random choices (default 0): the same seed "
                       "proposes the same configs")
      ->check(CLI::NonNegativeNumber);
  tune_cmd->add_flag("--remeasure", tune_options.remeasure,
                     "measure configs again that an earlier job already measured for this "
                     "kernel, shape, dtype and device (default: reuse those results)");
  tune_cmd->add_flag("--wait", tune_options.wait,
                     "stay attached: progress on stderr, then the winner");
  tune_cmd->add_flag("--retry-failed", tune_options.retry_failed,
                     "run again the configs that crashed or hung in earlier jobs (quarantined)");
  tune_cmd->add_flag("--cold", tune_options.cold,
                     "search from nothing: without this, a strategy that learns from earlier "
                     "results (bayes) starts from the store's results of the kernel at other "
                     "shapes and on other devices");
  tune_cmd->add_option("--compile-timeout", tune_options.compile_timeout_s,
                       "seconds one candidate may compile (default: ktuned's compile_timeout_s)")
      ->check(CLI::PositiveNumber);
  tune_cmd->add_option("--bench-timeout", tune_options.bench_timeout_s,
                       "seconds one candidate may run (default: derived from the measurement "
                       "settings)")
      ->check(CLI::PositiveNumber);
  tune_cmd->footer(
      "Queues a job: every config of the kernel's parameter space that its constraints admit\n"
      "(or the strategy's choice within --budget) is compiled, checked against the reference\n"
      "and benchmarked. Without --wait, prints \"job N queued (T candidates)\" and returns.\n"
      "With --wait, shows [done/total] progress and prints the winner; Ctrl-C detaches and\n"
      "the job keeps running in ktuned (see `ktune job N`).\n\n"
      "Examples:\n  ktune tune gemm --shape M=256,N=256,K=256 --device cpu --wait\n"
      "  ktune tune gemm --shape M=4096,N=4096,K=4096 --device cuda:0 --strategy random "
      "--budget 200\n"
      "  ktune tune gemm --shape M=256,N=256,K=256 --strategy genetic --budget 30 --seed 7 "
      "--wait" + exit_codes);

  // job
  const CLI::Validator job_id_check(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (digits && text.find_first_not_of('0') != std::string::npos) return {};
        return "expected a job id (a whole number from 1, as `ktune jobs` lists them), found '" +
               text + "'";
      },
      "JOB_ID");
  std::int64_t job_id = 0;
  JobViewOptions job_view;
  std::string job_sort = "config";
  auto* job = app.add_subcommand("job", "Show one job and every candidate's result");
  job->add_option("id", job_id, "job id (from `ktune tune` or `ktune jobs`)")
      ->required()
      ->check(job_id_check);
  job->add_option("--top", job_view.top, "show only the first K candidates (0 = all)")
      ->check(CLI::NonNegativeNumber);
  job->add_option("--sort", job_sort,
                  "config (config order), median (fastest first, failures last) or status "
                  "(grouped by status)")
      ->check(CLI::IsMember({"config", "median", "status"}));
  job->footer(
      "Prints kernel, shape, dtype, device, state, counts and times, then each candidate in\n"
      "config order: CONFIG, STATUS (ok, compile_error, crash, timeout, mismatch, ...),\n"
      "MEDIAN(ms), GFLOP/s and the REASON a candidate failed. '*' marks the winner; 'ok (tie)'\n"
      "marks the finalists tied with it (measured again in rounds after the search; within\n"
      "[measure].tie_margin, 3%, of the best at 95% confidence),\n"
      "'ok (pruned)' those stopped early as clearly slower than the best. The time line splits\n"
      "the job's wall time into queue wait, compile (the bench worker waited for a compile),\n"
      "bench and overhead.\n\n"
      "Examples:\n  ktune job 3\n  ktune job 3 --top 10 --sort median" + exit_codes);

  // cancel
  std::int64_t cancel_id = 0;
  auto* cancel = app.add_subcommand("cancel", "Cancel a queued or running job");
  cancel->add_option("id", cancel_id, "job id")->required()->check(job_id_check);
  cancel->footer(
      "A queued job is cancelled at once; a running one once the candidates in flight finish.\n"
      "Its results so far stay in the database; the job ends in state cancelled.\n\n"
      "Example:\n  ktune cancel 3" + exit_codes);

  // jobs
  std::int64_t limit = 50;
  auto* jobs = app.add_subcommand("jobs", "List recent jobs, newest first");
  jobs->add_option("--limit", limit, "at most this many jobs")->check(CLI::PositiveNumber);
  jobs->footer("Example:\n  ktune jobs --limit 10" + exit_codes);

  // query
  QueryOptions query_options;
  auto* query_cmd = app.add_subcommand("query", "Look up the tuned winner for a kernel and shape");
  query_cmd->add_option("kernel", query_options.kernel, "kernel family, e.g. gemm")->required();
  query_cmd->add_option("--shape", query_options.shape,
                        "problem shape as NAME=value pairs, e.g. M=256,N=256,K=256")
      ->required();
  query_cmd->add_option("--dtype", query_options.dtype, "element type");
  query_cmd->add_option("--device", query_options.device,
                        "device: cpu, cuda:N, or a device fingerprint (as `ktune devices` and "
                        "exported tables show it; a table imported from another machine answers)");
  query_cmd->footer(
      "Prints the winner's config (\"BM=64 BN=64 ...\") with its median time and GFLOP/s.\n"
      "When nothing is tuned for this key, prints the fallback ktuned hands a runtime (the\n"
      "kernel's default config) and exits 3.\n\n"
      "Examples:\n  ktune query gemm --shape M=256,N=256,K=256 --device cpu\n"
      "  ktune --json query gemm --shape M=256,N=256,K=256" + exit_codes);

  // completion
  std::string completion_shell;
  auto* completion = app.add_subcommand("completion", "Print the shell completion script");
  completion->add_option("shell", completion_shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  completion->footer("Installed packages ship these scripts; from a build tree:\n"
                     "  source <(ktune completion bash)\n"
                     "  ktune completion fish > ~/.config/fish/completions/ktune.fish" +
                     exit_codes);

  app.footer("Commands talk to ktuned over its Unix socket; `ktune <command> --help` explains\n"
             "each one.\n\n"
             "Autostart: every command that sends ktuned a request (tune, job, jobs, cancel,\n"
             "query, kernels, devices, compile-check, import, sweep, daemon start) starts ktuned\n"
             "when none answers, and says so on stderr; it then exits after 600 s without\n"
             "clients or jobs. `daemon stop`, `daemon status`, `daemon log`, top, export,\n"
             "compare, history, repro, report, replay, cache and db never start one.\n"
             "KTUNE_NO_AUTOSTART=1 turns autostart off.\n\n"
             "With --json every command prints one JSON document on stdout, an error too:\n"
             "{\"error\":{\"code\":...,\"message\":...}} with a non-zero exit.\n\nExamples:\n"
             "  ktune daemon start\n"
             "  ktune tune gemm --shape M=256,N=256,K=256 --device cpu --wait\n"
             "  ktune query gemm --shape M=256,N=256,K=256 --device cpu" + exit_codes);

  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--json") io.json = true;
  }
  // The first word that is not an option names the command: one that does not exist gets the
  // nearest names instead of CLI11's "A subcommand is required".
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--socket") {
      ++i;
      continue;
    }
    if (word.empty() || word.front() == '-') continue;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      return report_error(io, ErrorCode::usage,
                          "unknown command '" + std::string(word) + "'" +
                              did_you_mean(std::string(word), names) + "; run `ktune --help`",
                          k_exit_usage);
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) {
      if (auto unknown = unknown_argument_message(app)) {
        return report_error(io, ErrorCode::usage, *unknown, k_exit_usage);
      }
    }
    if (io.json && e.get_exit_code() != 0) {
      return report_error(io, ErrorCode::usage, e.what(), k_exit_usage);
    }
    int code = app.exit(e, io.out, io.err);
    return code == 0 ? k_exit_ok : k_exit_usage;
  }
  io.json = global.json;
  if (budget_option->count() > 0) {
    if (auto r = parse_budget_option(budget, tune_options); !r) {
      return report_error(io, ErrorCode::usage, "tune --budget: " + r.error().message, k_exit_usage);
    }
  }
  if (const char* parse_only = std::getenv("KTUNE_PARSE_ONLY"); parse_only && *parse_only == '1') {
    return k_exit_ok;
  }
  if (completion->parsed()) {
    return write_completion(app, completion_shell, io.out) ? k_exit_ok : k_exit_usage;
  }
  if (auto code = run_man_command(man_command, app, KTUNE_VERSION, io)) return *code;
  job_view.sort = job_sort == "median" ? JobSort::median
                  : job_sort == "status" ? JobSort::status
                                         : JobSort::config;

  try {
    if (start->parsed()) return daemon_start(global, start_options, io);
    if (stop->parsed()) return daemon_stop(global, io);
    if (status->parsed()) return daemon_status(global, io);
    if (log_cmd->parsed()) return daemon_log(global, log_lines, log_follow, io);
    if (kernels->parsed()) return list_kernels(global, io);
    if (auto code = run_cuda_commands(cuda_commands, global, io)) return *code;
    if (auto code = run_table_commands(table_commands, global, io)) return *code;
    if (auto code = run_sweep_command(sweep_command, global, io)) return *code;
    if (auto code = run_fleet_commands(fleet_commands, global, io)) return *code;
    if (auto code = run_compare_command(compare_command, global, io)) return *code;
    if (auto code = run_history_command(history_command, global, io)) return *code;
    if (auto code = run_distill_command(distill_command, global, io)) return *code;
    if (auto code = run_cache_command(cache_command, io)) return *code;
    if (auto code = run_db_command(db_command, io)) return *code;
    if (auto code = run_repro_command(repro_command, global, io)) return *code;
    if (auto code = run_kernel_commands(kernel_commands, io)) return *code;
    if (auto code = run_report_command(report_command, io)) return *code;
    if (auto code = run_top_command(top_command, global, io)) return *code;
    if (tune_cmd->parsed()) return tune(global, tune_options, io);
    if (job->parsed()) return show_job(global, job_id, io, job_view);
    if (cancel->parsed()) return cancel_job(global, cancel_id, io);
    if (jobs->parsed()) return list_jobs(global, limit, io);
    if (query_cmd->parsed()) return query(global, query_options, io);
    if (replay_command.parsed()) return replay_command.run(global.json, io.out, io.err);
  } catch (const json::exception& e) {
    // Only a reply that breaks the protocol's types reaches here.
    return report_error(io, ErrorCode::bad_reply, std::string("unexpected reply from ktuned: ") + e.what());
  }
  return report_error(io, ErrorCode::usage, "no command given; run `ktune --help`", k_exit_usage);
}

} // namespace

} // namespace ktune::cli
