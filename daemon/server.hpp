#pragma once
// Server: ktuned's top level, in the shape of the Asio examples. It owns the io_context (the
// only thread that touches sockets, workers, the scheduler and the store), the signal_set
// (SIGTERM and SIGINT stop gracefully; SIGCHLD reaps workers), the Unix-socket acceptor and the
// registry of client sessions.
//
// Lifecycle: create() does everything that can fail up front (instance lock, directories, store,
// kernel scan, CPU detection, listening socket), asks a worker for the CUDA devices (a bench lane
// each; the answer arrives while it serves), and queues again the jobs a previous ktuned
// left queued, running (kill -9) or interrupted: they resume without re-running any config that
// already has a row. Once run() reports readiness the daemon serves. A graceful stop (signal,
// `shutdown` op, or `idle_s` without clients and jobs) stops accepting, lets the requests in
// flight finish for up to `stop_grace_s`, marks unfinished jobs interrupted, closes sessions
// after their queued replies, stops the workers, checkpoints the store and removes the socket
// and pid file; run() then returns 0.
#include "core/device.hpp"
#include "core/result.hpp"
#include "daemon/config.hpp"
#include "daemon/database_file.hpp"
#include "daemon/descriptors.hpp"
#include "daemon/devices.hpp"
#include "daemon/handlers.hpp"
#include "daemon/instance.hpp"
#include "daemon/metrics_http.hpp"
#include "daemon/scheduler.hpp"
#include "daemon/store_writer.hpp"
#include "daemon/client.hpp"
#include "daemon/table_watch.hpp"
#include "daemon/worker_pool.hpp"
#include "db/store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace ktune::daemon {

class Server {
public:
  // Errors: already_running, unsafe_path (a directory or file another user could have planted),
  // io_error (directories, socket), database_in_use, database_missing, db_corrupt, db_error,
  // config_error.
  [[nodiscard]] static Result<std::unique_ptr<Server>> create(DaemonConfig config);

  // Announces readiness (--ready-fd), serves until a graceful stop, returns the exit code.
  [[nodiscard]] int run();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();

private:
  explicit Server(DaemonConfig config);
  // The steps of create(), in order. The instance lock, the checked directories and the
  // database file's identity.
  [[nodiscard]] Result<void> claim_files();
  // The store opened and checked, the store writer (the spill journal replayed), the devices
  // the store knows.
  [[nodiscard]] Result<void> open_store();
  // Signals, the worker pool, the scheduler, the request handler and its services, the kernel
  // scan, the watched table directories.
  [[nodiscard]] Result<void> start_services();
  // Probes the devices; once they are known queues the resumed jobs and starts accepting.
  void serve_once_probed(std::vector<JobPlan> resumed);
  // GET /metrics ([daemon].metrics), when configured.
  [[nodiscard]] Result<void> serve_metrics();
  [[nodiscard]] Result<void> listen();
  void accept_next();
  // Checks the peer's credentials and the connection limit, then starts a session or refuses
  // the connection with one error line.
  void admit(asio::local::stream_protocol::socket socket);
  // Out of descriptors: every connection waiting in the backlog is accepted on the reserve, told
  // too_many_connections and closed (daemon/descriptors.hpp). False when none could be.
  bool refuse_waiting();
  // Why `peer` may not connect ([access]); nullopt when it may.
  [[nodiscard]] std::optional<std::string> access_refusal(int fd, const PeerCredentials& peer) const;
  static void send_and_close(int fd, ErrorCode code, const std::string& message);
  void wait_signal();
  void dispatch(const std::shared_ptr<Client>& client, std::string_view line);
  void announce_ready();
  void stop();
  void finish_stop();
  // Plans of the jobs a previous ktuned left queued, running or interrupted (state set back to
  // queued); jobs that cannot resume are marked failed.
  [[nodiscard]] std::vector<JobPlan> resume_jobs();
  void watch_idle();
  // Every k_identity_period: whether the database path still names the file opened; the first
  // failure is logged and stalls the store's writes (daemon/database_file.hpp), a return too.
  void watch_database();
  // Saves what the open connection still sees of a deleted database to <db>.rescued (SQLite's
  // online backup), so that its history survives; the database's messages name the copy.
  void rescue_database();

  DaemonConfig m_config;
  std::optional<InstanceLock> m_lock;          // released last
  std::optional<DatabaseFile> m_db_file;      // one daemon per database file; closed after m_store
  asio::io_context m_io;
  asio::signal_set m_signals;
  asio::local::stream_protocol::acceptor m_acceptor;
  asio::steady_timer m_accept_retry;
  asio::steady_timer m_idle_timer;
  asio::steady_timer m_identity_timer;         // checks that the database is still at its path
  bool m_database_lost = false;
  std::chrono::steady_clock::time_point m_last_busy;
  std::optional<Store> m_store;                // read by all; written only through m_writer
  std::unique_ptr<StoreWriter> m_writer;       // the one store writer, handed to whoever writes
  std::unique_ptr<DeviceRegistry> m_devices;
  ChildWatch m_children;
  std::unique_ptr<WorkerPool> m_workers;
  std::unique_ptr<Scheduler> m_scheduler;
  std::unique_ptr<RequestHandler> m_handler;
  std::unique_ptr<TableWatch> m_table_watch;   // [daemon].table_dirs; null when none
  std::unique_ptr<MetricsHttp> m_metrics;      // [daemon].metrics; null when off
  std::set<std::shared_ptr<Client>> m_sessions;
  std::chrono::steady_clock::time_point m_started;
  DescriptorReserve m_reserve;                 // answers connections when no descriptor is left
  std::uint64_t m_accept_failures = 0;         // since the last report in the log
  std::chrono::steady_clock::time_point m_accept_logged{};
  bool m_listening = false;                   // the socket file is ours to remove
  bool m_stopping = false;
};

// Runs ktuned with `config`: Server::create, then run. Returns the process exit code.
[[nodiscard]] int run_daemon(DaemonConfig config);

} // namespace ktune::daemon
