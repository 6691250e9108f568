#include "daemon/worker_process.hpp"

#include "core/quote.hpp"

#include "daemon/log.hpp"
#include "core/unique_fd.hpp"
#include "jobs/bench_job.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ktune::daemon {

namespace {

constexpr std::size_t k_max_reply_bytes = 64u << 20;

// What a crashed worker said about where its candidate wrote (bench/guarded_memory.hpp): ": " and
// the rest of its last k_guard_fault_prefix line, or "" when it said nothing.
std::string guard_fault_note(const std::string& stderr_tail) {
  const auto at = stderr_tail.rfind(k_guard_fault_prefix);
  if (at == std::string::npos) return {};
  const auto begin = at + k_guard_fault_prefix.size();
  const auto end = stderr_tail.find('\n', begin);
  return ": wrote outside its buffers: " +
         stderr_tail.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}
// How long an exit may lag behind EOF (or EOF behind an exit) before ktuned stops waiting.
constexpr auto k_exit_grace = std::chrono::seconds(2);

// posix_spawn attributes and file actions, destroyed on every path.
struct SpawnSetup {
  posix_spawn_file_actions_t actions{};
  posix_spawnattr_t attr{};
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

Error spawn_error(const std::string& name, const std::string& what, int err) {
  return make_error(ErrorCode::spawn_failed, "cannot start " + name + ": " + what + ": " +
                                       std::strerror(err));
}

} // namespace

Result<pid_t> spawn_group_leader(const std::string& name, std::vector<std::string> argv,
                                 char** envp, int fd3, int fd2) {
  // dup2(n, n) would keep FD_CLOEXEC set, and a descriptor at 0-3 could be overwritten by the
  // other dup2s: those given that low are copied out of the way first.
  UniqueFd moved3;
  UniqueFd moved2;
  const auto out_of_the_way = [&](int& fd, UniqueFd& moved) {
    if (fd < 0 || fd > 3) return true;
    moved = UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 10));
    fd = moved.get();
    return moved.valid();
  };
  if (!out_of_the_way(fd3, moved3) || !out_of_the_way(fd2, moved2)) {
    return spawn_error(name, "fcntl", errno);
  }

  SpawnSetup setup;
  int rc = posix_spawn_file_actions_adddup2(&setup.actions, fd3, 3);
  if (rc == 0 && fd2 >= 0) rc = posix_spawn_file_actions_adddup2(&setup.actions, fd2, 2);
  if (rc == 0) rc = posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
  if (rc == 0) rc = posix_spawn_file_actions_addclosefrom_np(&setup.actions, 4);
  if (rc != 0) return spawn_error(name, "posix_spawn_file_actions", rc);

  sigset_t all_signals;
  sigset_t no_signals;
  sigfillset(&all_signals);
  sigemptyset(&no_signals);
  rc = posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                                 POSIX_SPAWN_SETSIGMASK);
  if (rc == 0) rc = posix_spawnattr_setpgroup(&setup.attr, 0);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&setup.attr, &all_signals);
  if (rc == 0) rc = posix_spawnattr_setsigmask(&setup.attr, &no_signals);
  if (rc != 0) return spawn_error(name, "posix_spawnattr", rc);

  std::vector<char*> args;
  for (auto& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  rc = ::posix_spawn(&pid, argv.at(0).c_str(), &setup.actions, &setup.attr, args.data(), envp);
  if (rc != 0) return spawn_error(name, "posix_spawn", rc);
  return pid;
}

std::string_view to_string(WorkerRole role) {
  return role == WorkerRole::compile ? "compile" : "bench";
}

void ChildWatch::watch(pid_t pid, OnExit on_exit) { m_watched[pid] = std::move(on_exit); }

void ChildWatch::reap() {
  for (auto it = m_watched.begin(); it != m_watched.end();) {
    int status = 0;
    const pid_t r = ::waitpid(it->first, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) {
      ++it;
      continue;
    }
    OnExit on_exit = std::move(it->second);
    it = m_watched.erase(it);
    // r < 0 (ECHILD): someone else reaped it; report a plain exit rather than wait forever.
    on_exit(r > 0 ? status : 0);
  }
}

std::string describe_wait_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* abbrev = ::sigabbrev_np(sig);
    const char* description = ::sigdescr_np(sig);
    std::string text = "killed by ";
    text += abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
    if (description) text += std::string(" (") + description + ")";
    return text;
  }
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  return "ended with wait status " + std::to_string(wait_status);
}

WorkerProcess::WorkerProcess(asio::io_context& io, pid_t pid, WorkerRole role, ExitHandler on_exit)
    : m_socket(io), m_in(k_max_reply_bytes), m_timer(io), m_pid(pid), m_role(role),
      m_on_exit(std::move(on_exit)), m_stderr(io), m_deadline(io), m_idle_timer(io) {}

Result<std::shared_ptr<WorkerProcess>> WorkerProcess::spawn(
    asio::io_context& io, ChildWatch& children, const std::string& path, WorkerRole role,
    const std::vector<std::string>& extra_args, ExitHandler on_exit,
    std::chrono::milliseconds idle_timeout, const std::vector<std::string>& extra_env) {
  const std::string name = "worker " + path;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return spawn_error(name, "socketpair", errno);
  }
  UniqueFd ours(sv[0]);
  UniqueFd theirs(sv[1]);
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return spawn_error(name, "pipe", errno);
  UniqueFd err_read(err_pipe[0]);
  UniqueFd err_write(err_pipe[1]);

  std::vector<std::string> args = {path, "--fd", "3", "--role", std::string(to_string(role))};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> env_entries;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto replaced = [&](const std::string& extra) {
      const auto eq = extra.find('=');
      return entry.substr(0, entry.find('=')) == std::string_view(extra).substr(0, eq);
    };
    if (std::none_of(extra_env.begin(), extra_env.end(), replaced)) env_entries.emplace_back(entry);
  }
  env_entries.insert(env_entries.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (auto& entry : env_entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  auto spawned = spawn_group_leader(name, std::move(args), envp.data(), theirs.get(),
                                    err_write.get());
  if (!spawned) return spawned.error();
  const pid_t pid = *spawned;
  theirs.reset();
  err_write.reset();

  auto worker = std::make_shared<WorkerProcess>(io, pid, role, std::move(on_exit));
  worker->m_idle_timeout = idle_timeout;
  boost::system::error_code ec;
  worker->m_stderr.assign(err_read.get(), ec);
  if (!ec) {
    (void)err_read.release();
    worker->m_stderr.non_blocking(true, ec);
  }
  if (!ec) worker->m_socket.assign(asio::local::stream_protocol(), ours.get(), ec);
  if (ec) {
    ::kill(-pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return make_error(ErrorCode::spawn_failed, "cannot watch worker socket: " + ec.message());
  }
  (void)ours.release(); // now owned by the asio socket
  std::weak_ptr<WorkerProcess> weak = worker;
  children.watch(pid, [weak](int status) {
    if (auto w = weak.lock()) w->on_exit(status);
  });
  KTUNE_LOG(debug) << to_string(role) << " worker started (pid " << pid << ") in "
                   << log::elapsed_ms(start) << " ms";
  worker->read_next();
  worker->read_stderr();
  return worker;
}

namespace {

// "job 12 compile reduce_sum LANES=1,CHUNK=256": who a request is for (`owner`, set by the
// pool) and the candidate it names.
std::string request_label(const std::string& owner, std::string_view op, const nlohmann::json& job) {
  std::string label = owner.empty() ? std::string(op) : owner + " " + std::string(op);
  const nlohmann::json& first = job.is_array() && !job.empty() ? job.front() : job;
  if (!first.is_object()) return label;
  if (auto kernel = first.find("kernel"); kernel != first.end() && kernel->is_string()) {
    label += ' ' + clip_quoted(kernel->get<std::string>());
  }
  if (job.is_array()) return label + " (" + std::to_string(job.size()) + " configs)";
  if (auto defines = first.find("defines"); defines != first.end() && defines->is_object()) {
    std::string config;
    for (const auto& [name, value] : defines->items()) {
      config += (config.empty() ? "" : ",") + name + "=" + value.dump();
    }
    label += ' ' + clip_quoted(config);
  } else if (auto artifact = first.find("artifact_path"); artifact != first.end() && artifact->is_string()) {
    // A measurement: the artifact names the candidate (its cache key).
    const std::string path = artifact->get<std::string>();
    label += ' ' + clip_quoted(path.substr(path.find_last_of('/') + 1));
  }
  return label;
}

} // namespace

void WorkerProcess::read_stderr() {
  m_stderr.async_read_some(
      asio::buffer(m_stderr_buffer),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (n > 0) self->append_stderr(std::string_view(self->m_stderr_buffer.data(), n));
        if (ec) return; // EOF (every holder exited) or closed at finish
        self->read_stderr();
      });
}

void WorkerProcess::append_stderr(std::string_view text) {
  // The daemon's own stderr is its log: keep the worker's messages there too, a record per
  // line, up to k_stderr_log_bytes per request.
  m_stderr_line.append(text);
  for (auto end = m_stderr_line.find('\n'); end != std::string::npos; end = m_stderr_line.find('\n')) {
    log_stderr_line(std::string_view(m_stderr_line).substr(0, end));
    m_stderr_line.erase(0, end + 1);
  }
  if (m_stderr_line.size() >= k_stderr_tail_bytes) {  // a line without an end: cut
    log_stderr_line(m_stderr_line);
    m_stderr_line.clear();
  }
  m_stderr_tail.append(text);
  if (m_stderr_tail.size() > k_stderr_tail_bytes) {
    m_stderr_tail.erase(0, m_stderr_tail.size() - k_stderr_tail_bytes);
  }
}

void WorkerProcess::log_stderr_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::size_t room =
      m_stderr_logged < k_stderr_log_bytes ? k_stderr_log_bytes - m_stderr_logged : 0;
  if (line.size() > room) {
    m_stderr_dropped += line.size() + 1;
    return;
  }
  m_stderr_logged += line.size() + 1;
  KTUNE_LOG(info) << to_string(m_role) << " worker " << m_pid
                  << (m_label.empty() ? std::string() : " [" + m_label + "]") << ": "
                  << log::printable(line);
}

void WorkerProcess::note_dropped_stderr() {
  if (!m_stderr_line.empty()) {
    log_stderr_line(m_stderr_line);
    m_stderr_line.clear();
  }
  if (m_stderr_dropped > 0) {
    KTUNE_LOG(warn) << to_string(m_role) << " worker " << m_pid << " wrote " << m_stderr_dropped
                    << " more bytes to stderr than the log keeps per request ("
                    << k_stderr_log_bytes << "); not copied (a result keeps the last "
                    << k_stderr_tail_bytes << ")";
  }
  m_stderr_logged = 0;
  m_stderr_dropped = 0;
}

void WorkerProcess::drain_stderr() {
  if (!m_stderr.is_open()) return;
  for (;;) {
    boost::system::error_code ec;
    const std::size_t n = m_stderr.read_some(asio::buffer(m_stderr_buffer), ec);
    if (n > 0) append_stderr(std::string_view(m_stderr_buffer.data(), n));
    if (ec || n == 0) break;
  }
}

void WorkerProcess::arm_idle_timer() {
  if (m_idle_timeout.count() <= 0) return;
  m_idle_timer.expires_after(m_idle_timeout);
  m_idle_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || !self->idle()) return;
    KTUNE_LOG(debug) << to_string(self->m_role) << " worker " << self->m_pid << " idle for "
                     << self->m_idle_timeout.count() << " ms; stopping it";
    self->terminate();
  });
}

void WorkerProcess::request(std::string_view op, nlohmann::json job, ReplyHandler on_reply,
                            std::chrono::milliseconds deadline) {
  if (!idle()) {
    const std::string worker = "worker (pid " + std::to_string(m_pid) + ")";
    std::string reason = m_finished  ? worker + " has exited"
                         : m_closing ? worker + " is exiting"
                                     : worker + " is busy";
    asio::post(m_socket.get_executor(), [on_reply = std::move(on_reply), reason] {
      on_reply(make_error(ErrorCode::worker_gone, reason));
    });
    return;
  }
  m_pending_id = m_next_id++;
  m_pending = std::move(on_reply);
  m_idle_timer.cancel();
  drain_stderr();
  note_dropped_stderr();
  m_stderr_tail.clear();
  m_request_deadline = deadline;
  m_paused_for = {};
  if (deadline.count() > 0) arm_deadline(deadline);
  m_label = request_label(m_owner, op, job);
  nlohmann::json message = {{"id", m_pending_id}, {"op", op}};
  message[op == k_compile_batch ? "jobs" : "job"] = std::move(job);
  m_out = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  m_out += '\n';
  asio::async_write(m_socket, asio::buffer(m_out),
                    [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                      // A failed write means the worker is gone; the read side reports how.
                      if (ec && ec != asio::error::operation_aborted) {
                        KTUNE_LOG(debug) << "write to worker " << self->m_pid
                                         << " failed: " << ec.message();
                      }
                    });
}

void WorkerProcess::arm_deadline(std::chrono::steady_clock::duration after) {
  m_deadline.expires_after(after);
  m_deadline.async_wait([self = shared_from_this(), id = m_pending_id](
                            const boost::system::error_code& ec) {
    if (ec || !self->m_pending || self->m_pending_id != id || self->m_finished) return;
    KTUNE_LOG(warn) << to_string(self->m_role) << " worker " << self->m_pid << " passed its "
                    << self->m_request_deadline.count() << " ms deadline; killing its process group";
    self->m_timed_out = true;
    self->kill_group();
  });
}

void WorkerProcess::pause() {
  if (m_paused || !m_pending || m_finished || m_closing) return;
  if (::kill(-m_pid, SIGSTOP) != 0) return;
  m_paused = true;
  m_paused_since = std::chrono::steady_clock::now();
  if (m_request_deadline.count() > 0) {
    m_deadline_left = m_deadline.expiry() - m_paused_since;
    m_deadline.cancel();
  }
}

void WorkerProcess::resume() {
  if (!m_paused) return;
  m_paused = false;
  m_paused_for += std::chrono::steady_clock::now() - m_paused_since;
  ::kill(-m_pid, SIGCONT);
  if (m_request_deadline.count() > 0 && m_pending && !m_finished) {
    arm_deadline(std::max(m_deadline_left, std::chrono::steady_clock::duration::zero()));
  }
}

std::chrono::milliseconds WorkerProcess::paused_time() const {
  auto total = m_paused_for;
  if (m_paused) total += std::chrono::steady_clock::now() - m_paused_since;
  return std::chrono::duration_cast<std::chrono::milliseconds>(total);
}

void WorkerProcess::terminate() {
  if (m_finished) return;
  m_closing = true;
  m_deadline.cancel();
  m_idle_timer.cancel();
  m_pending = nullptr;
  close_socket();
  if (!m_wait_status) ::kill(-m_pid, SIGTERM);
  if (m_paused) {  // a stopped group holds SIGTERM pending until it runs again
    m_paused = false;
    if (!m_wait_status) ::kill(-m_pid, SIGCONT);
  }
}

void WorkerProcess::kill_group() {
  m_killed_by_us = true;
  if (!m_wait_status) ::kill(-m_pid, SIGKILL);
}

void WorkerProcess::read_next() {
  asio::async_read_until(
      m_socket, m_in, '\n',
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (ec) {
          if (ec == asio::error::not_found) {
            self->fail_protocol("reply longer than " + std::to_string(k_max_reply_bytes) + " bytes");
          }
          self->on_socket_closed();
          return;
        }
        std::string line(asio::buffers_begin(self->m_in.data()),
                         asio::buffers_begin(self->m_in.data()) + static_cast<std::ptrdiff_t>(n - 1));
        self->m_in.consume(n);
        self->on_line(line);
        if (!self->m_socket_closed) self->read_next();
      });
}

void WorkerProcess::on_line(std::string_view line) {
  const auto message = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!message.is_object()) {
    fail_protocol("expected a JSON object, got '" + std::string(line.substr(0, 200)) + "'");
    return;
  }
  if (!m_ready) {
    if (message.value("ready", false) != true) {
      fail_protocol("expected the ready line first, got '" + std::string(line.substr(0, 200)) + "'");
      return;
    }
    m_ready = true;
    KTUNE_LOG(debug) << to_string(m_role) << " worker " << m_pid << " ready";
    if (!m_pending) arm_idle_timer();
    return;
  }
  const auto id = message.find("id");
  if (id == message.end() || !id->is_number_integer() || id->get<std::int64_t>() != m_pending_id ||
      !m_pending) {
    fail_protocol("reply with unexpected id: '" + std::string(line.substr(0, 200)) + "'");
    return;
  }
  // A reply written just before pause() stopped the worker: it is idle now, and must not stay
  // stopped for the next request.
  resume();
  ReplyHandler handler = std::move(m_pending);
  m_pending = nullptr;
  m_deadline.cancel();
  if (message.value("exiting", false) == true) {
    // The worker exits after this reply: it must not look idle to whoever the handler lets
    // pick the next worker. Its exit then arrives like any other (on_exit, on_socket_closed).
    m_closing = true;
    KTUNE_LOG(debug) << to_string(m_role) << " worker " << m_pid << " is exiting after this reply";
    // A worker that says so and stays would hold its place in the pool forever.
    m_timer.expires_after(k_exit_grace);
    m_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->m_wait_status) return;
      KTUNE_LOG(warn) << to_string(self->m_role) << " worker " << self->m_pid
                      << " said it was exiting but did not; killing it";
      self->kill_group();
    });
  } else {
    arm_idle_timer();
  }
  const bool ok = message.value("ok", false);
  if (ok) {
    const auto outcome = message.find("outcome");
    if (outcome == message.end() || !outcome->is_object()) {
      fail_protocol("reply without an outcome object");
      handler(make_error(ErrorCode::worker_gone, m_protocol_error));
      return;
    }
    handler(*outcome);
    return;
  }
  const auto error = message.find("error");
  if (error == message.end() || !error->is_object()) {
    handler(make_error(ErrorCode::worker_gone, "worker replied ok:false without an error object"));
    return;
  }
  handler(error_from_wire(error->value("code", std::string(to_string(ErrorCode::worker_error))),
                          error->value("message", std::string("worker gave no message"))));
}

void WorkerProcess::fail_protocol(const std::string& message) {
  KTUNE_LOG(error) << to_string(m_role) << " worker " << m_pid << " broke the protocol: " << message;
  if (m_protocol_error.empty()) m_protocol_error = "worker broke the protocol: " + message;
  m_closing = true;
  close_socket();
  kill_group();
}

void WorkerProcess::close_socket() {
  if (m_socket_closed) return;
  m_socket_closed = true;
  boost::system::error_code ignored;
  m_socket.shutdown(asio::socket_base::shutdown_both, ignored);
  m_socket.close(ignored);
}

void WorkerProcess::on_socket_closed() {
  close_socket();
  if (!m_wait_status && !m_finished) {
    // The worker closed its end; its exit should follow at once. If it does not, it is stuck.
    m_timer.expires_after(k_exit_grace);
    m_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->m_wait_status) return;
      KTUNE_LOG(warn) << to_string(self->m_role) << " worker " << self->m_pid
                      << " closed its socket but did not exit; killing it";
      self->m_killed_silent = true;
      self->kill_group();
    });
  }
  maybe_finish();
}

void WorkerProcess::on_exit(int wait_status) {
  m_wait_status = wait_status;
  // Anything the worker started (a compiler) goes with it.
  ::kill(-m_pid, SIGKILL);
  if (!m_closing) {
    KTUNE_LOG(debug) << to_string(m_role) << " worker " << m_pid << " "
                     << describe_wait_status(wait_status);
  }
  if (!m_socket_closed) {
    // Replies written before the exit are still in the socket; read them, then EOF follows.
    // A descendant holding the socket open must not keep us waiting.
    m_timer.expires_after(k_exit_grace);
    m_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->on_socket_closed();
    });
  }
  maybe_finish();
}

void WorkerProcess::maybe_finish() {
  if (m_finished || !m_socket_closed || !m_wait_status) return;
  m_finished = true;
  m_timer.cancel();
  m_deadline.cancel();
  m_idle_timer.cancel();
  drain_stderr();
  note_dropped_stderr();
  {
    boost::system::error_code ignored;
    m_stderr.close(ignored);
  }
  ReplyHandler handler = std::move(m_pending);
  m_pending = nullptr;
  if (m_on_exit) m_on_exit(*this);
  if (!handler) return;

  const int status = *m_wait_status;
  std::string doing = m_role == WorkerRole::compile ? "compiling" : "benchmarking";
  if (m_timed_out) {
    handler(make_error(ErrorCode::worker_timeout,
                       "killed after its " + std::to_string(m_request_deadline.count()) +
                           " ms deadline while " + doing));
  } else if (!m_protocol_error.empty()) {
    handler(make_error(ErrorCode::worker_gone, m_protocol_error));
  } else if (m_killed_silent) {
    handler(make_error(ErrorCode::worker_gone, "worker closed its socket while " + doing +
                                          " without exiting; killed"));
  } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && !m_killed_by_us) {
    handler(make_error(ErrorCode::worker_killed,
                       "worker killed by SIGKILL from outside ktuned (the OOM killer or an "
                       "administrator) while " + doing));
  } else if (WIFSIGNALED(status)) {
    handler(make_error(ErrorCode::worker_crashed, "worker " + describe_wait_status(status) + " while " + doing +
                                           guard_fault_note(m_stderr_tail)));
  } else {
    handler(make_error(ErrorCode::worker_gone, "worker " + describe_wait_status(status) + " while " + doing));
  }
}

} // namespace ktune::daemon
