#pragma once
// WorkerPool: the one owner of ktuned's worker processes. Work reaches a worker only through
// submit(); nobody else looks for idle workers. Single-threaded (the io thread).
//
// Two kinds of queue:
//   - the compile pool (lane ""): up to `compile_workers` compile workers shared by every job;
//   - one bench lane per device ("cpu", "cuda:0", ...): one bench worker each, so measurements
//     on a device never overlap, while lanes of different devices measure at the same time.
// Workers are started lazily and kept; one that exits (crashed, killed at a deadline, idle for
// `worker_idle`, or announced its exit) is dropped and the next request starts a replacement.
//
// Hand-out order: a queue's waiting work goes to a free worker by priority (higher first), then
// fairly across owners (the owner served least recently first), then in submission order; so two
// jobs compiling at the same priority alternate on the compile workers.
//
// CPU placement: when the daemon may run on two or more CPUs, the cpu lane's bench worker is
// pinned to the last of them (ktune-worker --cpu) and compile workers, with the compilers they
// start, are kept off it (sched_setaffinity), so compiles never disturb a CPU measurement.
// The bench CPU is lent to compiles while the cpu lane has nothing to do: when every compile
// worker is busy, compile work still waits and the cpu lane has no request in flight and none
// waiting, one more compile worker, pinned to the bench CPU (`borrowed`), takes it. When the cpu
// lane has a request to send while that worker compiles, the borrowed worker and its compilers
// are stopped (SIGSTOP to its process group; its deadline stops too) and the request goes out at
// once; they continue (SIGCONT) as soon as the cpu lane is idle again. A group is stopped only
// while the stop guard (daemon/stop_guard.hpp) holds it, so that a ktuned killed meanwhile leaves
// no stopped process behind. The borrowed worker runs at nice 19 besides. So a tune whose
// measurements outpace its compiles, or a CUDA tune, compiles on every core, a measurement never
// waits for a compile, and it does not share its CPU with one.
//
// Threaded candidates (BenchJob::threads, docs/kernel-spec.md § Threads): a cpu-lane request whose
// candidate runs more than one thread is given that many CPUs of the lane, the bench CPU first
// (the request's "cpus"; "oversubscribed" when it asks for more than the daemon may use: it gets
// them all). While it is in flight no compile runs: compiles in progress are stopped as the
// borrowed one is (through the stop guard; a compile the guard cannot hold goes on, logged) and
// queued ones wait; all continue when its reply comes.
#include "core/result.hpp"
#include "core/unique_fd.hpp"
#include "daemon/stop_guard.hpp"
#include "daemon/worker_process.hpp"

#include <sched.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ktune::daemon {


// The daemon's side of one worker: what the pool needs of it. WorkerProcess is the real one;
// tests plug in endpoints of their own through a WorkerSpawner.
class WorkerEndpoint {
public:
  virtual ~WorkerEndpoint() = default;
  // Sends one request; `on_reply` runs exactly once, never inside this call (WorkerProcess).
  virtual void request(std::string_view op, nlohmann::json job,
                       WorkerProcess::ReplyHandler on_reply,
                       std::chrono::milliseconds deadline) = 0;
  // Who the next request is for ("job 12"), for what its stderr leaves in the log.
  virtual void set_owner(std::string /*owner*/) {}
  // Free for a request: alive, not closing, no request in flight.
  [[nodiscard]] virtual bool idle() const = 0;
  [[nodiscard]] virtual const std::string& stderr_tail() const = 0;
  virtual void terminate() = 0;
  virtual void kill_group() = 0;
  // Stops and continues the request in flight (WorkerProcess::pause): the bench CPU's borrowed
  // compile while a measurement runs there.
  virtual void pause() = 0;
  virtual void resume() = 0;
  // How long the request in flight, or the last one, has been paused.
  [[nodiscard]] virtual std::chrono::milliseconds paused_time() const = 0;
  // Lets `guard` take this worker's group, so that pause() may stop it (a compile held while a
  // threaded candidate measures); false when it could not. Endpoints of tests: true.
  virtual bool guard_with(const std::shared_ptr<StopGuard>& /*guard*/) { return true; }
};

// Where a worker serves: the compile pool (lane "") or a device's bench lane.
struct WorkerSlot {
  WorkerRole role = WorkerRole::compile;
  std::string lane;                // "" for the compile pool, else the device name
  std::vector<std::string> args;   // extra ktune-worker arguments of the lane
  bool borrowed = false;           // a compile worker on the cpu lane's bench CPU (see above)
};

// Starts a worker for `slot`; `on_exit` must run once, on the io thread, after it has exited.
using WorkerSpawner = std::function<Result<std::shared_ptr<WorkerEndpoint>>(
    const WorkerSlot& slot, std::function<void()> on_exit)>;

// What a finished request tells besides its reply.
struct Delivery {
  std::string stderr_tail;         // the worker's stderr since the request was sent
  double request_ms = 0;           // from sending the request to its reply
  double paused_ms = 0;            // of request_ms, the time the worker was stopped (pause())
};

// One piece of work for a worker.
struct Work {
  std::string op;                  // "compile", "compile_batch", "bench", "devices"
  nlohmann::json job = nlohmann::json::object();
  std::chrono::milliseconds deadline{0}; // > 0: the worker is killed when it passes it
  int priority = 0;                // higher first
  std::int64_t owner = 0;          // the job it is for: fairness among equals, withdraw()
  std::string device;              // the device lane it serves, for the time per lane ("" none)
  // Exactly once, on the io thread, never inside submit(): the outcome, or an Error (the
  // worker's own, ErrorCode::worker_crashed / ErrorCode::worker_gone / ErrorCode::worker_timeout / ErrorCode::spawn_failed, or
  // ErrorCode::withdrawn when the work was withdrawn before a worker took it).
  std::function<void(Result<nlohmann::json> reply, const Delivery& delivery)> on_reply;
};

// Where worker time went since the pool started, in seconds (/metrics, `ktune top`).
struct WorkerSeconds {
  double compile_s = 0;            // answering compile requests
  double bench_s = 0;              // answering bench requests
  double other_s = 0;              // any other request (the device probe)
  double idle_s = 0;               // alive without a request
};

// One worker slot: the compile pool's workers are numbered 0 .. compile_limit-1, a bench lane's
// worker is slot 0; a worker started to replace one that exited takes over its number.
struct WorkerSlotState {
  std::string lane;                // "" = compile pool, else the device
  std::size_t slot = 0;
  WorkerRole role = WorkerRole::compile;
  bool alive = false;
  std::string busy;                // the op of the request in flight, "" when none
  WorkerSeconds seconds;           // including the interval in progress
};

// One device lane: its compile seconds are those of compile requests made for its jobs (Work's
// `device`), its bench seconds those of its bench worker, its idle seconds the time since the
// lane was declared during which its bench worker answered nothing.
struct LaneState {
  std::string device;
  WorkerSeconds seconds;
  std::uint64_t restarts = 0;      // workers started to replace one that exited (bench lane)
};

class WorkerPool {
public:
  // The real pool: ktune-worker processes started from `worker_path`, with `--memory-mb N`
  // (RLIMIT_AS) for compile and cpu bench workers when `memory_mb` > 0.
  // With a `lock_dir`, devices are shared fairly with other ktuned instances on the machine
  // (docs/ARCHITECTURE.md § One measurement per device): the cpu lane's worker is pinned to a
  // core no other instance has claimed (ktune-cpu<N>.claim, held while this pool lives), and each
  // bench worker holds its device's measurement lock (ktune-measure-<device>.lock) while it
  // measures.
  WorkerPool(asio::io_context& io, ChildWatch& children, std::string worker_path,
             std::size_t compile_workers,
             std::chrono::milliseconds worker_idle = std::chrono::milliseconds(0),
             std::int64_t memory_mb = 0, std::string lock_dir = {});
  // RLIMIT_AS of compile workers and the compilers they run (`--memory-mb`), when memory_mb
  // above does not set a smaller one; 0 = none. A compile that would exhaust the machine (an
  // include of /dev/zero, a runaway template) fails its candidate instead.
  void set_compile_memory_mb(std::int64_t mb) { m_compile_memory_mb = mb; }

  // A pool over endpoints of the caller's making (tests); with `bench_cpu`, compiles may borrow
  // that CPU as above.
  WorkerPool(asio::io_context& io, WorkerSpawner spawner, std::size_t compile_workers,
             std::optional<int> bench_cpu = std::nullopt);

  // Declares the bench lane of `device` ("cpu" is always there); `args` are added to its
  // worker's command line. Declaring a lane again replaces its arguments for the next worker.
  // `uuid` names the physical board (a CUDA device's "GPU-…"): its machine-wide measurement lock
  // is named by it, so instances that number the same board differently (CUDA_VISIBLE_DEVICES,
  // CUDA_DEVICE_ORDER) still take turns; without one the lock is named by the visible ordinal.
  void add_lane(const std::string& device, std::vector<std::string> args = {},
                std::string uuid = {});
  [[nodiscard]] bool has_lane(const std::string& device) const;
  [[nodiscard]] std::vector<std::string> lanes() const;

  // Queues `work` for the compile pool (lane "") or a device's bench lane and hands it to a
  // worker as soon as one is free. An unknown lane answers no_device (posted).
  void submit(const std::string& lane, Work work);

  // Removes the queued (not yet sent) work of `owner` from every queue; each handler receives
  // ErrorCode::withdrawn (posted). Work a worker has taken finishes normally. Returns how many.
  std::size_t withdraw(std::int64_t owner);

  [[nodiscard]] std::size_t alive(WorkerRole role) const;
  [[nodiscard]] std::size_t busy(const std::string& lane) const;
  [[nodiscard]] std::size_t waiting(const std::string& lane) const;
  [[nodiscard]] std::size_t compile_limit() const { return m_compile_limit; }
  // The CPU the cpu lane's bench worker is pinned to (nullopt: not pinned, fewer than two CPUs),
  // and whether this instance holds its machine-wide claim (false: every CPU was claimed).
  [[nodiscard]] std::optional<int> bench_cpu() const { return m_bench_cpu; }
  [[nodiscard]] bool bench_cpu_claimed() const { return m_cpu_claim.valid(); }
  // Why a claim file could not be used (core/shared_lock_file.hpp: another user's file it may not
  // open, a symbolic link, an unusable directory); "" when every one it tried could be.
  [[nodiscard]] const std::string& claim_problem() const { return m_claim_problem; }

  // The machine-wide measurement lock of `lane`'s bench worker ("" without a lock_dir).
  [[nodiscard]] std::string measure_lock_path(const std::string& lane) const;
  // A measurement on `lane` that ran without its lock (BenchOutcome::unlocked): counted, kept
  // for `stats`, and logged as a warning the first time for each reason.
  void note_unlocked(const std::string& lane, const std::string& why);
  struct Unlocked {
    std::string why;           // the latest reason
    std::uint64_t measurements = 0;
  };
  // The lane's measurements without their lock so far (none: measurements == 0).
  [[nodiscard]] Unlocked unlocked(const std::string& lane) const;

  // Every slot that has had a worker, in lane then slot order.
  [[nodiscard]] std::vector<WorkerSlotState> slots() const;
  // Every declared lane, in name order.
  [[nodiscard]] std::vector<LaneState> lane_states() const;
  // Workers started to replace one that exited (crashed, killed at a deadline, idle, lost its
  // device), per lane ("" = compile pool).
  [[nodiscard]] std::map<std::string, std::uint64_t> restarts() const;

  // Terminates every worker (socket closed, SIGTERM to its group), sends SIGKILL to the groups
  // of those still alive after 1 s, and calls `on_done` once all have exited, or 1 s after the
  // SIGKILL at the latest. Queued work is withdrawn; nothing is started afterwards.
  void shutdown(std::function<void()> on_done);

private:
  struct Worker {
    std::shared_ptr<WorkerEndpoint> endpoint;
    WorkerRole role;
    std::string lane;
    std::size_t slot = 0;
    bool busy = false;
    bool borrowed = false;
  };
  using Clock = std::chrono::steady_clock;
  // The time of one slot: what it is doing since `since`, and the seconds closed so far.
  struct SlotTime {
    WorkerRole role = WorkerRole::compile;
    bool alive = false;
    std::string busy;                // op in flight
    std::string busy_device;         // its Work's device
    Clock::time_point since;
    WorkerSeconds seconds;
    std::uint64_t starts = 0;
  };
  struct LaneTime {
    Clock::time_point declared;
    WorkerSeconds seconds;           // compile_s, bench_s, other_s closed so far
  };
  using SlotKey = std::pair<std::string, std::size_t>;
  // Closes the interval of `key` in progress at `now` and starts the next one.
  void slot_event(const SlotKey& key, Clock::time_point now, bool alive, std::string busy,
                  std::string busy_device);
  [[nodiscard]] std::size_t free_slot(const std::string& lane) const;
  static void add_seconds(WorkerSeconds& seconds, std::string_view op, double s);
  struct Waiting {
    Work work;
    std::uint64_t seq = 0;
  };
  struct Queue {
    std::vector<Waiting> waiting;
    std::size_t limit = 1;
    std::vector<std::string> args;
    std::string uuid;  // the board a CUDA lane measures on, when its probe reported one
  };

  void pump(const std::string& lane);
  // What a CUDA lane's measurement lock is named by: its board's UUID, else "cuda<visible ordinal>".
  [[nodiscard]] std::string measured_board(const std::string& lane) const;
  [[nodiscard]] std::optional<std::size_t> pick(const Queue& queue) const;
  void send(const std::string& lane, Worker& worker, Work work);
  void on_worker_exit(WorkerEndpoint* endpoint);
  void finish_shutdown();
  [[nodiscard]] Result<std::shared_ptr<WorkerEndpoint>> spawn_process(
      const WorkerSlot& slot, std::function<void()> on_exit);
  void fail_later(Work work, Error error);

  asio::io_context& m_io;
  WorkerSpawner m_spawner;
  ChildWatch* m_children = nullptr;
  std::string m_worker_path;
  // Whether compile work may go to the borrowed worker now: the cpu lane is idle.
  [[nodiscard]] bool may_borrow() const;
  // Stops the borrowed worker's compile (the cpu lane has a request) or lets it go on.
  void pause_borrowed(bool pause);
  // The stop guard, started on first use; null when it cannot be (logged once).
  [[nodiscard]] std::shared_ptr<StopGuard> stop_guard();
  // A threaded cpu-lane request: its CPUs written into `work.job` (for a bench_ab, into both
  // sides), and every compile stopped until release_compiles(). Nothing for a single thread.
  [[nodiscard]] bool place_threads(Work& work);
  void hold_compiles();
  void release_compiles();

  std::size_t m_compile_limit;
  std::chrono::milliseconds m_worker_idle{0};
  std::int64_t m_memory_mb = 0;
  std::int64_t m_compile_memory_mb = 0;
  std::optional<int> m_bench_cpu;          // the cpu lane worker's CPU, when pinned
  std::string m_lock_dir;                  // "" = no cross-instance locks
  UniqueFd m_cpu_claim;                    // ktune-cpu<N>.claim of m_bench_cpu
  std::string m_claim_problem;             // why a claim file could not serve, if one could not
  std::map<std::string, Unlocked> m_unlocked; // lane -> measurements without their lock
  std::optional<cpu_set_t> m_compile_cpus; // every allowed CPU but the bench worker's
  std::vector<int> m_lane_cpus;            // the CPUs the daemon may use, the bench CPU first
  bool m_compiles_held = false;            // a threaded candidate measures: no compile runs
  bool m_hold_warned = false;
  std::shared_ptr<StopGuard> m_stop_guard; // started with the first borrowed worker
  bool m_stop_guard_failed = false;        // it could not be: borrowed compiles are not stopped
  std::map<std::string, Queue> m_queues;   // "" = compile pool, else a device's lane
  std::map<SlotKey, SlotTime> m_slot_times;
  std::map<std::string, LaneTime> m_lane_times;
  std::map<std::string, std::uint64_t> m_restarts;
  std::vector<std::shared_ptr<Worker>> m_workers;
  std::map<std::int64_t, std::uint64_t> m_last_served; // owner -> hand-out counter
  std::uint64_t m_seq = 0, m_served = 0;
  bool m_shutting_down = false;
  std::function<void()> m_on_shutdown;
  std::unique_ptr<asio::steady_timer> m_shutdown_timer;
};

} // namespace ktune::daemon
