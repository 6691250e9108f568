#include "cli/daemon_command.hpp"

#include "cli/autostart.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/format.hpp"
#include "client/client.hpp"
#include "core/paths.hpp"

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

#include <sys/types.h>

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds k_probe_timeout{5000};       // stats while starting or stopping
constexpr std::chrono::seconds k_ready_timeout{10};
constexpr std::chrono::seconds k_stop_timeout{10};

json op(const char* name) { return json{{"op", name}}; }

// True once `pid` no longer exists (or is a zombie nobody reaped yet).
bool process_gone(std::int64_t pid) {
  if (pid <= 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// ktuned's arguments for `daemon start`'s options (paths made absolute: ktuned does not run in
// our directory).
std::vector<std::string> start_arguments(const GlobalOptions& global, const DaemonStartOptions& options) {
  std::vector<std::string> args;
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
  return args;
}

// A daemon found running, by its stats.
int print_running(const GlobalOptions& global, const json& stats, Output& io) {
  if (global.json) print_json(io, stats);
  else io.out << "ktuned already running (pid " << as_text(field(stats, "pid")) << ")\n";
  return k_exit_ok;
}

// Another start won the race (or its daemon is starting): reported as running once it answers
// within the ready timeout.
int wait_until_running(const GlobalOptions& global, const std::string& socket, Output& io) {
  const auto deadline = Clock::now() + k_ready_timeout;
  for (;;) {
    auto answered = call(socket, op("stats"), k_probe_timeout);
    if (answered) return print_running(global, *answered, io);
    if (Clock::now() >= deadline) return report(io, answered.error(), socket);
    std::this_thread::sleep_for(milliseconds(50));
  }
}

} // namespace

int daemon_start(const GlobalOptions& global, const DaemonStartOptions& options, Output& io) {
  const std::string socket = socket_path(global);
  auto running = call(socket, op("stats"), k_probe_timeout);
  if (running) return print_running(global, *running, io);
  if (running.error().code != ErrorCode::not_running) return report(io, running.error(), socket);

  StartOptions start;
  start.socket = global.socket.empty() ? std::string() : absolute(global.socket);
  start.args = start_arguments(global, options);
  start.banner = "ktune daemon start";
  start.ready_timeout = k_ready_timeout;
  auto started = start_daemon(start);
  if (!started) {
    const Error& error = started.error();
    if (error.code != ErrorCode::daemon_failed && error.code != ErrorCode::bad_reply)
      return report(io, error, socket);
    // The message ends with the daemon's log: printed as it is.
    io.err << "ktune: " << error.message;
    if (error.message.empty() || error.message.back() != '\n') io.err << '\n';
    return k_exit_error;
  }
  if (!started->started) return wait_until_running(global, socket, io);

  if (global.json) {
    auto stats = call(socket, op("stats"), k_probe_timeout);
    if (!stats) return report(io, stats.error(), socket);
    print_json(io, *stats);
  } else {
    io.out << "ktuned started (pid " << started->pid << ", socket " << socket << ", log "
           << started->log_path << ")\n";
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

void add_daemon_commands(CLI::App& app, DaemonCommands& commands) {
  auto* daemon = app.add_subcommand("daemon", "Start, stop or inspect the ktuned daemon");
  daemon->require_subcommand(1);
  daemon->footer("Examples:\n  ktune daemon start --kernel-dir ~/my-kernels\n  ktune daemon status\n"
                 "  ktune daemon stop" + k_exit_codes_help);

  commands.start = daemon->add_subcommand("start", "Start ktuned in the background and wait until it is ready");
  commands.start->add_option("--config", commands.start_options.config, "ktuned configuration file (TOML)")
      ->check(CLI::ExistingFile);
  commands.start->add_option("--kernel-dir", commands.start_options.kernel_dirs,
                    "a directory of kernel families (<name>/kernel.toml) added to the shipped "
                    "ones; repeatable")
      ->check(CLI::ExistingDirectory)
      ->default_str("");
  commands.start->add_option("--only-kernel-dir", commands.start_options.only_kernel_dirs,
                    "a directory of kernel families used instead of the shipped ones; repeatable")
      ->check(CLI::ExistingDirectory)
      ->default_str("");
  commands.start->footer(
      "ktuned runs in its own session with stdin from /dev/null and its output appended to\n"
      "ktuned.log in the instance's log directory ($KTUNE_HOME/log, else\n"
      "$XDG_STATE_HOME/ktune/log). ktune waits up to 10 s for it to accept connections and\n"
      "prints the end of the log when it fails. Nothing happens when a daemon already answers.\n"
      "The daemon binary is $KTUNE_DAEMON, else ktuned next to ktune.\n\n"
      "Example:\n  ktune daemon start --config configs/ktuned.toml --kernel-dir kernels_src" +
      k_exit_codes_help);

  commands.stop = daemon->add_subcommand("stop", "Shut ktuned down and wait until it has exited");
  commands.stop->footer("Sends shutdown and waits up to 10 s until the socket stops answering. Succeeds\n"
               "when nothing is running.\n\nExample:\n  ktune daemon stop" + k_exit_codes_help);

  commands.status = daemon->add_subcommand("status", "Show the running daemon (exit 1 when none)");
  commands.status->footer("Prints pid, version, uptime, socket, database, connections, jobs and workers.\n\n"
                 "Examples:\n  ktune daemon status\n  ktune --json daemon status" + k_exit_codes_help);

  commands.log = daemon->add_subcommand("log", "Print the end of the daemon's log");
  commands.log->add_option("-n,--lines", commands.log_lines, "this many last lines (0 = all)")
      ->check(CLI::NonNegativeNumber);
  commands.log->add_flag("-f,--follow", commands.log_follow, "keep printing what ktuned appends (Ctrl-C ends)");
  commands.log->footer("The log of a ktuned that ktune started: ktuned.log in the instance's log\n"
                  "directory ($KTUNE_HOME/log, else $XDG_STATE_HOME/ktune/log). A ktuned run by\n"
                  "systemd logs to its journal (journalctl --user -u ktuned).\n\n"
                  "Examples:\n  ktune daemon log\n  ktune daemon log -f" + k_exit_codes_help);
}

std::optional<int> run_daemon_commands(const DaemonCommands& commands, const GlobalOptions& global,
                                       Output& io) {
  if (commands.start->parsed()) return daemon_start(global, commands.start_options, io);
  if (commands.stop->parsed()) return daemon_stop(global, io);
  if (commands.status->parsed()) return daemon_status(global, io);
  if (commands.log->parsed()) return daemon_log(global, commands.log_lines, commands.log_follow, io);
  return std::nullopt;
}

} // namespace ktune::cli
