#include "daemon/worker_pool.hpp"

#include "daemon/log.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace ktune::daemon {

namespace {
constexpr auto k_term_grace = std::chrono::seconds(1);
}

WorkerPool::WorkerPool(asio::io_context& io, ChildWatch& children, std::string worker_path,
                       std::size_t compile_workers, std::chrono::milliseconds worker_idle,
                       std::int64_t memory_mb)
    : m_io(io), m_children(children), m_worker_path(std::move(worker_path)),
      m_compile_limit(std::max<std::size_t>(1, compile_workers)), m_worker_idle(worker_idle),
      m_memory_mb(memory_mb) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) return;
  for (int cpu = CPU_SETSIZE - 1; cpu >= 0; --cpu) {
    if (CPU_ISSET(cpu, &allowed)) {
      m_bench_cpu = cpu;
      break;
    }
  }
  CPU_CLR(*m_bench_cpu, &allowed);
  m_compile_cpus = allowed;
  KTUNE_LOG(debug) << "bench worker runs on cpu " << *m_bench_cpu
                   << "; compile workers on the other " << CPU_COUNT(&allowed);
}

Result<std::shared_ptr<WorkerProcess>> WorkerPool::start(WorkerRole role) {
  std::vector<std::string> extra_args;
  if (role == WorkerRole::bench && m_bench_cpu) extra_args = {"--cpu", std::to_string(*m_bench_cpu)};
  if (m_memory_mb > 0) {
    extra_args.push_back("--memory-mb");
    extra_args.push_back(std::to_string(m_memory_mb));
  }
  auto worker = WorkerProcess::spawn(m_io, m_children, m_worker_path, role, extra_args,
                                     [this](WorkerProcess& w) { on_worker_exit(w); },
                                     m_worker_idle);
  if (!worker) return worker.error();
  if (role == WorkerRole::compile && m_compile_cpus &&
      ::sched_setaffinity((*worker)->pid(), sizeof *m_compile_cpus, &*m_compile_cpus) != 0) {
    // Only placement is lost: compiles may then share the bench worker's CPU.
    KTUNE_LOG(debug) << "cannot set the affinity of compile worker " << (*worker)->pid() << ": "
                     << std::strerror(errno);
  }
  m_workers.push_back(*worker);
  return *worker;
}

std::size_t WorkerPool::limit(WorkerRole role) const {
  return role == WorkerRole::compile ? m_compile_limit : 1;
}

std::size_t WorkerPool::alive(WorkerRole role) const {
  return static_cast<std::size_t>(std::count_if(m_workers.begin(), m_workers.end(),
                                                [role](const auto& w) { return w->role() == role; }));
}

Result<std::shared_ptr<WorkerProcess>> WorkerPool::idle_worker(WorkerRole role) {
  if (m_shutting_down) return make_error(k_spawn_error, "ktuned is shutting down");
  for (const auto& worker : m_workers) {
    if (worker->role() == role && worker->idle()) return worker;
  }
  if (alive(role) >= limit(role)) return std::shared_ptr<WorkerProcess>();
  return start(role);
}

void WorkerPool::on_worker_exit(WorkerProcess& worker) {
  std::erase_if(m_workers, [&worker](const auto& w) { return w.get() == &worker; });
  if (m_shutting_down && m_workers.empty()) finish_shutdown();
}

void WorkerPool::shutdown(std::function<void()> on_done) {
  m_shutting_down = true;
  m_on_shutdown = std::move(on_done);
  if (m_workers.empty()) {
    finish_shutdown();
    return;
  }
  KTUNE_LOG(info) << "stopping " << m_workers.size() << " worker(s)";
  // Copy: terminate() never calls back synchronously, but keep the loop independent of that.
  for (const auto& worker : std::vector(m_workers)) worker->terminate();
  m_shutdown_timer = std::make_unique<asio::steady_timer>(m_io, k_term_grace);
  m_shutdown_timer->async_wait([this](const boost::system::error_code& ec) {
    if (ec || m_workers.empty()) return;
    KTUNE_LOG(warn) << m_workers.size() << " worker(s) still running after SIGTERM; sending SIGKILL";
    for (const auto& worker : m_workers) worker->kill_group();
    m_shutdown_timer->expires_after(k_term_grace);
    m_shutdown_timer->async_wait([this](const boost::system::error_code& ec2) {
      if (ec2 || m_workers.empty()) return;
      KTUNE_LOG(error) << m_workers.size() << " worker(s) did not exit after SIGKILL";
      m_workers.clear();
      finish_shutdown();
    });
  });
}

void WorkerPool::finish_shutdown() {
  if (m_shutdown_timer) m_shutdown_timer->cancel();
  if (auto on_done = std::move(m_on_shutdown)) {
    m_on_shutdown = nullptr;
    on_done();
  }
}

} // namespace ktune::daemon
