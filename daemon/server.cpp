#include "daemon/server.hpp"

#include "core/param_space.hpp"
#include "core/protocol.hpp"
#include "core/shape.hpp"
#include "daemon/compile_check.hpp"
#include "daemon/log.hpp"
#include "daemon/planner.hpp"
#include "daemon/store_writer.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <utility>

#include <fcntl.h>
#include <pwd.h>
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
constexpr auto k_identity_period = std::chrono::seconds(1);
// Databases up to this size get integrity_check at start (indexes checked against their tables
// too); larger ones quick_check, which reads every page once.
constexpr std::uintmax_t k_integrity_check_bytes = 64ull << 20;

Error io_error(const std::string& message) { return make_error(ErrorCode::io_error, message); }

std::string parent_dir(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

std::uintmax_t file_size(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : size;
}

// A directory that does not exist is made 0700 (and checked); one that exists is left to the
// check that fits its use (check_socket_dir).
Result<void> make_missing_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return {};
  auto made = SafeDir::open(dir, DirCreate::yes);
  if (!made) return made.error();
  return {};
}

// A database SQLite or the check at start found damaged: the reason, then what to do.
Error damaged_advice(const Error& error, const std::string& db) {
  const bool damaged = error.code == ErrorCode::db_corrupt ||
                       error.message.find("malformed") != std::string::npos ||
                       error.message.find("not a database") != std::string::npos;
  if (!damaged) return error;
  return make_error(ErrorCode::db_corrupt,
                    error.message + ". ktuned does not start on a damaged database. Either restore "
                    "a backup over it (`ktune db backup` makes one while ktuned runs), or run `ktune "
                    "db recover " + db + " NEW.db` to copy what can still be read into a new file "
                    "and move that into place, or move " + db + " aside and remove " + db +
                    ".identity to start with an empty database");
}

// The socket's directory must be ktuned's user's (or root's), and writable by nobody else
// unless sticky (as /tmp): otherwise another user could replace the socket under clients.
Result<void> check_socket_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return io_error("cannot inspect socket directory " + dir + ": " + std::strerror(errno));
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return io_error("socket directory " + dir + " is owned by " + user_text(st.st_uid) +
                    ", not by ktuned's " + user_text(::geteuid()) + " or root; refusing to listen there");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return io_error("socket directory " + dir + " is writable by other users and not sticky; "
                    "refusing to listen there");
  }
  return {};
}

std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// Rebuilds the plan of a job a previous ktuned left unfinished: the same kernel source, shape and
// candidate list (quarantine from other jobs applied again unless the job retries failed configs,
// budget too), with the rows it already has and those of other jobs it may copy.
// Errors name why the job cannot resume.

} // namespace

Server::Server(DaemonConfig config)
    : m_config(std::move(config)), m_signals(m_io), m_acceptor(m_io), m_accept_retry(m_io),
      m_idle_timer(m_io), m_identity_timer(m_io), m_started(std::chrono::steady_clock::now()) {}

Server::~Server() {
  // A start that failed after binding, or a stop cut short by an exception: leave no socket file.
  if (m_listening) ::unlink(m_config.socket.c_str());
}

Result<std::unique_ptr<Server>> Server::create(DaemonConfig config) {
  // Descriptors first: the soft limit raised, the connections fitted into it.
  auto limit = raise_descriptor_limit();
  if (!limit) return limit.error();
  auto fitted = fit_connections(config, *limit);
  if (!fitted) return fitted.error();
  if (!fitted->empty()) KTUNE_LOG(warn) << *fitted;
  KTUNE_LOG(info) << "file descriptors: " << limit->soft
                  << (limit->soft != limit->raised_from
                          ? " (raised from " + std::to_string(limit->raised_from) + ")"
                          : std::string())
                  << ", at most " << config.max_connections << " connections";
  std::unique_ptr<Server> server(new Server(std::move(config)));
  if (auto r = server->claim_files(); !r) return r.error();
  if (auto r = server->open_store(); !r) return r.error();
  if (auto r = server->start_services(); !r) return r.error();
  auto resumed = server->resume_jobs();
  // From here on the event loop never waits for another process's lock: a write that meets one
  // waits in the store writer instead (daemon/store_writer.hpp).
  server->m_store->set_busy_timeout(std::chrono::milliseconds(0));
  server->serve_once_probed(std::move(resumed));
  if (auto r = server->listen(); !r) return r.error();
  if (auto r = server->serve_metrics(); !r) return r.error();
  return server;
}

Result<void> Server::claim_files() {
  const DaemonConfig& cfg = m_config;
  // Every directory ktuned makes files in is opened and checked before anything in it is touched
  // (core/safe_fs.hpp): another user's runtime directory stops the start here.
  auto runtime = SafeDir::open(cfg.paths.runtime_dir, DirCreate::yes);
  if (!runtime) return runtime.error();
  if (auto r = make_missing_dir(parent_dir(cfg.socket)); !r) return r.error();
  auto lock = InstanceLock::acquire(*runtime, file_name(cfg.paths.lock_file),
                                    file_name(cfg.paths.pid_file));
  if (!lock) return lock.error();
  m_lock.emplace(std::move(*lock));

  auto db_dir = SafeDir::open(parent_dir(cfg.db), DirCreate::yes);
  if (!db_dir) return db_dir.error();
  if (auto cache = SafeDir::open(cfg.cache_dir, DirCreate::yes); !cache) return cache.error();
  auto db_file = DatabaseFile::open(*db_dir, file_name(cfg.db));
  if (!db_file) return db_file.error();
  m_db_file.emplace(std::move(*db_file));
  if (!m_db_file->note().empty()) KTUNE_LOG(warn) << m_db_file->note();
  return {};
}

Result<void> Server::open_store() {
  const DaemonConfig& cfg = m_config;
  auto start = std::chrono::steady_clock::now();
  auto store = Store::open(cfg.db, OpenMode::read_write);
  if (!store) {
    if (store.error().code == ErrorCode::db_busy) {
      return make_error(ErrorCode::db_busy, store.error().message +
                                       " (another process has held a lock on the database for "
                                       "more than 5 s; ktuned cannot start on it)");
    }
    return damaged_advice(store.error(), cfg.db);
  }
  m_store.emplace(std::move(*store));
  KTUNE_LOG(info) << "opened " << cfg.db << " in " << log::elapsed_ms(start) << " ms";
  start = std::chrono::steady_clock::now();
  if (auto sound = m_store->verify(file_size(cfg.db) <= k_integrity_check_bytes
                                       ? Store::Verify::full
                                       : Store::Verify::quick);
      !sound) {
    return damaged_advice(sound.error(), cfg.db);
  }
  KTUNE_LOG(info) << "checked " << cfg.db << " in " << log::elapsed_ms(start) << " ms";
  if (auto marked = m_db_file->mark(); !marked) return marked.error();
  m_store->set_write_check([file = &*m_db_file] { return file->check(); });
  m_writer = std::make_unique<StoreWriter>(m_io, *m_store);
  // Results an earlier ktuned acknowledged while its database took no writes.
  if (auto replayed = m_writer->replay_spill(); !replayed) return replayed.error();
  if (struct stat st{}; ::stat(cfg.db.c_str(), &st) == 0 && (st.st_mode & 0077) != 0) {
    KTUNE_LOG(warn) << cfg.db << " is readable or writable by other users (mode "
                    << std::oct << (st.st_mode & 0777) << std::dec
                    << "): every job and result in it is visible to them; chmod 600 it";
  }
  m_devices = std::make_unique<DeviceRegistry>();
  if (auto stored = m_store->list_devices()) {
    for (const auto& device : *stored) m_devices->remember(device);
  } else {
    KTUNE_LOG(warn) << "cannot list the stored devices: " << stored.error().message;
  }
  return {};
}

Result<void> Server::start_services() {
  const DaemonConfig& cfg = m_config;
  if (::access(cfg.worker_path.c_str(), X_OK) != 0) {
    KTUNE_LOG(warn) << "worker executable " << cfg.worker_path << " is not runnable ("
                    << std::strerror(errno) << "); tune jobs will fail until it is";
  }
  // Signals are caught before the first child starts: a worker that exits at once (the device
  // probe's, when workers cannot run) must not send its SIGCHLD before anyone listens, or it is
  // never reaped and the probe, and with it the start, waits for good.
  boost::system::error_code ec;
  for (int sig : {SIGTERM, SIGINT, SIGCHLD}) {
    m_signals.add(sig, ec);
    if (ec) return io_error("cannot handle signal " + std::to_string(sig) + ": " + ec.message());
  }
  m_workers = std::make_unique<WorkerPool>(
      m_io, m_children, cfg.worker_path, static_cast<std::size_t>(cfg.compile_workers),
      seconds_to_ms(cfg.worker_idle_s), cfg.worker_memory_mb, cfg.lock_dir);
  m_workers->set_compile_memory_mb(cfg.compile_memory_mb);
  m_scheduler = std::make_unique<Scheduler>(
      m_io, std::as_const(*m_store), *m_writer, *m_workers,
      SchedulerSettings{cfg.cache_dir, cfg.measure,
                        static_cast<std::size_t>(cfg.compile_workers),
                        static_cast<std::size_t>(cfg.compile_ahead),
                        static_cast<std::size_t>(cfg.search_batch), cfg.compile_timeout_s,
                        cfg.bench_timeout_s, cfg.bench_timeout_min_s, cfg.bench_timeout_max_s,
                        cfg.serial});
  m_handler = std::make_unique<RequestHandler>(HandlerContext{
      m_io, cfg, std::as_const(*m_store), *m_writer, *m_scheduler, *m_workers, *m_devices,
      [this] { return m_sessions.size(); },
      [this] { asio::post(m_io, [this] { stop(); }); }, m_started,
      [this] { return m_metrics ? m_metrics->address() : std::string(); }});

  const auto start = std::chrono::steady_clock::now();
  for (const auto& broken : m_handler->load_kernels()) {
    KTUNE_LOG(warn) << "kernel family not loaded: " << broken.error.message;
  }
  for (const auto& problem : m_handler->kernel_dir_problems()) KTUNE_LOG(warn) << problem;
  KTUNE_LOG(debug) << "scanned kernel directories in " << log::elapsed_ms(start) << " ms";
  if (cfg.table_dirs.empty()) return {};
  auto watch = TableWatch::create(
      m_io, cfg.table_dirs,
      [this, policy = cfg.table_policy](std::string text, std::string path, TableWatch::Done done) {
        m_handler->imports().import_text(std::move(text), std::move(path), policy, std::move(done));
      });
  if (!watch) return watch.error();
  m_table_watch = std::move(*watch);
  return {};
}

void Server::serve_once_probed(std::vector<JobPlan> resumed) {
  // The devices are learnt from a worker (ktuned never inspects one itself). Until they are
  // known nothing is accepted (connections wait in the listen backlog) and nothing resumes, so
  // that no request and no resumed CUDA job sees a half-known machine.
  const auto start = std::chrono::steady_clock::now();
  m_devices->probe(
      *m_workers,
      [this, start, plans = std::make_shared<std::vector<JobPlan>>(std::move(resumed))]() mutable {
        KTUNE_LOG(info) << "devices probed in " << log::elapsed_ms(start) << " ms";
        for (auto& plan : *plans) m_scheduler->enqueue(std::move(plan));
        plans->clear();
        if (m_stopping) return;
        if (m_table_watch) m_table_watch->start();
        accept_next();
        announce_ready();
      });
}

Result<void> Server::serve_metrics() {
  if (m_config.metrics.empty()) return {};
  auto metrics = MetricsHttp::start(m_io, m_config.metrics, [this] {
    const double uptime_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - m_started).count();
    return render_metrics(DaemonView{*m_scheduler, *m_workers, *m_writer,
                                     m_handler->lookup_counters(), uptime_s, m_sessions.size()});
  });
  if (!metrics) return metrics.error();
  m_metrics = std::move(*metrics);
  const std::string& at = m_metrics->address();
  KTUNE_LOG(info) << "metrics at "
                  << (at.front() == '/' ? "GET /metrics on socket " + at
                                        : "http://" + at + "/metrics");
  return {};
}

namespace {

// systemd socket activation (sd_listen_fds(3)): LISTEN_PID names this process and LISTEN_FDS is
// at least 1, so fd 3 is a listening socket systemd created (configs/deploy/ktuned.socket).
// Returns that fd, or -1 when ktuned was not started that way. The variables are cleared so
// that workers never see them.
int activated_socket() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  const bool ours = pid != nullptr && fds != nullptr && std::to_string(::getpid()) == pid &&
                    std::atoi(fds) >= 1;
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  return ours ? 3 : -1;
}

} // namespace

Result<void> Server::listen() {
  const std::string& path = m_config.socket;
  if (const int fd = activated_socket(); fd >= 0) {
    boost::system::error_code ec;
    m_acceptor.assign(asio::local::stream_protocol(), fd, ec);
    if (ec) return io_error("cannot use the socket systemd passed (fd 3): " + ec.message());
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    // systemd owns the socket file: never unlinked by ktuned (m_listening stays false).
    KTUNE_LOG(info) << "listening on the socket systemd passed (fd 3); --socket is not used";
    return {};
  }
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return io_error("socket path " + path + " is " + std::to_string(path.size()) +
                    " bytes; Unix sockets allow at most " +
                    std::to_string(sizeof(sockaddr_un::sun_path) - 1));
  }
  if (auto r = check_socket_dir(parent_dir(path)); !r) return r.error();
  // Holding the instance lock, any socket file left here is a dead daemon's, unless another
  // user put it there: then it is not ours to remove, and a client could be talking to them.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (st.st_uid != ::geteuid()) {
      return io_error("socket path " + path + " exists and is owned by " + user_text(st.st_uid) +
                      ", not by ktuned's " + user_text(::geteuid()) +
                      "; refusing to use or remove it");
    }
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
  // Only ktuned's user can connect, unless [access] lets others in: then every user may reach
  // the socket and each connection's credentials decide (admit).
  const bool shared = !m_config.allow_uids.empty() || !m_config.allow_gids.empty();
  if (::chmod(path.c_str(), shared ? 0666 : 0600) != 0) {
    return io_error("cannot set the mode of " + path + ": " + std::strerror(errno));
  }
  m_acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return io_error("cannot listen on " + path + ": " + ec.message());
  return {};
}

std::vector<JobPlan> Server::resume_jobs() {
  std::vector<JobPlan> plans;
  std::vector<JobRecord> leftovers;
  for (JobState state : {JobState::running, JobState::interrupted, JobState::queued}) {
    auto jobs = m_store->jobs_in_state(state);
    if (!jobs) {
      KTUNE_LOG(warn) << "cannot list " << to_string(state) << " jobs: " << jobs.error().message;
      continue;
    }
    leftovers.insert(leftovers.end(), jobs->begin(), jobs->end());
  }
  if (leftovers.empty()) return plans;
  std::sort(leftovers.begin(), leftovers.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.id < b.id; });
  KernelRegistry registry;
  registry.load(m_handler->kernel_dirs());  // configured and added (daemon/kernel_dirs)
  const Planner planner(std::as_const(*m_store), *m_writer);
  const auto set_state = [this](std::int64_t id, JobState state, const std::string& reason) {
    return m_writer->write_now("job " + std::to_string(id) + "'s state", [&](Store& store) {
      return store.set_job_state(id, state, reason);
    });
  };
  for (const auto& job : leftovers) {
    if (job.strategy == k_compile_check_strategy) {
      // Its client waited on the connection that is gone: nobody to answer.
      if (auto r = set_state(job.id, JobState::interrupted,
                             "ktuned stopped; a compile check is not resumed");
          !r) {
        KTUNE_LOG(warn) << "job " << job.id << ": " << r.error().message;
      }
      continue;
    }
    auto plan = planner.resume(registry, job);
    if (!plan) {
      KTUNE_LOG(warn) << "job " << job.id << " (" << to_string(job.state)
                      << ") cannot resume: " << plan.error().message;
      if (auto r = set_state(job.id, JobState::failed, "cannot resume: " + plan.error().message);
          !r) {
        KTUNE_LOG(warn) << "job " << job.id << ": " << r.error().message;
      }
      continue;
    }
    KTUNE_LOG(info) << "job " << job.id << " was " << to_string(job.state) << " when ktuned "
                    << "stopped; resuming (" << plan->existing.size() << " result(s) kept)";
    if (auto r = set_state(job.id, JobState::queued, ""); !r) {
      KTUNE_LOG(warn) << "job " << job.id << ": " << r.error().message;
      continue;
    }
    plans.push_back(std::move(*plan));
  }
  return plans;
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

void Server::watch_database() {
  m_identity_timer.expires_after(k_identity_period);
  m_identity_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec || m_stopping) return;
    auto checked = m_db_file->check();
    if (!checked && !m_database_lost) {
      m_database_lost = true;
      if (m_db_file->deleted()) rescue_database();
      KTUNE_LOG(error) << m_db_file->check().error().message;
      // A write that meets the check stalls the writer: stats and every job say why, new tunes
      // are refused (store_busy) and results go to the spill journal.
      m_writer->submit("a check of the database file", [](Store& store) {
        return store.in_transaction([] { return Result<void>{}; });
      });
    } else if (checked && m_database_lost) {
      m_database_lost = false;
      KTUNE_LOG(info) << "the database " << m_db_file->path() << " is back at its path";
    }
    watch_database();
  });
}

void Server::rescue_database() {
  const std::string& db = m_db_file->path();
  std::string path = db + ".rescued";
  for (int n = 2; ::access(path.c_str(), F_OK) == 0; ++n) path = db + ".rescued." + std::to_string(n);
  const auto start = std::chrono::steady_clock::now();
  if (auto saved = m_store->backup_to(path); !saved) {
    KTUNE_LOG(error) << "the database " << db << " was deleted, and its content could not be "
                     << "saved from ktuned's open connection: " << saved.error().message;
    return;
  }
  m_db_file->set_rescued(path);
  KTUNE_LOG(warn) << "the database " << db << " was deleted while open; saved its content in "
                  << path << " in " << log::elapsed_ms(start) << " ms";
}

int Server::run() {
  // Accepting starts when the device probe answers (create()).
  wait_signal();
  m_last_busy = std::chrono::steady_clock::now();
  watch_idle();
  watch_database();
  KTUNE_LOG(info) << "ktuned " << KTUNE_VERSION << " listening on " << m_config.socket << " (pid "
                  << ::getpid() << ", " << m_config.compile_workers << " compile worker(s), "
                  << "kernel dirs: " << m_config.kernel_dirs.size() << ")";
  m_io.run();

  if (m_writer) m_writer->flush();
  m_handler.reset();
  m_scheduler.reset();
  m_writer.reset();
  m_workers.reset();
  m_store.reset();
  m_db_file.reset();
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
      if ((ec.value() == EMFILE || ec.value() == ENFILE) && refuse_waiting()) {
        accept_next();
        return;
      }
      // Anything else (or not even the reserve could answer): try again shortly instead of
      // spinning.
      ++m_accept_failures;
      if (const auto now = std::chrono::steady_clock::now();
          now - m_accept_logged >= DescriptorReserve::k_log_every) {
        m_accept_logged = now;
        KTUNE_LOG(warn) << "accept failed: " << ec.message() << " (" << m_accept_failures
                        << " time(s) since the last report; retried every "
                        << k_accept_retry.count() << " ms)";
        m_accept_failures = 0;
      }
      m_accept_retry.expires_after(k_accept_retry);
      m_accept_retry.async_wait([this](const boost::system::error_code& timer_ec) {
        if (!timer_ec && !m_stopping) accept_next();
      });
      return;
    }
    admit(std::move(socket));
    accept_next();
  });
}

bool Server::refuse_waiting() {
  const std::string line =
      protocol::encode_error(nullptr, ErrorCode::too_many_connections,
                             "ktuned has no file descriptor left for another connection (" +
                                 std::to_string(m_sessions.size()) +
                                 " open; RLIMIT_NOFILE); try again later") +
      "\n";
  bool any = false;
  while (m_reserve.refuse_one(m_acceptor.native_handle(), line)) any = true;
  if (std::uint64_t count = 0; m_reserve.should_log(count)) {
    KTUNE_LOG(warn) << "out of file descriptors: refused " << count << " connection(s) at once with "
                    << "too_many_connections (" << m_sessions.size() << " open); logged at most "
                    << "every " << DescriptorReserve::k_log_every.count() << " s";
  }
  return any;
}

void Server::admit(asio::local::stream_protocol::socket socket) {
  const int fd = socket.native_handle();
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  PeerCredentials peer;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    KTUNE_LOG(warn) << "refused a connection whose credentials cannot be read: "
                    << std::strerror(errno);
    return; // closed with the socket
  }
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  if (auto why = access_refusal(fd, peer)) {
    KTUNE_LOG(warn) << "refused a connection from uid " << peer.uid << " (pid " << peer.pid
                    << "): " << *why;
    send_and_close(fd, ErrorCode::permission_denied, *why);
    return;
  }
  if (m_sessions.size() >= m_config.max_connections) {
    KTUNE_LOG(warn) << "refused a connection from uid " << peer.uid << " (pid " << peer.pid
                    << "): " << m_sessions.size() << " connections open, the limit";
    send_and_close(fd, ErrorCode::too_many_connections,
                   "ktuned serves at most " + std::to_string(m_config.max_connections) +
                       " connections at once ([limits].max_connections) and all are in use; "
                       "try again later");
    return;
  }
  const SessionLimits limits{m_config.max_message_bytes, seconds_to_ms(m_config.message_timeout_s),
                             seconds_to_ms(m_config.connection_idle_s)};
  m_sessions.insert(start_session(
      std::move(socket), limits, peer,
      [this](const std::shared_ptr<Client>& c, std::string_view line) { dispatch(c, line); },
      [this](const std::shared_ptr<Client>& c) { m_sessions.erase(c); }));
}

std::optional<std::string> Server::access_refusal(int fd, const PeerCredentials& peer) const {
  const uid_t self = ::geteuid();
  if (peer.uid == self) return std::nullopt;
  if (peer.uid == 0 && m_config.allow_root) return std::nullopt;
  const auto listed = [](const std::vector<std::int64_t>& ids, std::int64_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  if (listed(m_config.allow_uids, peer.uid)) return std::nullopt;
  if (!m_config.allow_gids.empty()) {
    if (listed(m_config.allow_gids, peer.gid)) return std::nullopt;
    // The peer's supplementary groups, as they were when it connected.
    std::vector<gid_t> groups(64);
    for (;;) {
      socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
        groups.resize(bytes / sizeof(gid_t));
        break;
      }
      if (errno != ERANGE || groups.size() >= 65536) {
        groups.clear();
        break;
      }
      groups.resize(std::max<std::size_t>(groups.size() * 2, bytes / sizeof(gid_t)));
    }
    for (const gid_t gid : groups) {
      if (listed(m_config.allow_gids, gid)) return std::nullopt;
    }
  }
  std::string why = "uid " + std::to_string(peer.uid) + " (gid " + std::to_string(peer.gid) +
                    ") may not use this ktuned: it serves uid " + std::to_string(self);
  if (!m_config.allow_uids.empty() || !m_config.allow_gids.empty()) {
    why += " and the uids and gids in [access].allow_uids and allow_gids";
  }
  if (peer.uid == 0) why += " ([access].allow_root is false)";
  return why;
}

void Server::send_and_close(int fd, ErrorCode code, const std::string& message) {
  // One short line on a fresh connection fits the socket buffer: never blocks.
  const std::string line = protocol::encode_error(nullptr, code, message) + "\n";
  [[maybe_unused]] const ssize_t n =
      ::send(fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_RDWR);
  // The socket object closes the descriptor when it goes out of scope.
}

void Server::dispatch(const std::shared_ptr<Client>& client, std::string_view line) {
  try {
    m_handler->handle(client, line);
  } catch (const std::exception& e) {
    // A defect, not a bad request: answer it and keep serving everyone else.
    KTUNE_LOG(error) << "request failed with an exception: " << e.what();
    client->send(protocol::encode_error(protocol::decode_id(line), ErrorCode::internal,
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
  if (m_table_watch) m_table_watch->stop();
  if (m_metrics) m_metrics->stop();
  boost::system::error_code ignored;
  m_acceptor.close(ignored);
  m_accept_retry.cancel();
  m_idle_timer.cancel();
  m_identity_timer.cancel();
  // Jobs first (the candidate in flight may finish, bounded by stop_grace_s), so that clients
  // waiting on one get its final state before their connection closes.
  m_scheduler->stop(seconds_to_ms(m_config.stop_grace_s), [this] {
    for (const auto& client : std::set(m_sessions)) client->close_after_flush();
    m_workers->shutdown([this] { finish_stop(); });
  });
}

void Server::finish_stop() {
  const auto start = std::chrono::steady_clock::now();
  if (auto r = m_writer->checkpoint_wal(); !r) {
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
