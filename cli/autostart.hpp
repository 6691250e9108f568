#pragma once
// Auto-start, in sccache's model: a `ktune` command that needs the daemon connects to it, and
// when nothing answers starts one and then connects. The rule is the same for every command
// that sends a request to ktuned (all but `daemon stop`, `daemon status` and the commands that
// read files or the database: export, report, replay); `ktune --help` states it, and the
// command says on stderr that it started one (on_started).
//
// connect_or_start(socket):
//   1. connect; done when a daemon answers.
//   2. take the start lock (<socket>.start.lock, flock, waiting at most `lock_timeout`), so that
//      racing starters run one at a time; connect again (the previous holder may have started it).
//   3. clean up after a killed daemon: when the instance lock (core/paths.hpp lock_file) is free,
//      no ktuned runs, so a socket file and pid file left behind are stale and removed. Only the
//      start-lock holder does this, and never while a daemon holds the instance lock.
//   4. spawn ktuned detached (setsid, stdin /dev/null, stdout and stderr appended to
//      <log_dir>/ktuned.log) with --ready-fd and --idle-s `idle_s` ($KTUNE_AUTOSTART_IDLE_S
//      overrides it), and wait at most
//      `ready_timeout` for its "ready <pid>" line on the notify pipe; then connect.
//   A daemon started concurrently by someone not using the start lock (ktuned run by hand, a
//   service manager) makes ours exit with already_running; the starter then connects to that one.
// Steps 2 to 4 are start_daemon(), which `ktune daemon start` (without --idle-s, with its own
// arguments) and fleet shards use too: ktune starts ktuned in this one place.
// The runtime, socket and log directories are opened and checked before anything in them is
// (core/safe_fs.hpp): another user's directory, or a link planted in ours, stops the start with
// unsafe_path; every file is opened O_NOFOLLOW relative to its checked directory.
// The daemon binary is $KTUNE_DAEMON, else `ktuned` next to the running executable.
// KTUNE_NO_AUTOSTART set (and not "0") turns step 2 onwards off: the connect error is returned.
#include "client/client.hpp"
#include "core/paths.hpp"
#include "core/result.hpp"
#include "core/unique_fd.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ktune::cli {

// What start_daemon is asked to start.
struct StartOptions {
  std::string socket;                      // "" = the instance's default socket
  std::vector<std::string> args;           // ktuned's arguments after --ready-fd 3
  std::string banner = "ktune autostart";  // who started it, on the line written to its log
  std::chrono::milliseconds ready_timeout{10'000};
  std::chrono::milliseconds lock_timeout{30'000};
};

// How start_daemon ended.
struct DaemonStarted {
  bool started = false;   // false: another start's daemon answers, or holds the instance lock
                          // and is starting (connect with a retry, as connect_or_start does)
  std::int64_t pid = 0;   // started: the pid ktuned reported ready with
  std::string log_path;   // started: its log
};

// The one place ktune starts ktuned: steps 2 to 4 above (start lock, stale files, spawn and
// ready wait), whoever asks (autostart, `ktune daemon start`, a fleet shard). It writes
// "--- <local time> <banner>: <argv>" to the log first; errors carry the log's lines after it.
// Errors: as connect_or_start's, with already_running never returned (that is started=false).
[[nodiscard]] Result<DaemonStarted> start_daemon(const StartOptions& options);

struct AutostartOptions {
  std::string socket;                      // "" = the instance's default socket
  double idle_s = 600;                     // passed as ktuned --idle-s
  std::chrono::milliseconds ready_timeout{10'000};
  std::chrono::milliseconds lock_timeout{30'000};
  // Called once this call started a daemon that reported ready (not when one already ran).
  std::function<void(std::int64_t pid, const std::string& log_path)> on_started;
};

// ktuned's log for a daemon the CLI starts: <log_dir>/ktuned.log, appended to, the directory
// made 0700 (with the state directory) and checked, the file opened O_NOFOLLOW. Its path goes to
// `path`. Errors: unsafe_path, io_error.
[[nodiscard]] Result<UniqueFd> open_daemon_log(const InstancePaths& paths, std::string& path);

// Errors: not_found (no ktuned executable), unsafe_path, io_error (lock, log, pipe, spawn),
// daemon_failed (ktuned exited or did not report ready in time; the message carries the end of
// its log), and Connection::connect's errors.
[[nodiscard]] Result<Connection> connect_or_start(const AutostartOptions& options);

} // namespace ktune::cli
