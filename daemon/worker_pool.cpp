#include "daemon/worker_pool.hpp"

#include "core/protocol.hpp"
#include "core/shared_lock_file.hpp"
#include "daemon/log.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>

namespace ktune::daemon {

namespace {

constexpr auto k_term_grace = std::chrono::seconds(1);

// A ktune-worker process as a pool endpoint. It is stopped only while a living stop guard holds
// its group (`guard` is null unless the guard took it).
class ProcessEndpoint final : public WorkerEndpoint {
public:
  ProcessEndpoint(std::shared_ptr<WorkerProcess> process, std::shared_ptr<StopGuard> guard)
      : m_process(std::move(process)), m_guard(std::move(guard)) {}
  void request(std::string_view op, nlohmann::json job, WorkerProcess::ReplyHandler on_reply,
               std::chrono::milliseconds deadline) override {
    m_process->request(op, std::move(job), std::move(on_reply), deadline);
  }
  void set_owner(std::string owner) override { m_process->set_owner(std::move(owner)); }
  [[nodiscard]] bool idle() const override { return m_process->idle(); }
  [[nodiscard]] const std::string& stderr_tail() const override {
    return m_process->stderr_tail();
  }
  void terminate() override { m_process->terminate(); }
  void kill_group() override { m_process->kill_group(); }
  void pause() override {
    if (m_guard && m_guard->alive()) m_process->pause();
  }
  void resume() override { m_process->resume(); }
  [[nodiscard]] std::chrono::milliseconds paused_time() const override {
    return m_process->paused_time();
  }
  [[nodiscard]] pid_t pid() const { return m_process->pid(); }
  bool guard_with(const std::shared_ptr<StopGuard>& guard) override {
    if (m_guard && m_guard->alive()) return true;
    if (!guard || !guard->hold(m_process->pid())) return false;
    m_guard = guard;
    return true;
  }

private:
  std::shared_ptr<WorkerProcess> m_process;
  std::shared_ptr<StopGuard> m_guard;
};

bool is_cuda_lane(const std::string& lane) { return lane.rfind("cuda", 0) == 0; }

// CUDA_VISIBLE_DEVICES for the worker of lane "cuda:N": the N-th device this daemon sees, so the
// worker sees that one GPU only (as its device 0). When the daemon itself runs with a
// CUDA_VISIBLE_DEVICES list (a container, a Slurm allocation), N indexes that list.
std::string visible_device(const std::string& lane) {
  const std::string ordinal = lane.size() > 5 ? lane.substr(5) : "0";
  const char* inherited = std::getenv("CUDA_VISIBLE_DEVICES");
  if (inherited == nullptr || *inherited == '\0') return ordinal;
  std::vector<std::string> entries;
  std::string entry;
  for (const char* c = inherited;; ++c) {
    if (*c == ',' || *c == '\0') {
      entries.push_back(entry);
      entry.clear();
      if (*c == '\0') break;
    } else {
      entry += *c;
    }
  }
  const auto n = static_cast<std::size_t>(std::stoul(ordinal));
  return n < entries.size() ? entries[n] : ordinal;
}

} // namespace

WorkerPool::WorkerPool(asio::io_context& io, ChildWatch& children, std::string worker_path,
                       std::size_t compile_workers, std::chrono::milliseconds worker_idle,
                       std::int64_t memory_mb, std::string lock_dir)
    : m_io(io), m_children(&children), m_worker_path(std::move(worker_path)),
      m_compile_limit(std::max<std::size_t>(1, compile_workers)), m_worker_idle(worker_idle),
      m_memory_mb(memory_mb), m_lock_dir(std::move(lock_dir)) {
  m_spawner = [this](const WorkerSlot& slot, std::function<void()> on_exit) {
    return spawn_process(slot, std::move(on_exit));
  };
  m_queues[""].limit = m_compile_limit;
  add_lane("cpu");
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) m_lane_cpus.push_back(cpu);
  }
  if (CPU_COUNT(&allowed) < 2) return;
  // The last allowed CPU that no other ktuned on this machine has claimed; the last one when all
  // are (then the measurement lock keeps the instances from measuring at once).
  for (int cpu = CPU_SETSIZE - 1; cpu >= 0; --cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (!m_bench_cpu) m_bench_cpu = cpu;
    if (m_lock_dir.empty()) break;
    const std::string claim = m_lock_dir + "/ktune-cpu" + std::to_string(cpu) + ".claim";
    auto fd = open_shared_lock_file(claim);
    if (!fd) {
      KTUNE_LOG(warn) << "cannot claim cpu " << cpu << ": " << fd.error().message;
      m_claim_problem = fd.error().message;
      continue;
    }
    if (::flock(fd->get(), LOCK_EX | LOCK_NB) == 0) {
      m_bench_cpu = cpu;
      m_cpu_claim = std::move(fd).value();
      break;
    }
    if (errno != EWOULDBLOCK) {
      m_claim_problem = "cannot lock " + claim + ": " + std::strerror(errno);
      KTUNE_LOG(warn) << "cannot claim cpu " << cpu << ": " << m_claim_problem;
    }
  }
  if (!m_lock_dir.empty() && !m_cpu_claim.valid()) {
    if (m_claim_problem.empty()) {
      KTUNE_LOG(warn) << "every CPU is claimed by another ktuned on this machine; the cpu lane "
                         "shares cpu " << *m_bench_cpu << " and takes turns measuring";
    } else {
      KTUNE_LOG(warn) << "no CPU claim could be taken; the cpu lane measures on cpu "
                      << *m_bench_cpu << ", perhaps beside another ktuned (" << m_claim_problem
                      << ")";
    }
  }
  CPU_CLR(*m_bench_cpu, &allowed);
  m_compile_cpus = allowed;
  std::erase(m_lane_cpus, *m_bench_cpu);
  m_lane_cpus.insert(m_lane_cpus.begin(), *m_bench_cpu);
  KTUNE_LOG(debug) << "cpu bench worker runs on cpu " << *m_bench_cpu
                   << "; compile workers on the other " << CPU_COUNT(&allowed);
}

WorkerPool::WorkerPool(asio::io_context& io, WorkerSpawner spawner, std::size_t compile_workers,
                       std::optional<int> bench_cpu)
    : m_io(io), m_spawner(std::move(spawner)),
      m_compile_limit(std::max<std::size_t>(1, compile_workers)), m_bench_cpu(bench_cpu) {
  m_queues[""].limit = m_compile_limit;
  add_lane("cpu");
}

void WorkerPool::add_lane(const std::string& device, std::vector<std::string> args,
                          std::string uuid) {
  m_lane_times.try_emplace(device, LaneTime{Clock::now(), {}});
  Queue& queue = m_queues[device];
  queue.limit = 1;
  queue.args = std::move(args);
  queue.uuid = std::move(uuid);
}

std::string WorkerPool::measure_lock_path(const std::string& lane) const {
  if (m_lock_dir.empty()) return {};
  const std::string device = is_cuda_lane(lane) ? measured_board(lane)
                             : m_bench_cpu      ? "cpu" + std::to_string(*m_bench_cpu)
                                                : std::string("cpu");
  return m_lock_dir + "/ktune-measure-" + device + ".lock";
}

void WorkerPool::note_unlocked(const std::string& lane, const std::string& why) {
  Unlocked& state = m_unlocked[lane];
  ++state.measurements;
  if (state.why == why) return;
  state.why = why;
  KTUNE_LOG(warn) << "the " << lane << " lane measures without its machine-wide lock, so another "
                     "ktuned may measure on the device at the same time: " << why;
}

WorkerPool::Unlocked WorkerPool::unlocked(const std::string& lane) const {
  const auto it = m_unlocked.find(lane);
  return it == m_unlocked.end() ? Unlocked{} : it->second;
}

std::string WorkerPool::measured_board(const std::string& lane) const {
  const auto queue = m_queues.find(lane);
  if (queue != m_queues.end() && !queue->second.uuid.empty()) return queue->second.uuid;
  return "cuda" + visible_device(lane);
}

bool WorkerPool::has_lane(const std::string& device) const {
  return !device.empty() && m_queues.count(device) > 0;
}

std::vector<std::string> WorkerPool::lanes() const {
  std::vector<std::string> out;
  for (const auto& [lane, queue] : m_queues) {
    if (!lane.empty()) out.push_back(lane);
  }
  return out;
}

Result<std::shared_ptr<WorkerEndpoint>> WorkerPool::spawn_process(const WorkerSlot& slot,
                                                                   std::function<void()> on_exit) {
  std::vector<std::string> extra_args = slot.args;
  const bool cpu_bench = slot.role == WorkerRole::bench && slot.lane == "cpu";
  if (cpu_bench && m_bench_cpu) {
    extra_args.insert(extra_args.end(), {"--cpu", std::to_string(*m_bench_cpu)});
  }
  if (slot.role == WorkerRole::bench && !m_lock_dir.empty()) {
    extra_args.insert(extra_args.end(), {"--measure-lock", measure_lock_path(slot.lane)});
  }
  // CUDA reserves a large virtual range at cuInit: a CUDA lane's worker runs without RLIMIT_AS.
  std::int64_t memory_mb = m_memory_mb;
  if (slot.role == WorkerRole::compile && m_compile_memory_mb > 0) {
    memory_mb = memory_mb > 0 ? std::min(memory_mb, m_compile_memory_mb) : m_compile_memory_mb;
  }
  if (memory_mb > 0 && !is_cuda_lane(slot.lane)) {
    extra_args.insert(extra_args.end(), {"--memory-mb", std::to_string(memory_mb)});
  }
  std::vector<std::string> env;
  if (is_cuda_lane(slot.lane)) {
    env.push_back("CUDA_VISIBLE_DEVICES=" + visible_device(slot.lane));
    extra_args.insert(extra_args.end(), {"--device-name", slot.lane});
  }
  if (slot.borrowed) (void)stop_guard();
  auto worker = WorkerProcess::spawn(
      m_io, *m_children, m_worker_path, slot.role, extra_args,
      [this, compile = slot.role == WorkerRole::compile,
       on_exit = std::move(on_exit)](WorkerProcess& process) {
        if (compile && m_stop_guard) m_stop_guard->release(process.pid());
        on_exit();
      },
      m_worker_idle, env);
  if (!worker) return worker.error();
  // A borrowed worker is stopped while the cpu lane measures, so the guard takes its group first.
  std::shared_ptr<StopGuard> guard;
  if (slot.borrowed && m_stop_guard && m_stop_guard->hold((*worker)->pid())) guard = m_stop_guard;
  cpu_set_t placement;
  CPU_ZERO(&placement);
  if (slot.borrowed && m_bench_cpu) {
    CPU_SET(*m_bench_cpu, &placement);
  } else if (m_compile_cpus) {
    placement = *m_compile_cpus;
  }
  // A borrowed compile yields its CPU to measurements even if it could not be stopped.
  if (slot.borrowed && ::setpriority(PRIO_PROCESS, static_cast<id_t>((*worker)->pid()), 19) != 0) {
    KTUNE_LOG(debug) << "cannot lower the priority of compile worker " << (*worker)->pid() << ": "
                     << std::strerror(errno);
  }
  if (slot.role == WorkerRole::compile && CPU_COUNT(&placement) > 0 &&
      ::sched_setaffinity((*worker)->pid(), sizeof placement, &placement) != 0) {
    // Only placement is lost: compiles may then share the bench worker's CPU.
    KTUNE_LOG(debug) << "cannot set the affinity of compile worker " << (*worker)->pid() << ": "
                     << std::strerror(errno);
  }
  return std::shared_ptr<WorkerEndpoint>(
      std::make_shared<ProcessEndpoint>(std::move(*worker), std::move(guard)));
}

std::shared_ptr<StopGuard> WorkerPool::stop_guard() {
  if (m_stop_guard || m_stop_guard_failed || m_children == nullptr) return m_stop_guard;
  auto started = StopGuard::start(m_worker_path, *m_children);
  if (started) {
    m_stop_guard = std::move(*started);
  } else {
    m_stop_guard_failed = true;
    KTUNE_LOG(warn) << started.error().message
                    << "; compiles are not stopped while the cpu lane measures";
  }
  return m_stop_guard;
}

namespace {

// The threads a cpu-lane request's candidate runs (1 when it says nothing; 0 = every CPU); of a
// bench_ab, its larger side's.
int requested_threads(const Work& work) {
  auto threads_of = [](const nlohmann::json& job) {
    const auto it = job.find("threads");
    return it != job.end() && it->is_number_integer() ? it->get<int>() : 1;
  };
  if (work.op == "bench") return threads_of(work.job);
  if (work.op != "bench_ab" || !work.job.contains("a") || !work.job.contains("b")) return 1;
  const int a = threads_of(work.job["a"]);
  const int b = threads_of(work.job["b"]);
  return a == 0 || b == 0 ? 0 : std::max(a, b);
}

} // namespace

bool WorkerPool::place_threads(Work& work) {
  const int threads = requested_threads(work);
  if (threads == 1 || m_lane_cpus.empty()) return false;
  const std::size_t wanted = threads == 0 ? m_lane_cpus.size() : static_cast<std::size_t>(threads);
  const std::size_t given = std::min(wanted, m_lane_cpus.size());
  const std::vector<int> cpus(m_lane_cpus.begin(), m_lane_cpus.begin() + static_cast<std::ptrdiff_t>(given));
  auto place = [&](nlohmann::json& job) {
    job["cpus"] = cpus;
    if (wanted > given) job["oversubscribed"] = true;
  };
  if (work.op == "bench_ab") {
    place(work.job["a"]);
    place(work.job["b"]);
  } else {
    place(work.job);
  }
  hold_compiles();
  return true;
}

void WorkerPool::hold_compiles() {
  m_compiles_held = true;
  const auto guard = stop_guard();
  for (const auto& worker : m_workers) {
    if (worker->role != WorkerRole::compile || !worker->busy) continue;
    if (!worker->endpoint->guard_with(guard)) {
      if (!m_hold_warned) {
        KTUNE_LOG(warn) << "a compile could not be stopped while a threaded candidate measures; "
                           "it shares the candidate's CPUs";
        m_hold_warned = true;
      }
      continue;
    }
    worker->endpoint->pause();
  }
}

void WorkerPool::release_compiles() {
  m_compiles_held = false;
  for (const auto& worker : m_workers) {
    // The borrowed compile goes on only once the cpu lane is idle (send's reply).
    if (worker->role == WorkerRole::compile && !worker->borrowed) worker->endpoint->resume();
  }
}

void WorkerPool::fail_later(Work work, Error error) {
  asio::post(m_io, [work = std::move(work), error = std::move(error)]() mutable {
    if (work.on_reply) work.on_reply(std::move(error), Delivery{});
  });
}

void WorkerPool::submit(const std::string& lane, Work work) {
  if (m_shutting_down) {
    return fail_later(std::move(work), make_error(ErrorCode::withdrawn, "ktuned is shutting down"));
  }
  const auto queue = m_queues.find(lane);
  if (queue == m_queues.end()) {
    return fail_later(std::move(work),
                      make_error(ErrorCode::no_device, "no bench lane for device '" + lane +
                                                                "' on this ktuned"));
  }
  queue->second.waiting.push_back(Waiting{std::move(work), ++m_seq});
  pump(lane);
}

std::size_t WorkerPool::withdraw(std::int64_t owner) {
  std::size_t count = 0;
  for (auto& [lane, queue] : m_queues) {
    auto mine = std::stable_partition(queue.waiting.begin(), queue.waiting.end(),
                                      [owner](const Waiting& w) { return w.work.owner != owner; });
    for (auto it = mine; it != queue.waiting.end(); ++it) {
      fail_later(std::move(it->work), make_error(ErrorCode::withdrawn, "withdrawn before a worker took it"));
      ++count;
    }
    queue.waiting.erase(mine, queue.waiting.end());
  }
  return count;
}

std::optional<std::size_t> WorkerPool::pick(const Queue& queue) const {
  std::optional<std::size_t> best;
  auto served = [this](std::int64_t owner) {
    const auto it = m_last_served.find(owner);
    return it == m_last_served.end() ? std::uint64_t{0} : it->second;
  };
  for (std::size_t i = 0; i < queue.waiting.size(); ++i) {
    if (!best) {
      best = i;
      continue;
    }
    const Work& a = queue.waiting[i].work;
    const Work& b = queue.waiting[*best].work;
    if (a.priority != b.priority) {
      if (a.priority > b.priority) best = i;
      continue;
    }
    if (a.owner != b.owner && served(a.owner) < served(b.owner)) best = i;
    // equal priority, same owner or served alike: the earlier submission (lower index) stays
  }
  return best;
}

void WorkerPool::pump(const std::string& lane) {
  if (m_shutting_down) return;
  if (lane.empty() && m_compiles_held) return;  // a threaded candidate measures; compiles wait
  auto it = m_queues.find(lane);
  if (it == m_queues.end()) return;
  Queue& queue = it->second;
  // A compile on the cpu lane's CPU stops while the lane has a request.
  if (lane == "cpu" && !it->second.waiting.empty()) pause_borrowed(true);
  while (!queue.waiting.empty()) {
    std::shared_ptr<Worker> free;
    std::shared_ptr<Worker> borrowed;
    std::size_t alive = 0;
    for (const auto& worker : m_workers) {
      if (worker->lane != lane) continue;
      if (worker->borrowed) {
        borrowed = worker;
        continue;
      }
      ++alive;
      if (!free && !worker->busy && worker->endpoint->idle()) free = worker;
    }
    const bool borrow = alive >= queue.limit && lane.empty() && may_borrow();
    if (!free && borrow && borrowed && !borrowed->busy && borrowed->endpoint->idle()) free = borrowed;
    if (!free) {
      if (alive >= queue.limit && (!borrow || borrowed)) return; // a reply or an exit pumps again
      WorkerSlot slot{lane.empty() ? WorkerRole::compile : WorkerRole::bench, lane, queue.args,
                      alive >= queue.limit};
      auto worker = std::make_shared<Worker>();
      worker->role = slot.role;
      worker->borrowed = slot.borrowed;
      worker->lane = lane;
      worker->slot = free_slot(lane);
      std::weak_ptr<Worker> weak = worker;
      auto endpoint = m_spawner(slot, [this, weak] {
        if (auto w = weak.lock()) on_worker_exit(w->endpoint.get());
      });
      if (!endpoint) {
        // Nothing can serve this lane now: the oldest waiting work learns why.
        KTUNE_LOG(error) << "cannot start a " << to_string(slot.role) << " worker"
                         << (lane.empty() ? "" : " for " + lane) << ": "
                         << endpoint.error().message;
        const auto index = *pick(queue);
        Work work = std::move(queue.waiting[index].work);
        queue.waiting.erase(queue.waiting.begin() + static_cast<std::ptrdiff_t>(index));
        fail_later(std::move(work), endpoint.error());
        continue;
      }
      worker->endpoint = std::move(*endpoint);
      m_workers.push_back(worker);
      free = worker;
      SlotTime& times = m_slot_times[{lane, worker->slot}];
      times.role = slot.role;
      if (times.starts++ > 0) ++m_restarts[lane];
      slot_event({lane, worker->slot}, Clock::now(), true, {}, {});
    }
    const auto index = *pick(queue);
    Work work = std::move(queue.waiting[index].work);
    queue.waiting.erase(queue.waiting.begin() + static_cast<std::ptrdiff_t>(index));
    send(lane, *free, std::move(work));
  }
}

void WorkerPool::send(const std::string& lane, Worker& worker, Work work) {
  m_last_served[work.owner] = ++m_served;
  worker.busy = true;
  const auto sent = std::chrono::steady_clock::now();
  const SlotKey key{lane, worker.slot};
  slot_event(key, sent, true, work.op, work.device);
  const bool threaded = lane == "cpu" && place_threads(work);
  auto handler = std::move(work.on_reply);
  std::weak_ptr<Worker> weak;
  for (const auto& w : m_workers) {
    if (w.get() == &worker) weak = w;
  }
  // The endpoint is held until the reply: a worker that died has left m_workers by then, and
  // its stderr tail is what the reply's failure needs.
  worker.endpoint->set_owner(work.owner > 0 ? "job " + std::to_string(work.owner) : std::string());
  worker.endpoint->request(
      work.op, std::move(work.job),
      [this, weak, endpoint = worker.endpoint, lane, sent, key, threaded,
       handler = std::move(handler)](Result<nlohmann::json> reply) {
        if (threaded) release_compiles();
        Delivery delivery;
        const auto now = std::chrono::steady_clock::now();
        delivery.request_ms = std::chrono::duration<double, std::milli>(now - sent).count();
        delivery.paused_ms = static_cast<double>(endpoint->paused_time().count());
        delivery.stderr_tail = endpoint->stderr_tail();
        if (auto w = weak.lock()) {
          w->busy = false;
          slot_event(key, now, true, {}, {});
        }
        if (handler) handler(std::move(reply), delivery);
        pump(lane);
        if (lane == "cpu" && may_borrow()) {  // an idle cpu lane lends its CPU to compiles
          pause_borrowed(false);
          pump("");
        } else if (threaded) {
          pump("");
        }
      },
      work.deadline);
}

bool WorkerPool::may_borrow() const {
  if (!m_bench_cpu || m_shutting_down) return false;
  return busy("cpu") == 0 && waiting("cpu") == 0;
}

void WorkerPool::pause_borrowed(bool pause) {
  for (const auto& worker : m_workers) {
    if (!worker->borrowed || !worker->busy) continue;
    if (pause) {
      worker->endpoint->pause();
    } else {
      worker->endpoint->resume();
    }
  }
}

std::size_t WorkerPool::alive(WorkerRole role) const {
  return static_cast<std::size_t>(std::count_if(
      m_workers.begin(), m_workers.end(), [role](const auto& w) { return w->role == role; }));
}

std::size_t WorkerPool::busy(const std::string& lane) const {
  return static_cast<std::size_t>(std::count_if(
      m_workers.begin(), m_workers.end(),
      [&lane](const auto& w) { return w->lane == lane && w->busy; }));
}

std::size_t WorkerPool::waiting(const std::string& lane) const {
  const auto it = m_queues.find(lane);
  return it == m_queues.end() ? 0 : it->second.waiting.size();
}

void WorkerPool::on_worker_exit(WorkerEndpoint* endpoint) {
  std::string lane;
  std::erase_if(m_workers, [&](const auto& w) {
    if (w->endpoint.get() != endpoint) return false;
    lane = w->lane;
    slot_event({w->lane, w->slot}, Clock::now(), false, {}, {});
    return true;
  });
  if (m_shutting_down) {
    if (m_workers.empty()) finish_shutdown();
    return;
  }
  // Work may be waiting for this lane's only worker: start its replacement.
  asio::post(m_io, [this, lane] { pump(lane); });
}

std::size_t WorkerPool::free_slot(const std::string& lane) const {
  for (std::size_t slot = 0;; ++slot) {
    const bool taken = std::any_of(m_workers.begin(), m_workers.end(), [&](const auto& w) {
      return w->lane == lane && w->slot == slot;
    });
    if (!taken) return slot;
  }
}

void WorkerPool::add_seconds(WorkerSeconds& seconds, std::string_view op, double s) {
  if (op == "compile" || op == k_compile_batch) {
    seconds.compile_s += s;
  } else if (op == "bench") {
    seconds.bench_s += s;
  } else {
    seconds.other_s += s;
  }
}

void WorkerPool::slot_event(const SlotKey& key, Clock::time_point now, bool alive,
                            std::string busy, std::string busy_device) {
  SlotTime& time = m_slot_times[key];
  const double s = std::chrono::duration<double>(now - time.since).count();
  if (!time.busy.empty()) {
    add_seconds(time.seconds, time.busy, s);
    // A lane's time: its own bench worker's requests, and the compiles made for its jobs.
    const std::string& lane = key.first.empty() ? time.busy_device : key.first;
    if (const auto it = m_lane_times.find(lane); it != m_lane_times.end() && !lane.empty()) {
      add_seconds(it->second.seconds, time.busy, s);
    }
  } else if (time.alive) {
    time.seconds.idle_s += s;
  }
  time.alive = alive;
  time.busy = std::move(busy);
  time.busy_device = std::move(busy_device);
  time.since = now;
}

std::vector<WorkerSlotState> WorkerPool::slots() const {
  const auto now = Clock::now();
  std::vector<WorkerSlotState> out;
  for (const auto& [key, time] : m_slot_times) {
    WorkerSlotState state{key.first, key.second, time.role, time.alive, time.busy, time.seconds};
    const double s = std::chrono::duration<double>(now - time.since).count();
    if (!time.busy.empty()) {
      add_seconds(state.seconds, time.busy, s);
    } else if (time.alive) {
      state.seconds.idle_s += s;
    }
    out.push_back(std::move(state));
  }
  return out;
}

std::vector<LaneState> WorkerPool::lane_states() const {
  const auto now = Clock::now();
  std::vector<LaneState> out;
  for (const auto& [device, time] : m_lane_times) {
    LaneState state{device, time.seconds, 0};
    // Requests in flight count up to now: the lane's own worker's, and compiles for its jobs.
    for (const auto& [key, slot] : m_slot_times) {
      if (slot.busy.empty()) continue;
      const std::string& lane = key.first.empty() ? slot.busy_device : key.first;
      if (lane != device) continue;
      add_seconds(state.seconds, slot.busy,
                  std::chrono::duration<double>(now - slot.since).count());
    }
    const double lane_s = std::chrono::duration<double>(now - time.declared).count();
    state.seconds.idle_s = std::max(0.0, lane_s - state.seconds.bench_s - state.seconds.other_s);
    if (const auto it = m_restarts.find(device); it != m_restarts.end()) state.restarts = it->second;
    out.push_back(std::move(state));
  }
  return out;
}

std::map<std::string, std::uint64_t> WorkerPool::restarts() const {
  std::map<std::string, std::uint64_t> out;
  for (const auto& [lane, queue] : m_queues) out[lane] = 0;
  for (const auto& [lane, count] : m_restarts) out[lane] = count;
  return out;
}

void WorkerPool::shutdown(std::function<void()> on_done) {
  for (auto& [lane, queue] : m_queues) {
    for (auto& waiting : queue.waiting) {
      fail_later(std::move(waiting.work), make_error(ErrorCode::withdrawn, "ktuned is shutting down"));
    }
    queue.waiting.clear();
  }
  m_shutting_down = true;
  m_on_shutdown = std::move(on_done);
  if (m_workers.empty()) {
    finish_shutdown();
    return;
  }
  KTUNE_LOG(info) << "stopping " << m_workers.size() << " worker(s)";
  for (const auto& worker : std::vector(m_workers)) worker->endpoint->terminate();
  m_shutdown_timer = std::make_unique<asio::steady_timer>(m_io, k_term_grace);
  m_shutdown_timer->async_wait([this](const boost::system::error_code& ec) {
    if (ec || m_workers.empty()) return;
    KTUNE_LOG(warn) << m_workers.size() << " worker(s) still running after SIGTERM; sending SIGKILL";
    for (const auto& worker : m_workers) worker->endpoint->kill_group();
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
