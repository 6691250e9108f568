#pragma once
// StoreWriter: the one writer of ktuned's store. The Server owns it and hands it to whoever writes
// (the Scheduler, the Planner, the import service, the canary, ...); everyone else reads through a
// const Store&. Every write is a callback given the Store (Write), run in order, without the event
// loop ever waiting on the database.
//
// A write is one transaction (a function of the Store). When nothing waits before it, it runs at
// once: ktuned's connection has no busy timeout, so a lock held by another process fails it at
// once instead of freezing the loop. A write that fails because the database is busy, full or
// failing (is_transient) waits, every later write queues behind it in order, and the head is
// retried on a timer (25 ms doubling to 1 s) until it goes through: nothing is dropped and the
// order is kept. While writes wait the writer is *stalled*: jobs say so (`stalled` in their
// summaries) and the log says when it began and ended.
//
// A result's write carries its row. While the writer is stalled the row is appended to the spill
// journal (`<db>-spill`, one JSON line per row, fdatasync'd) before the write is acknowledged, so a
// result a client has heard of survives kill -9 even while the database takes nothing; the next
// ktuned replays the journal into the database before it resumes any job. When the journal cannot
// be written either (the same full disk), acknowledgements wait for the database. The journal is
// removed once the queue has drained.
#include "core/result.hpp"
#include "daemon/metrics.hpp"
#include "db/store.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

namespace ktune::daemon {

class StoreWriter {
public:
  using Write = std::function<Result<void>(Store&)>;
  // Called once per write: ok when it is durable (committed, or its row spilled to the journal),
  // the error when it failed for good (an error that is not transient).
  using Done = std::function<void(const Result<void>&)>;

  StoreWriter(boost::asio::io_context& io, Store& store);
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // `what` names the write in the log ("the result of {BM:64}", "job 7's end").
  void submit(std::string what, Write write, Done done = {});
  // A write whose caller needs its outcome before it answers (a job's row before the tune reply,
  // a step of an import): run at once when no write waits, its result returned. While writes
  // wait (stalled) it is not run and fails with db_busy naming the stall; a failure of its own,
  // transient or not, is returned as it is and nothing is queued or retried (the caller answers
  // with it: internal_error() makes a transient one store_busy).
  [[nodiscard]] Result<void> write_now(const std::string& what, const Write& write);
  // A candidate's row and its job's progress (done, failed) in one commit.
  void submit_result(ResultRecord row, std::int64_t done, std::int64_t failed, Done on_durable);

  struct Stall {
    std::string reason;                            // "database busy: ...", "database full: ..."
    std::chrono::steady_clock::time_point since;
    std::size_t waiting = 0;                       // writes queued
    bool spilling = true;                          // rows go to the journal (false: it failed too)
  };
  [[nodiscard]] std::optional<Stall> stall() const;
  // One line for people: "database busy (...) for 4.1 s; 3 writes wait, results kept in <journal>".
  [[nodiscard]] std::string describe_stall() const;

  // How long each attempt at a write took (committed or not), in seconds; attempts that failed.
  [[nodiscard]] const Histogram& write_seconds() const { return m_write_seconds; }
  [[nodiscard]] std::uint64_t failed_writes() const { return m_failed_writes; }

  // One last attempt for every waiting write (at shutdown). Rows that still cannot be written stay
  // in the journal; state changes that cannot are logged (their jobs resume at the next start).
  void flush();

  // Folds the write-ahead log into the database file (at shutdown, once nothing waits): not a
  // transaction. Errors: the store's.
  [[nodiscard]] Result<void> checkpoint_wal();

  // The journal of the store at `db_path`.
  [[nodiscard]] static std::string spill_path(const std::string& db_path);
  // Writes the rows of a journal left behind into the store (rows already there are skipped), sets
  // their jobs' progress from what is stored and removes the journal. Call before jobs resume.
  // Returns the rows written. Errors: the store's, the journal's (io_error); the journal is kept.
  [[nodiscard]] Result<std::size_t> replay_spill() { return replay_spill(m_store); }
  [[nodiscard]] static Result<std::size_t> replay_spill(Store& store);

private:
  struct Pending {
    std::string what;
    Write write;
    Done done;                        // empty once acknowledged
    std::optional<ResultRecord> row;  // spilled while stalled
  };

  [[nodiscard]] Result<void> run(const Pending& pending);
  void begin_stall(const Error& error);
  void enqueue(Pending pending);
  void schedule_retry();
  void retry();
  [[nodiscard]] bool spill(const Pending& pending);
  void end_stall();

  boost::asio::io_context& m_io;
  Store& m_store;
  std::deque<Pending> m_queue;
  boost::asio::steady_timer m_timer;
  std::chrono::milliseconds m_backoff{25};
  std::optional<Stall> m_stall;        // reason and since; stall() adds waiting and spilling
  int m_spill_fd = -1;
  bool m_spill_broken = false;
  std::chrono::steady_clock::time_point m_last_warning;
  Histogram m_write_seconds = write_latency_histogram();
  std::uint64_t m_failed_writes = 0;
};

} // namespace ktune::daemon
