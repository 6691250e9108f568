#include "daemon/store_writer.hpp"

#include "daemon/instance.hpp"
#include "daemon/log.hpp"
#include "jobs/bench_job.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>
#include <utility>

namespace ktune::daemon {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds k_first_backoff{25};
constexpr std::chrono::milliseconds k_max_backoff{1000};
constexpr std::chrono::seconds k_warning_every{30};

// One line of the journal. The job's progress is not in it: a replay counts the stored rows.
json row_to_json(const ResultRecord& r) {
  return json{{"row",
               {{"job_id", r.job_id},
                {"kernel", r.kernel},
                {"source_hash", r.source_hash},
                {"shape", r.shape},
                {"dtype", r.dtype},
                {"fingerprint", r.fingerprint},
                {"config", r.config},
                {"config_index", r.config_index},
                {"status", std::string(to_string(r.status))},
                {"reason", r.reason},
                {"log", r.log},
                {"stats", stats_to_json(r.stats)},
                {"samples_ms", r.samples_ms},
                {"gflops", r.gflops},
                {"gbps", r.gbps},
                {"compile_ms", r.compile_ms},
                {"created_at", r.created_at},
                {"registers", r.registers},
                {"spill_bytes", r.spill_bytes},
                {"shared_bytes", r.shared_bytes},
                {"pruned", r.pruned},
                {"remeasured", r.remeasured},
                {"tied", r.tied},
                {"conditions", r.conditions},
                {"unlocked", r.unlocked}}}};
}

// A row of the journal; anything malformed is an error naming the line.
Result<ResultRecord> row_from_json(const json& line, const std::string& where) {
  try {
    const json& j = line.at("row");
    ResultRecord r;
    r.job_id = j.at("job_id").get<std::int64_t>();
    r.kernel = j.at("kernel").get<std::string>();
    r.source_hash = j.at("source_hash").get<std::string>();
    r.shape = j.at("shape").get<std::string>();
    r.dtype = j.at("dtype").get<std::string>();
    r.fingerprint = j.at("fingerprint").get<std::string>();
    r.config = j.at("config").get<std::string>();
    r.config_index = j.at("config_index").get<std::int64_t>();
    const auto status = parse_candidate_status(j.at("status").get<std::string>());
    if (!status) return make_error(ErrorCode::io_error, where + ": unknown status " + j.at("status").dump());
    r.status = *status;
    r.reason = j.at("reason").get<std::string>();
    r.log = j.at("log").get<std::string>();
    auto stats = stats_from_json(j.at("stats"), where);
    if (!stats) return stats.error();
    r.stats = *stats;
    r.samples_ms = j.at("samples_ms").get<std::vector<float>>();
    r.gflops = j.at("gflops").get<double>();
    r.gbps = j.at("gbps").get<double>();
    r.compile_ms = j.at("compile_ms").get<double>();
    r.created_at = j.at("created_at").get<std::int64_t>();
    r.registers = j.at("registers").get<int>();
    r.spill_bytes = j.at("spill_bytes").get<int>();
    r.shared_bytes = j.at("shared_bytes").get<int>();
    r.pruned = j.at("pruned").get<bool>();
    r.remeasured = j.at("remeasured").get<bool>();
    r.tied = j.at("tied").get<bool>();
    r.conditions = j.value("conditions", std::string());
    r.unlocked = j.value("unlocked", std::string());  // absent in journals of older ktuneds
    return r;
  } catch (const json::exception& e) {
    return make_error(ErrorCode::io_error, where + ": " + e.what());
  }
}

std::string stall_reason(const Error& error) {
  if (error.code == ErrorCode::db_busy) return "database busy (another process holds its lock): " + error.message;
  if (error.code == ErrorCode::db_full) return "database full (no space left on its disk): " + error.message;
  if (error.code == ErrorCode::db_gone) return "database file gone: " + error.message;
  return "database I/O error: " + error.message;
}

} // namespace

StoreWriter::StoreWriter(asio::io_context& io, Store& store)
    : m_io(io), m_store(store), m_timer(io) {}

std::string StoreWriter::spill_path(const std::string& db_path) { return db_path + "-spill"; }

void StoreWriter::submit(std::string what, Write write, Done done) {
  enqueue(Pending{std::move(what), std::move(write), std::move(done), std::nullopt});
}

void StoreWriter::submit_result(ResultRecord row, std::int64_t done, std::int64_t failed,
                                Done on_durable) {
  std::string what = "the result of " + row.config + " (job " + std::to_string(row.job_id) + ")";
  Write write = [row, done, failed](Store& store) -> Result<void> {
    auto id = store.insert_result(row);
    if (!id) return id.error();
    return store.update_job_progress(row.job_id, done, failed);
  };
  enqueue(Pending{std::move(what), std::move(write), std::move(on_durable), std::move(row)});
}

Result<void> StoreWriter::write_now(const std::string& what, const Write& write) {
  if (!m_queue.empty()) {
    return make_error(ErrorCode::db_busy, "cannot store " + what + " now: " + describe_stall());
  }
  return run(Pending{what, write, nullptr, std::nullopt});
}

Result<void> StoreWriter::checkpoint_wal() { return m_store.checkpoint(); }

Result<void> StoreWriter::run(const Pending& pending) {
  const auto start = std::chrono::steady_clock::now();
  auto written = m_store.in_transaction([&] { return pending.write(m_store); });
  m_write_seconds.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!written) ++m_failed_writes;
  return written;
}

void StoreWriter::enqueue(Pending pending) {
  if (m_queue.empty()) {
    auto written = run(pending);
    if (written || !is_transient(written.error())) {
      if (pending.done) pending.done(written);
      return;
    }
    begin_stall(written.error());
  }
  // It waits behind the ones before it. A row is acknowledged once it is in the journal.
  Done acknowledge;
  if (pending.row && !m_spill_broken) {
    if (spill(pending)) {
      acknowledge = std::move(pending.done);
      pending.done = nullptr;
    } else {
      m_spill_broken = true;
    }
  }
  m_queue.push_back(std::move(pending));
  if (acknowledge) acknowledge(Result<void>{});
}

void StoreWriter::begin_stall(const Error& error) {
  m_stall = Stall{stall_reason(error), std::chrono::steady_clock::now()};
  m_last_warning = m_stall->since;
  KTUNE_LOG(warn) << "store writes wait: " << m_stall->reason
                  << "; results are kept in " << spill_path(m_store.path())
                  << " and written when the database takes them again";
  m_backoff = k_first_backoff;
  schedule_retry();
}

void StoreWriter::schedule_retry() {
  m_timer.expires_after(m_backoff);
  m_backoff = std::min(m_backoff * 2, k_max_backoff);
  m_timer.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) retry();
  });
}

void StoreWriter::retry() {
  while (!m_queue.empty()) {
    Pending& head = m_queue.front();
    auto written = run(head);
    if (!written && is_transient(written.error())) {
      if (m_stall) m_stall->reason = stall_reason(written.error());
      const auto now = std::chrono::steady_clock::now();
      if (now - m_last_warning >= k_warning_every) {
        m_last_warning = now;
        KTUNE_LOG(warn) << "store writes still wait: " << describe_stall();
      }
      schedule_retry();
      return;
    }
    if (!written) {
      KTUNE_LOG(error) << "cannot store " << head.what << ": " << written.error().message;
    }
    Done done = std::move(head.done);
    m_queue.pop_front();
    // The stall is over (and the journal gone) before the last write's completion runs: it may
    // announce a job's end, and whoever hears of it sees no stall left behind.
    if (m_queue.empty()) end_stall();
    if (done) done(written);
  }
  end_stall();
}

void StoreWriter::end_stall() {
  if (!m_stall) return;
  const auto waited = std::chrono::steady_clock::now() - m_stall->since;
  KTUNE_LOG(info) << "store writes go through again after "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
                  << " ms; every waiting write is stored";
  m_stall.reset();
  m_spill_broken = false;
  m_backoff = k_first_backoff;
  if (m_spill_fd >= 0) {
    ::close(m_spill_fd);
    m_spill_fd = -1;
  }
  const std::string path = spill_path(m_store.path());
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    KTUNE_LOG(warn) << "cannot remove " << path << ": " << std::strerror(errno)
                    << " (its rows are all stored; the next start skips them)";
  }
}

bool StoreWriter::spill(const Pending& pending) {
  const std::string path = spill_path(m_store.path());
  if (m_spill_fd < 0) {
    m_spill_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (m_spill_fd < 0) {
      KTUNE_LOG(error) << "cannot open the spill journal " << path << ": " << std::strerror(errno)
                       << "; results are acknowledged only once the database takes them";
      return false;
    }
  }
  const std::string line = row_to_json(*pending.row).dump() + "\n";
  if (!write_all(m_spill_fd, line) || ::fdatasync(m_spill_fd) != 0) {
    KTUNE_LOG(error) << "cannot write the spill journal " << path << ": " << std::strerror(errno)
                     << "; results are acknowledged only once the database takes them";
    return false;
  }
  return true;
}

std::optional<StoreWriter::Stall> StoreWriter::stall() const {
  if (!m_stall) return std::nullopt;
  Stall out = *m_stall;
  out.waiting = m_queue.size();
  out.spilling = !m_spill_broken;
  return out;
}

std::string StoreWriter::describe_stall() const {
  const auto stall = this->stall();
  if (!stall) return {};
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - stall->since);
  std::ostringstream text;
  text << stall->reason << " for " << static_cast<double>(waited.count()) / 1000.0 << " s; "
       << stall->waiting << " write(s) wait, "
       << (stall->spilling ? "results kept in " + spill_path(m_store.path())
                             : std::string("results kept in memory only (the journal failed too)"));
  return text.str();
}

void StoreWriter::flush() {
  if (m_queue.empty()) return;
  m_timer.cancel();
  retry();
  if (m_queue.empty()) return;
  std::size_t rows = 0;
  for (const auto& pending : m_queue) rows += pending.row ? 1 : 0;
  KTUNE_LOG(error) << "stopping with " << m_queue.size() << " write(s) not stored ("
                   << describe_stall() << "): " << rows
                   << " result row(s) stay in the spill journal for the next start; the other "
                      "writes are job states, and those jobs resume";
  m_queue.clear();
  if (m_spill_fd >= 0) {
    ::close(m_spill_fd);
    m_spill_fd = -1;
  }
}

Result<std::size_t> StoreWriter::replay_spill(Store& store) {
  const std::string path = spill_path(store.path());
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::size_t{0};
    return make_error(ErrorCode::io_error, "cannot read the spill journal " + path + ": " + std::strerror(errno));
  }
  std::vector<ResultRecord> rows;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const std::string where = path + " line " + std::to_string(number);
    json parsed = json::parse(line, nullptr, false);
    // A line cut short by a kill in the middle of its write was never acknowledged: skipped.
    if (parsed.is_discarded()) {
      KTUNE_LOG(warn) << where << " is incomplete (cut short when its writer died); skipped";
      continue;
    }
    auto row = row_from_json(parsed, where);
    if (!row) return row.error();
    rows.push_back(std::move(*row));
  }
  std::size_t written = 0;
  std::map<std::int64_t, bool> jobs;
  auto stored = store.in_transaction([&]() -> Result<void> {
    for (const auto& row : rows) {
      auto id = store.insert_result(row);
      if (id) {
        ++written;
      } else if (id.error().code == ErrorCode::unknown_job) {
        KTUNE_LOG(warn) << "spill journal: job " << row.job_id << " no longer exists; its row for "
                        << row.config << " is dropped";
        continue;
      } else if (id.error().code != ErrorCode::duplicate_result) {
        return id.error();
      }
      jobs[row.job_id] = true;
    }
    for (const auto& [job, unused] : jobs) {
      auto results = store.job_results(job);
      if (!results) return results.error();
      const auto failed = std::count_if(results->begin(), results->end(), [](const ResultRecord& r) {
        return r.status != CandidateStatus::ok;
      });
      if (auto r = store.update_job_progress(job, static_cast<std::int64_t>(results->size()), failed);
          !r) {
        return r.error();
      }
    }
    return {};
  });
  if (!stored) {
    return make_error(stored.error().code, "cannot replay the spill journal " + path + " (kept): " +
                                               stored.error().message);
  }
  if (::unlink(path.c_str()) != 0) {
    return make_error(ErrorCode::io_error, "replayed the spill journal " + path + " but cannot remove it: " +
                                      std::strerror(errno));
  }
  KTUNE_LOG(info) << "replayed the spill journal " << path << ": " << written << " of "
                  << rows.size() << " result row(s) were not yet in the database";
  return written;
}

} // namespace ktune::daemon
