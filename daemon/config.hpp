#pragma once
// ktuned's settings: built-in defaults, then a TOML file (configs/ktuned.toml documents every
// key), then the command line. Each layer overrides the one before it key by key.
//
// File keys:
//   [daemon]  socket, db, cache_dir, kernel_dirs, table_dirs, table_policy, compile_workers,
//             compile_ahead, search_batch, serial, max_message_bytes, idle_s, worker_idle_s, stop_grace_s,
//             log_max_mb, log_keep, lock_dir, metrics
//   [limits]  compile_timeout_s, bench_timeout_s, bench_timeout_min_s, bench_timeout_max_s,
//             worker_memory_mb, compile_memory_mb, max_connections, message_timeout_s, connection_idle_s,
//             max_queued_jobs_per_client
//   [access]  allow_uids, allow_gids, allow_root
//   [measure] min_samples, max_samples, target_rsd, target_error, min_time_s, max_time_s,
//             warmup_ms, flush_cache, seed, prune_factor, prune_after, race_margin, finalists,
//             final_margin,
//             final_rounds, tie_margin
// Relative paths in a file are taken relative to that file's directory; relative paths on the
// command line relative to the working directory. Every resolved path is absolute.
#include "jobs/bench_job.hpp"
#include "core/paths.hpp"
#include "core/result.hpp"
#include "daemon/log.hpp"
#include "tableio/merge.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ktune::daemon {


struct DaemonConfig {
  std::string config_path;                 // the file that was read; empty when none
  InstancePaths paths;                     // runtime dir, lock and pid files (core/paths.hpp)
  std::string socket;
  std::string db;
  std::string cache_dir;
  // Where the machine-wide device locks live (WorkerPool): /run/lock when writable, else
  // $XDG_RUNTIME_DIR, else /tmp. Every ktuned on the machine must use the same one.
  std::string lock_dir;
  std::vector<std::string> kernel_dirs;
  // Directories whose tables ktuned imports on its own (daemon/table_watch.hpp), and the import
  // policy for a key it already has.
  std::vector<std::string> table_dirs;
  tableio::Policy table_policy = tableio::Policy::newer;
  // Where /metrics is served over HTTP (daemon/metrics_http.hpp): a loopback "host:port" or an
  // absolute Unix socket path; "" = not served (the default).
  std::string metrics;
  int compile_workers = 0;                 // 0 = online cores - 1 (at least 1); resolved by resolve_config
  int compile_ahead = 0;                   // compiled candidates kept ready for the bench worker; 0 = 2 x (compile_workers + 1) x batch size
  int search_batch = 4;                    // proposals per batch of a search strategy (not exhaustive)
  bool serial = false;                     // compile and measure one candidate at a time, nothing overlapped
  std::size_t max_message_bytes = 1 << 20;
  std::string worker_path;                 // the ktune-worker executable
  int ready_fd = -1;                       // -1 = no readiness handshake
  log::Level log_level = log::Level::info;
  MeasureSettings measure;
  // Lifecycle. Durations in seconds; fractions are honoured (tests use milliseconds).
  double idle_s = 0;                       // exit after this long without clients or jobs; 0 = never
  double worker_idle_s = 60;               // a worker without work this long exits; 0 = never
  // Size-based rotation of the log when it is a file (log::rotate_stderr_file); 0 = never.
  double log_max_mb = 64;
  int log_keep = 3;
  double stop_grace_s = 10;                // SIGTERM: how long the candidate in flight may finish
  // The speed canary (daemon/canary.hpp) is read on a device this often while it has work (a
  // long job); 0 = only when a client asks (a sweep's start and end).
  double canary_interval_s = 600;
  // Deadlines per candidate, enforced with SIGKILL to the worker's process group.
  double compile_timeout_s = 120;
  double bench_timeout_s = 0;              // 0 = derived from the measurement settings, clamped
  double bench_timeout_min_s = 10;
  double bench_timeout_max_s = 600;
  std::int64_t worker_memory_mb = 0;       // RLIMIT_AS of every worker; 0 = unlimited
  std::int64_t compile_memory_mb = 4096;   // RLIMIT_AS of compile workers and their compilers
  // Client connections (docs/protocol.md § Limits).
  std::size_t max_connections = 256;       // open at once; more get too_many_connections
  bool max_connections_set = false;        // given in the config file (else lowered to fit the
                                           // descriptors ktuned may open: daemon/descriptors.hpp)
  double message_timeout_s = 10;           // a started line must end within this; 0 = no deadline
  double connection_idle_s = 600;          // no request in flight and no byte for this long; 0 = never
  std::int64_t max_queued_jobs_per_client = 64; // queued or running tune jobs per client uid
  // Access: ktuned's own uid is always allowed; these uids and gids (the peer's primary or
  // supplementary groups) too. Root is allowed unless allow_root is false.
  std::vector<std::int64_t> allow_uids;
  std::vector<std::int64_t> allow_gids;
  bool allow_root = true;
};

struct CommandLine {
  std::optional<std::string> config;
  std::optional<std::string> socket, db, cache_dir, worker;
  std::vector<std::string> kernel_dirs;       // --kernel-dir: added to the configured list
  std::vector<std::string> only_kernel_dirs;  // --only-kernel-dir: non-empty replaces it
  std::optional<int> compile_workers;
  int ready_fd = -1;
  std::optional<log::Level> log_level;
  bool foreground = false;                 // accepted for service managers; ktuned never forks
  std::optional<double> idle_s;            // --idle-s (the auto-starter passes 600)
};

// Parses argv with CLI11. When the process should end right away (--help, --version, a usage
// error, already reported on stdout/stderr) the result is the exit code instead.
[[nodiscard]] std::variant<CommandLine, int> parse_command_line(int argc, char** argv);

// Applies the keys present in a TOML document onto `config`. `label` names the file in messages;
// `base_dir` anchors relative paths. Errors (code config_error) name the file and the key:
// "ktuned.toml: unknown key [daemon].sockett", "ktuned.toml: [measure].min_samples: expected an
// integer, found a string", syntax errors with line and column.
[[nodiscard]] Result<void> apply_config_text(std::string_view toml_text, const std::string& label,
                                             const std::string& base_dir, DaemonConfig& config);

// Defaults for the instance in `env`, then the config file (`--config`, else
// default_config_path(exe_dir) when it exists; no file at all means the built-in defaults), then
// the command line. `exe_dir` is where the worker executable is looked for when `--worker` is not
// given, and anchors the shipped data (data_dir).
// Errors: config_error (unreadable or invalid file, out-of-range value).
[[nodiscard]] Result<DaemonConfig> resolve_config(const CommandLine& command_line,
                                                  const PathEnv& env, const std::string& exe_dir);

// The directory of the running executable (/proc/self/exe); empty if it cannot be read.
[[nodiscard]] std::string executable_dir();

// The shipped data of the binary in `exe_dir`: <exe_dir>/../share/ktune (the install prefix's
// share/ktune; in the build tree CMake links it to the source tree's kernels_src and configs).
[[nodiscard]] std::string data_dir(const std::string& exe_dir);
// <data_dir>/kernels: the kernel families ktuned loads by default.
[[nodiscard]] std::string shipped_kernels_dir(const std::string& exe_dir);
// <data_dir>/ktuned.toml: the file read when --config is not given (when it exists).
[[nodiscard]] std::string default_config_path(const std::string& exe_dir);

} // namespace ktune::daemon
