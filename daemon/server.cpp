#include "daemon/server.hpp"

#include "bench/host_device.hpp"
#include "compiler/host_compiler.hpp"
#include "core/param_space.hpp"
#include "core/protocol.hpp"
#include "core/shape.hpp"
#include "daemon/log.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace ktune::daemon {

namespace {

constexpr auto k_accept_retry = std::chrono::milliseconds(100);

Error io_error(const std::string& message) { return make_error("io_error", message); }

std::string parent_dir(const std::string& path) { return fs::path(path).parent_path().string(); }

// The compiler the compile workers use (HostCompiler's rule), for the device fingerprint.
std::string host_cxx() {
  const char* cxx = std::getenv("KTUNE_CXX");
  return cxx && *cxx ? cxx : "c++";
}

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// Rebuilds the plan of a job a previous ktuned left unfinished: the same kernel source, shape and
// candidate list (quarantine from other jobs applied again, budget too), with the rows it already
// has. Errors name why the job cannot resume.
Result<JobPlan> resume_plan(const Store& store, KernelRegistry& registry, const JobRecord& job) {
  auto kernel = registry.find(job.kernel);
  if (!kernel) return kernel.error();
  if (kernel->source_hash != job.source_hash) {
    return make_error("source_changed", "kernel " + job.kernel + " changed since the job started "
                                        "(source hash " + job.source_hash + ", now " +
                                        kernel->source_hash + ")");
  }
  auto shape = Shape::parse(job.shape);
  if (!shape) return shape.error();
  auto conformed = conform_shape(*shape, kernel->spec.shape_dims, kernel->spec.name);
  if (!conformed) return conformed.error();
  auto space = ParamSpace::create(kernel->spec, *conformed);
  if (!space) return space.error();
  auto configs = space->enumerate();
  if (!configs) return configs.error();
  auto dropped = drop_quarantined(store, job.kernel, job.source_hash, job.fingerprint, *configs,
                                  job.id);
  if (!dropped) return dropped.error();
  auto existing = store.job_results(job.id);
  if (!existing) return existing.error();
  auto reusable = reusable_results(store, job);
  if (!reusable) return reusable.error();
  JobPlan plan;
  plan.record = job;
  plan.kernel = std::move(*kernel);
  plan.shape = std::move(*conformed);
  plan.configs = std::move(*configs);
  plan.existing = std::move(*existing);
  plan.reusable = std::move(*reusable);
  plan.record.state = JobState::queued;
  return plan;
}

} // namespace

Server::Server(DaemonConfig config)
    : m_config(std::move(config)), m_signals(m_io), m_acceptor(m_io), m_accept_retry(m_io),
      m_idle_timer(m_io), m_started(std::chrono::steady_clock::now()) {}

Server::~Server() {
  // A start that failed after binding, or a stop cut short by an exception: leave no socket file.
  if (m_listening) ::unlink(m_config.socket.c_str());
}

Result<std::unique_ptr<Server>> Server::create(DaemonConfig config) {
  std::unique_ptr<Server> server(new Server(std::move(config)));
  const DaemonConfig& cfg = server->m_config;

  if (auto r = ensure_private_dir(cfg.paths.runtime_dir); !r) return r.error();
  if (auto r = ensure_private_dir(parent_dir(cfg.socket)); !r) return r.error();
  auto lock = InstanceLock::acquire(cfg.paths.lock_file, cfg.paths.pid_file);
  if (!lock) return lock.error();
  server->m_lock.emplace(std::move(*lock));

  if (auto r = ensure_private_dir(parent_dir(cfg.db)); !r) return r.error();
  if (auto r = ensure_private_dir(cfg.cache_dir); !r) return r.error();
  auto start = std::chrono::steady_clock::now();
  auto store = Store::open(cfg.db, OpenMode::read_write);
  if (!store) return store.error();
  server->m_store.emplace(std::move(*store));
  KTUNE_LOG(info) << "opened " << cfg.db << " in " << log::elapsed_ms(start) << " ms";

  start = std::chrono::steady_clock::now();
  server->m_cpu = detect_cpu_device(host_compiler_version(host_cxx()));
  KTUNE_LOG(info) << "device cpu: " << server->m_cpu.details.value("model", std::string("?"))
                  << ", fingerprint " << server->m_cpu.fingerprint << " (detected in "
                  << log::elapsed_ms(start) << " ms)";

  if (::access(cfg.worker_path.c_str(), X_OK) != 0) {
    KTUNE_LOG(warn) << "worker executable " << cfg.worker_path << " is not runnable ("
                    << std::strerror(errno) << "); tune jobs will fail until it is";
  }
  server->m_workers = std::make_unique<WorkerPool>(
      server->m_io, server->m_children, cfg.worker_path,
      static_cast<std::size_t>(cfg.compile_workers), seconds_to_ms(cfg.worker_idle_s),
      cfg.worker_memory_mb);
  server->m_scheduler = std::make_unique<Scheduler>(
      server->m_io, *server->m_store, *server->m_workers,
      SchedulerSettings{cfg.cache_dir, cfg.measure,
                        static_cast<std::size_t>(cfg.compile_workers),
                        static_cast<std::size_t>(cfg.compile_ahead),
                        static_cast<std::size_t>(cfg.search_batch), cfg.compile_timeout_s,
                        cfg.bench_timeout_s, cfg.bench_timeout_min_s, cfg.bench_timeout_max_s});
  Server* self = server.get();
  server->m_handler = std::make_unique<RequestHandler>(HandlerContext{
      cfg, *server->m_store, *server->m_scheduler, *server->m_workers, server->m_cpu,
      [self] { return self->m_sessions.size(); },
      [self] { asio::post(self->m_io, [self] { self->stop(); }); }, server->m_started});

  start = std::chrono::steady_clock::now();
  for (const auto& broken : server->m_handler->load_kernels()) {
    KTUNE_LOG(warn) << "kernel family not loaded: " << broken.error.message;
  }
  KTUNE_LOG(debug) << "scanned kernel directories in " << log::elapsed_ms(start) << " ms";
  server->resume_jobs();

  if (auto r = server->listen(); !r) return r.error();

  boost::system::error_code ec;
  for (int sig : {SIGTERM, SIGINT, SIGCHLD}) {
    server->m_signals.add(sig, ec);
    if (ec) return io_error("cannot handle signal " + std::to_string(sig) + ": " + ec.message());
  }
  return server;
}

Result<void> Server::listen() {
  const std::string& path = m_config.socket;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return io_error("socket path " + path + " is " + std::to_string(path.size()) +
                    " bytes; Unix sockets allow at most " +
                    std::to_string(sizeof(sockaddr_un::sun_path) - 1));
  }
  // Holding the instance lock, any socket file left here is a dead daemon's.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return io_error(path + " exists and is not a socket; not removing it");
    KTUNE_LOG(info) << "removing stale socket " << path;
    if (::unlink(path.c_str()) != 0) {
      return io_error("cannot remove stale socket " + path + ": " + std::strerror(errno));
    }
  }

  const asio::local::stream_protocol::endpoint endpoint(path);
  boost::system::error_code ec;
  m_acceptor.open(endpoint.protocol(), ec);
  if (ec) return io_error("cannot create socket " + path + ": " + ec.message());
  ::fcntl(m_acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  // Created 0600 from the start: no window in which another user could connect.
  const mode_t old_mask = ::umask(0177);
  m_acceptor.bind(endpoint, ec);
  ::umask(old_mask);
  if (ec) return io_error("cannot bind " + path + ": " + ec.message());
  m_listening = true;
  ::chmod(path.c_str(), 0600);
  m_acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return io_error("cannot listen on " + path + ": " + ec.message());
  return {};
}

void Server::resume_jobs() {
  std::vector<JobRecord> leftovers;
  for (JobState state : {JobState::running, JobState::interrupted, JobState::queued}) {
    auto jobs = m_store->jobs_in_state(state);
    if (!jobs) {
      KTUNE_LOG(warn) << "cannot list " << to_string(state) << " jobs: " << jobs.error().message;
      continue;
    }
    leftovers.insert(leftovers.end(), jobs->begin(), jobs->end());
  }
  if (leftovers.empty()) return;
  std::sort(leftovers.begin(), leftovers.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.id < b.id; });
  KernelRegistry registry;
  registry.load(m_config.kernel_dirs);
  for (const auto& job : leftovers) {
    auto plan = resume_plan(*m_store, registry, job);
    if (!plan) {
      KTUNE_LOG(warn) << "job " << job.id << " (" << to_string(job.state)
                      << ") cannot resume: " << plan.error().message;
      if (auto r = m_store->set_job_state(job.id, JobState::failed,
                                          "cannot resume: " + plan.error().message);
          !r) {
        KTUNE_LOG(warn) << "job " << job.id << ": " << r.error().message;
      }
      continue;
    }
    KTUNE_LOG(info) << "job " << job.id << " was " << to_string(job.state) << " when ktuned "
                    << "stopped; resuming (" << plan->existing.size() << " result(s) kept)";
    if (auto r = m_store->set_job_state(job.id, JobState::queued); !r) {
      KTUNE_LOG(warn) << "job " << job.id << ": " << r.error().message;
      continue;
    }
    m_scheduler->enqueue(std::move(*plan));
  }
}

void Server::watch_idle() {
  if (m_config.idle_s <= 0) return;
  const auto idle = seconds_to_ms(m_config.idle_s);
  const auto period = std::clamp(idle / 4, std::chrono::milliseconds(10),
                                 std::chrono::milliseconds(1000));
  m_idle_timer.expires_after(period);
  m_idle_timer.async_wait([this, idle](const boost::system::error_code& ec) {
    if (ec || m_stopping) return;
    const auto now = std::chrono::steady_clock::now();
    if (!m_sessions.empty() || m_scheduler->queued() > 0 || m_scheduler->running() > 0) {
      m_last_busy = now;
    } else if (now - m_last_busy >= idle) {
      KTUNE_LOG(info) << "no clients and no jobs for " << m_config.idle_s << " s; exiting";
      stop();
      return;
    }
    watch_idle();
  });
}

int Server::run() {
  accept_next();
  wait_signal();
  m_last_busy = std::chrono::steady_clock::now();
  watch_idle();
  KTUNE_LOG(info) << "ktuned " << KTUNE_VERSION << " listening on " << m_config.socket << " (pid "
                  << ::getpid() << ", " << m_config.compile_workers << " compile worker(s), "
                  << "kernel dirs: " << m_config.kernel_dirs.size() << ")";
  announce_ready();
  m_io.run();

  m_handler.reset();
  m_scheduler.reset();
  m_workers.reset();
  m_store.reset();
  m_lock.reset();
  KTUNE_LOG(info) << "ktuned stopped";
  return 0;
}

void Server::announce_ready() {
  if (m_config.ready_fd < 0) return;
  const std::string line = "ready " + std::to_string(::getpid()) + "\n";
  const ssize_t n = ::write(m_config.ready_fd, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size())) {
    KTUNE_LOG(warn) << "cannot write readiness to fd " << m_config.ready_fd << ": "
                    << std::strerror(errno);
  }
  ::close(m_config.ready_fd);
}

void Server::accept_next() {
  m_acceptor.async_accept([this](const boost::system::error_code& ec,
                                 asio::local::stream_protocol::socket socket) {
    if (m_stopping) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors and the like: try again shortly instead of spinning.
      KTUNE_LOG(warn) << "accept failed: " << ec.message();
      m_accept_retry.expires_after(k_accept_retry);
      m_accept_retry.async_wait([this](const boost::system::error_code& timer_ec) {
        if (!timer_ec && !m_stopping) accept_next();
      });
      return;
    }
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    ucred peer{};
    socklen_t len = sizeof peer;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 &&
        peer.uid != ::geteuid() && peer.uid != 0) {
      KTUNE_LOG(warn) << "refused a connection from uid " << peer.uid << " (pid " << peer.pid << ")";
    } else {
      auto session = std::make_shared<Session>(
          std::move(socket), m_config.max_message_bytes,
          [this](const std::shared_ptr<Session>& s, std::string_view line) { dispatch(s, line); },
          [this](const std::shared_ptr<Session>& s) { m_sessions.erase(s); });
      m_sessions.insert(session);
      session->start();
    }
    accept_next();
  });
}

void Server::dispatch(const std::shared_ptr<Session>& session, std::string_view line) {
  try {
    m_handler->handle(session, line);
  } catch (const std::exception& e) {
    // A defect, not a bad request: answer it and keep serving everyone else.
    KTUNE_LOG(error) << "request failed with an exception: " << e.what();
    session->send(protocol::encode_error(protocol::decode_id(line), protocol::code::internal,
                                         std::string("internal error: ") + e.what()));
  }
}

void Server::wait_signal() {
  m_signals.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return; // cancelled by finish_stop
    if (sig == SIGCHLD) {
      m_children.reap();
    } else {
      KTUNE_LOG(info) << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT");
      stop();
    }
    if (!m_io.stopped()) wait_signal();
  });
}

void Server::stop() {
  if (m_stopping) return;
  m_stopping = true;
  KTUNE_LOG(info) << "stopping";
  m_handler->set_stopping();
  boost::system::error_code ignored;
  m_acceptor.close(ignored);
  m_accept_retry.cancel();
  m_idle_timer.cancel();
  // Jobs first (the candidate in flight may finish, bounded by stop_grace_s), so that clients
  // waiting on one get its final state before their connection closes.
  m_scheduler->stop(seconds_to_ms(m_config.stop_grace_s), [this] {
    for (const auto& session : std::set(m_sessions)) session->close_after_flush();
    m_workers->shutdown([this] { finish_stop(); });
  });
}

void Server::finish_stop() {
  const auto start = std::chrono::steady_clock::now();
  if (auto r = m_store->checkpoint(); !r) {
    KTUNE_LOG(warn) << "checkpoint at shutdown failed: " << r.error().message;
  } else {
    KTUNE_LOG(debug) << "checkpointed the store in " << log::elapsed_ms(start) << " ms";
  }
  if (m_listening && ::unlink(m_config.socket.c_str()) != 0 && errno != ENOENT) {
    KTUNE_LOG(warn) << "cannot remove socket " << m_config.socket << ": " << std::strerror(errno);
  }
  m_listening = false;
  boost::system::error_code ignored;
  m_signals.cancel(ignored);
  m_io.stop();
}

int run_daemon(DaemonConfig config) {
  auto server = Server::create(std::move(config));
  if (!server) {
    KTUNE_LOG(error) << server.error().message;
    return 1;
  }
  return (*server)->run();
}

} // namespace ktune::daemon
