#pragma once
// One ktune-worker child process and the daemon's end of its socketpair (docs/protocol.md,
// "Daemon <-> worker"). Everything here runs on the daemon's io thread and never blocks: the
// socket is read and written asynchronously, exits are learnt from SIGCHLD through ChildWatch.
#include "core/result.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::daemon {

namespace asio = boost::asio;

enum class WorkerRole { compile, bench };
[[nodiscard]] std::string_view to_string(WorkerRole role);


// The worker op that compiles several configs in one request (worker/worker.hpp): its jobs travel
// as "jobs", and its time is compile time.
inline constexpr const char* k_compile_batch = "compile_batch";

// Routes child exits to whoever started the child. The owner of the SIGCHLD signal_set calls
// reap() on every SIGCHLD; reap() collects the watched children that have exited
// (waitpid(pid, WNOHANG), so children started elsewhere are never stolen) and calls their
// handlers with the wait status. Single-threaded.
class ChildWatch {
public:
  using OnExit = std::function<void(int wait_status)>;
  void watch(pid_t pid, OnExit on_exit);
  void reap();
  [[nodiscard]] std::size_t size() const { return m_watched.size(); }

private:
  std::map<pid_t, OnExit> m_watched;
};

// How ktuned starts its helper processes (workers, the stop guard): `argv` (argv[0] the program)
// with `envp`, as the leader of a process group of its own, every signal at its default and none
// blocked, stdin /dev/null, `fd3` as its descriptor 3 and `fd2`, when >= 0, as its stderr (else
// ktuned's); nothing else above 3 stays open. `name` ("worker /path") starts the error message.
[[nodiscard]] Result<pid_t> spawn_group_leader(const std::string& name,
                                               std::vector<std::string> argv, char** envp,
                                               int fd3, int fd2 = -1);

// "killed by SIGSEGV (Segmentation fault)", "exited with status 3".
[[nodiscard]] std::string describe_wait_status(int wait_status);

class WorkerProcess : public std::enable_shared_from_this<WorkerProcess> {
public:
  // Called with the outcome object of a successful reply, or an Error: the worker's own
  // {code, message}, or ErrorCode::worker_crashed / ErrorCode::worker_gone when the worker died or misbehaved.
  // A reply that carries "exiting": true (the worker exits after it, e.g. after losing its
  // CUDA context) marks the worker closing before the handler runs: idle() is already false
  // inside the handler, so nobody hands it the next request.
  using ReplyHandler = std::function<void(Result<nlohmann::json> outcome)>;
  // Called once, when the process has exited and its socket is closed.
  using ExitHandler = std::function<void(WorkerProcess& worker)>;

  // Starts `<path> --fd 3 --role <role> <extra_args>` with posix_spawn in its own process
  // group, fd 3 its end of a socketpair, stdin /dev/null, stderr a pipe the daemon reads (every
  // line is copied to the daemon's stderr, and the last k_stderr_tail_bytes written since the
  // last request are kept: stderr_tail()), every other descriptor closed and every signal
  // disposition at its default; the daemon's environment with `extra_env` ("NAME=value",
  // replacing a variable of the same name) added. `idle_timeout` > 0: the worker is terminated once it has been
  // idle that long (the pool starts a new one on demand).
  // Errors: spawn_error naming the path.
  [[nodiscard]] static Result<std::shared_ptr<WorkerProcess>> spawn(
      asio::io_context& io, ChildWatch& children, const std::string& path, WorkerRole role,
      const std::vector<std::string>& extra_args, ExitHandler on_exit,
      std::chrono::milliseconds idle_timeout = std::chrono::milliseconds(0),
      const std::vector<std::string>& extra_env = {});

  // Sends {"id":N,"op":op,"job":job}, for op compile_batch {"id":N,"op":op,"jobs":job} (job the
  // array of compile jobs). `on_reply` runs exactly once, on the io thread and never
  // inside this call, unless terminate() abandons the request first. Precondition: idle().
  // A `deadline` > 0 bounds the request: when no reply came in time, the worker's whole process
  // group gets SIGKILL and `on_reply` receives ErrorCode::worker_timeout once the worker has exited.
  void request(std::string_view op, nlohmann::json job, ReplyHandler on_reply,
               std::chrono::milliseconds deadline = std::chrono::milliseconds(0));

  // Who the next request is for ("job 12"), for the lines its stderr leaves in ktuned's log.
  void set_owner(std::string owner) { m_owner = std::move(owner); }

  // What the worker (and the compilers it started) wrote to stderr since the last request was
  // sent, at most the last k_stderr_tail_bytes. Complete once the reply handler runs.
  [[nodiscard]] const std::string& stderr_tail() const { return m_stderr_tail; }
  static constexpr std::size_t k_stderr_tail_bytes = 4096;
  // What of a worker's stderr per request is copied into ktuned's log; the rest is counted and
  // said in one line (a candidate writing a gigabyte must not fill the log). Each line becomes
  // a record of its own, prefixed with the worker, the job and the candidate, its control bytes
  // and invalid UTF-8 escaped (\xNN): a candidate cannot forge a line of ktuned's log.
  static constexpr std::size_t k_stderr_log_bytes = 16 * 1024;

  // Closes the socket (the worker exits on EOF) and sends SIGTERM to the process group. A request
  // in flight is abandoned: its handler is never called.
  void terminate();
  // SIGKILL to the process group (the worker and anything it started).
  void kill_group();
  // SIGSTOP to the process group while a request is in flight: the worker and its compilers
  // take no CPU time until resume() (SIGCONT). The request's deadline stops too: a paused
  // request is never killed for the time it was stopped. No-op when idle or already paused.
  void pause();
  void resume();
  [[nodiscard]] bool paused() const { return m_paused; }
  // How long the request in flight (or the last one) has been stopped by pause().
  [[nodiscard]] std::chrono::milliseconds paused_time() const;

  [[nodiscard]] bool idle() const { return !m_finished && !m_closing && !m_pending; }
  // Still running but on its way out (terminate(), a protocol error, an "exiting" reply): it
  // takes no more requests, and a replacement may be started without waiting for its exit.
  [[nodiscard]] bool closing() const { return m_closing && !m_finished; }
  [[nodiscard]] bool exited() const { return m_finished; }
  [[nodiscard]] pid_t pid() const { return m_pid; }
  [[nodiscard]] WorkerRole role() const { return m_role; }

  WorkerProcess(asio::io_context& io, pid_t pid, WorkerRole role, ExitHandler on_exit);
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

private:
  void read_next();
  void on_line(std::string_view line);
  void on_socket_closed();
  void on_exit(int wait_status);
  void fail_protocol(const std::string& message);
  void close_socket();
  void maybe_finish();
  void read_stderr();
  void append_stderr(std::string_view text);
  void drain_stderr();
  // Logs how much of the last request's stderr was not copied, then starts counting afresh.
  void note_dropped_stderr();
  void arm_idle_timer();
  void arm_deadline(std::chrono::steady_clock::duration after);

  asio::local::stream_protocol::socket m_socket;
  asio::streambuf m_in;
  std::string m_out;                  // the request being written
  asio::steady_timer m_timer;         // grace period between EOF and exit, in either order
  pid_t m_pid;
  WorkerRole m_role;
  ExitHandler m_on_exit;
  asio::posix::stream_descriptor m_stderr;
  std::array<char, 4096> m_stderr_buffer{};
  std::string m_stderr_tail;
  std::size_t m_stderr_logged = 0;     // bytes of this request's stderr copied into the log
  std::size_t m_stderr_dropped = 0;    // and not copied
  std::string m_stderr_line;           // the start of a line not ended yet
  std::string m_owner;                 // set_owner's
  std::string m_label;                 // the request in flight: owner, op, candidate
  void log_stderr_line(std::string_view line);
  asio::steady_timer m_deadline;
  asio::steady_timer m_idle_timer;
  std::chrono::milliseconds m_idle_timeout{0};
  std::chrono::milliseconds m_request_deadline{0};
  bool m_paused = false;
  std::chrono::steady_clock::time_point m_paused_since;
  std::chrono::steady_clock::duration m_paused_for{};        // this request, stops that ended
  std::chrono::steady_clock::duration m_deadline_left{};     // while paused
  bool m_timed_out = false;            // killed by us at the request's deadline
  bool m_killed_by_us = false;         // kill_group() was called (deadline, stuck, shutdown)

  bool m_ready = false;               // the ready line arrived
  bool m_closing = false;             // terminate(), a protocol error or an "exiting" reply
  bool m_socket_closed = false;
  bool m_finished = false;
  bool m_killed_silent = false;       // killed by us after it closed its socket but did not exit
  std::optional<int> m_wait_status;
  std::string m_protocol_error;

  std::int64_t m_next_id = 1;
  std::int64_t m_pending_id = 0;
  ReplyHandler m_pending;
};

} // namespace ktune::daemon
