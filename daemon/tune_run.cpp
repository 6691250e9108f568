// TuneRun's search and end: the job's setup, its steps (advance), proposals, the finals' rounds,
// the results recorded, and the job's end written in one commit.
#include "daemon/tune_run.hpp"

#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "db/job_winner.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace ktune::daemon {

namespace {

// The longest a batch of compiles may take (BatchSizer): the bench worker waits for no longer.
constexpr double k_max_batch_ms = 1000;

double ms_since(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

std::string describe_failures(const std::map<CandidateStatus, int>& failures) {
  std::ostringstream text;
  bool first = true;
  for (const auto& [status, count] : failures) {
    text << (first ? "" : ", ") << count << " " << to_string(status);
    first = false;
  }
  return text.str();
}

} // namespace

void TuneRun::fail(const std::string& error) {
  if (m_error.empty()) m_error = error;
}

TuneRun::TuneRun(RunServices services, JobPlan plan,
                 std::chrono::steady_clock::time_point queued_at)
    : m_io(services.io), m_store(services.store), m_writer(services.writer),
      m_workers(services.workers), m_settings(services.settings), m_counters(services.counters),
      m_host(services.host), m_plan(std::move(plan)), m_lane(m_plan.record.device) {
  m_started = m_mark = std::chrono::steady_clock::now();
  m_timing.queue_ms = ms_since(queued_at);
  const JobRecord& rec = m_plan.record;
  // A batch stays well within its deadline: a batch past it is compiled again config by config.
  m_sizer = BatchSizer(std::min(k_max_batch_ms, compile_deadline(m_settings, rec).count() / 4.0));

  auto space = search::SearchSpace::from_configs(m_plan.kernel.spec.params, m_plan.configs);
  auto strategy = space ? Result<int>(0) : Result<int>(space.error());
  if (space) {
    m_space = std::move(*space);
    auto made = search::make_strategy(rec.strategy, m_space,
                                      static_cast<std::uint64_t>(rec.seed.value_or(0)), m_plan.prior);
    if (made) {
      m_strategy = std::move(*made);
    } else {
      strategy = made.error();
    }
  }
  if (!strategy) {
    fail("cannot search the configs: " + strategy.error().message);
  } else {
    search::Budget budget;
    if (rec.budget) budget.max_evaluations = static_cast<std::size_t>(*rec.budget);
    if (rec.budget_s) budget.wall_time = std::chrono::milliseconds(std::llround(*rec.budget_s * 1000.0));
    m_stop.emplace(budget, m_space.size(), m_started);
    m_total = static_cast<std::int64_t>(m_stop->evaluation_limit());
    m_batched = rec.strategy != "exhaustive";
    for (const auto& row : m_plan.existing) m_existing[row.config] = &row;
    for (const auto& row : m_plan.reusable) m_reusable[row.config] = &row;
    if (!m_plan.existing.empty()) {
      KTUNE_LOG(info) << "job " << rec.id << " resumes: " << m_plan.existing.size()
                      << " candidate(s) already measured";
    }
  }
  if (!m_workers.has_lane(m_lane)) {
    fail("no bench lane for device " + m_lane + " on this ktuned");
  }
}

void TuneRun::start() {
  const std::int64_t job_id = id();
  KTUNE_LOG(info) << "job " << job_id << " running on lane " << m_lane;
  m_writer.submit("job " + std::to_string(job_id) + "'s start",
                  [job_id](Store& store) { return store.set_job_state(job_id, JobState::running); },
                  [host = &m_host, job_id](const Result<void>& r) {
                    if (r) return;
                    if (TuneRun* run = host->find_run(job_id)) run->fail("database: " + r.error().message);
                  });
}

void TuneRun::cancel() {
  m_cancelled = true;
  fail("cancelled by a client");
}

JobView TuneRun::view(std::chrono::steady_clock::time_point now) const {
  JobView view;
  view.record = m_plan.record;
  view.running = true;
  view.phase = m_reference != ReferenceState::ready ? "reference"
               : m_phase == Phase::finals            ? "finals"
                                                     : "search";
  view.done = m_done;
  view.total = m_total;
  view.failed = m_failed;
  if (m_best) {
    view.best_median_ms = m_best->stats.median_ms;
    view.best_config = m_best->config;
  }
  view.running_s = std::chrono::duration<double>(now - m_started).count();
  return view;
}

// Books the time since the last call to what the job was doing meanwhile.
void TuneRun::account() {
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - m_mark).count();
  m_mark = now;
  if (m_benchmarking) {
    m_timing.bench_ms += ms;
  } else if (m_compiling > 0 || m_reference == ReferenceState::compiling) {
    m_timing.compile_ms += ms;
  } else {
    m_timing.overhead_ms += ms;
  }
}

// Asks the strategy for candidates while fewer than compile_ahead are compiling or compiled
// ahead of the bench worker. Configs this job or an earlier one already measured are answered
// at once.
void TuneRun::propose() {
  while (m_error.empty() && m_phase == Phase::search) {
    const std::size_t ahead = m_to_compile.size() + m_compiling + m_compiled.size();
    if (m_settings.serial && (ahead > 0 || m_benchmarking)) return;
    // Exhaustive search proposes whole compile batches, as many as compile_ahead has room for.
    const std::size_t per_request = batch_size();
    const std::size_t limit = compile_ahead();
    if (m_batched ? !m_batch.empty() : ahead + per_request > limit) return;
    if (m_stop->reached(std::chrono::steady_clock::now())) return;
    const std::size_t allowed = m_stop->proposals_left(m_strategy->pending_count());
    if (allowed == 0) return;
    const std::size_t room = m_settings.serial ? 1
                             : m_batched         ? m_settings.search_batch
                                                 : (limit - ahead) / per_request * per_request;
    const auto batch = m_strategy->propose(std::min(allowed, room));
    if (batch.empty()) return;
    if (m_batched) m_batch = batch;
    for (const std::size_t index : batch) {
      const std::string text = config_json_text(m_plan.configs[index]);
      if (const auto it = m_existing.find(text); it != m_existing.end()) {
        ResultRecord row = *it->second;
        row.config_index = static_cast<std::int64_t>(index);
        ++m_done;
        learn(index, row);
      } else if (const auto reuse = m_reusable.find(text); reuse != m_reusable.end()) {
        ResultRecord row = *reuse->second;
        row.reason = "reused from job " + std::to_string(row.job_id) +
                     (row.reason.empty() ? "" : ": " + row.reason);
        row.remeasured = false; // `tied` stays: the winning group of the job that measured it
        row.created_at = 0;
        record(index, std::move(row));
      } else {
        m_to_compile.push_back(index);
      }
    }
  }
}

bool TuneRun::search_over() const {
  if (m_strategy->pending_count() > 0 || !m_to_compile.empty() || m_compiling > 0 ||
      !m_compiled.empty() || m_benchmarking) {
    return false;
  }
  return m_strategy->exhausted() || m_stop->reached(std::chrono::steady_clock::now()) ||
         m_stop->proposals_left(0) == 0;
}

bool TuneRun::advance() {
  account();
  if (m_error.empty() && m_reference == ReferenceState::pending) start_reference();
  if (m_error.empty() && m_reference == ReferenceState::ready) {
    propose();
    dispatch_work();
    if (m_error.empty() && m_phase == Phase::search && search_over()) {
      start_finals();
      if (!m_final_queue.empty()) return advance();
    }
  }
  if (!m_error.empty()) {
    if (m_in_flight > 0) return false; // let the replies land before the lane takes the next job
    m_host.end_job(id(), m_cancelled ? JobState::cancelled : JobState::failed, m_error);
    return true;
  }
  if (m_reference == ReferenceState::ready && m_phase == Phase::finals && m_final_queue.empty() &&
      !m_benchmarking) {
    finish();
    return true;
  }
  return false; // replies in flight will call advance() again
}

void TuneRun::dispatch_work() {
  // A strategy's batch is spread over the compile workers first (nothing more comes until its
  // results are in); exhaustive search keeps compile_ahead filled in whole batches.
  const std::size_t workers = std::max<std::size_t>(1, m_settings.compile_workers);
  const std::size_t spread = (m_to_compile.size() + workers - 1) / workers;
  const std::size_t per_request = m_batched ? std::min(batch_size(), spread) : batch_size();
  while (m_error.empty() && !m_to_compile.empty()) {
    const auto end = m_to_compile.begin() +
                     static_cast<std::ptrdiff_t>(std::min(per_request, m_to_compile.size()));
    const std::vector<std::size_t> indices(m_to_compile.begin(), end);
    m_to_compile.erase(m_to_compile.begin(), end);
    start_compile(indices);
  }
  std::deque<Compiled>& waiting = m_phase == Phase::search ? m_compiled : m_final_queue;
  while (m_error.empty() && !m_benchmarking && !waiting.empty()) {
    Compiled candidate = std::move(waiting.front());
    waiting.pop_front();
    start_bench(std::move(candidate));
  }
}

// Picks the finalists, switches the job to the finals and queues their first round. Fewer than
// two finalists: no finals.
void TuneRun::start_finals() {
  m_phase = Phase::finals;
  const MeasureSettings& measure = m_settings.measure;
  std::set<std::size_t> measured_here;
  for (const auto& [index, artifact] : m_artifacts) measured_here.insert(index);
  for (const std::size_t index : pick_finalists(m_ok_rows, m_best, measured_here,
                                                measure.final_margin, measure.finalists)) {
    m_finalists.push_back(m_artifacts.at(index));
  }
  if (m_finalists.empty()) return;
  KTUNE_LOG(info) << "job " << m_plan.record.id << ": finals of " << m_finalists.size()
                  << " candidates in " << measure.final_rounds << " rounds";
  queue_round();
}

// Queues the next round of the finals: every finalist once, starting one later than the last
// round did, so that none is always measured first (after a pause) or last.
void TuneRun::queue_round() {
  const std::size_t n = m_finalists.size();
  const auto first = static_cast<std::size_t>(m_rounds_started) % n;
  for (std::size_t i = 0; i < n; ++i) m_final_queue.push_back(m_finalists[(first + i) % n]);
  ++m_rounds_started;
}

// One finalist measured in one round. A finalist that fails a round leaves the finals (its first
// measurement stands); the others go on. The last reply of a round queues the next.
void TuneRun::on_final_measured(const Compiled& candidate,
                                  Result<nlohmann::json> reply) {
  auto outcome = reply ? BenchOutcome::from_json(*reply) : Result<BenchOutcome>(reply.error());
  if (outcome) m_retaken += outcome->retaken;
  if (outcome && !outcome->unlocked.empty()) {
    m_workers.note_unlocked(m_lane, outcome->unlocked);
    m_ok_rows.at(candidate.index).unlocked = outcome->unlocked;
  }
  if (outcome && outcome->status == CandidateStatus::ok && outcome->stats.median_ms > 0) {
    FinalistRounds& rounds = m_final_rounds[candidate.index];
    rounds.index = candidate.index;
    rounds.rounds.push_back(outcome->stats);
    rounds.samples.insert(rounds.samples.end(), outcome->samples_ms.begin(), outcome->samples_ms.end());
  } else {
    KTUNE_LOG(warn) << "job " << m_plan.record.id << ": "
                    << config_to_string(m_plan.configs[candidate.index])
                    << " failed in the finals and leaves them; its first measurement stands ("
                    << (!outcome ? outcome.error().message
                                 : outcome->reason.empty() ? std::string("no time")
                                                           : outcome->reason)
                    << ")";
    const auto same = [&](const Compiled& c) { return c.index == candidate.index; };
    std::erase_if(m_finalists, same);
    std::erase_if(m_final_queue, same);
    m_final_rounds.erase(candidate.index);
  }
  if (m_final_queue.empty() && m_finalists.size() >= 2 &&
      m_rounds_started < m_settings.measure.final_rounds) {
    race_finals();
    queue_round();
  }
}

// After each round from the k_race_finals_after-th on, the finalists that can no longer tie the
// best leave the finals (race_out, daemon/finals.hpp); their rounds so far are pooled into their
// rows like the others'. With five rounds this spares the last two rounds of every clear loser.
void TuneRun::race_finals() {
  const std::vector<std::size_t> losers =
      race_out(rounds_of(m_finalists), m_rounds_started, m_settings.measure.tie_margin);
  if (losers.empty()) return;
  std::vector<Compiled> kept;
  for (std::size_t i = 0; i < m_finalists.size(); ++i) {
    const bool out = std::binary_search(losers.begin(), losers.end(), i);
    (out ? m_raced_out : kept).push_back(m_finalists[i]);
  }
  KTUNE_LOG(debug) << "job " << m_plan.record.id << ": " << losers.size()
                   << " finalist(s) raced out after round " << m_rounds_started << ", "
                   << kept.size() << " left";
  m_finalists = std::move(kept);
}

std::vector<FinalistRounds> TuneRun::rounds_of(const std::vector<Compiled>& finalists) const {
  std::vector<FinalistRounds> out;
  for (const Compiled& f : finalists) out.push_back(m_final_rounds.at(f.index));
  return out;
}

// Tells the strategy and the stop condition about a result, and keeps the job's tallies.
void TuneRun::learn(std::size_t index, const ResultRecord& result) {
  const bool ok = result.status == CandidateStatus::ok;
  const std::optional<double> time =
      ok && result.stats.median_ms > 0 ? std::optional<double>(result.stats.median_ms) : std::nullopt;
  auto observe = [&](std::size_t config, std::optional<double> t) {
    if (auto r = m_strategy->observe(config, t); !r) {
      KTUNE_LOG(error) << "job " << m_plan.record.id << ": strategy refused a result: "
                       << r.error().message;
    }
    m_stop->record(t);
  };
  if (!m_batched) {
    observe(index, time);
  } else {
    m_batch_results[index] = time;
    if (m_batch_results.size() == m_batch.size()) {
      for (const std::size_t config : m_batch) observe(config, m_batch_results.at(config));
      m_batch.clear();
      m_batch_results.clear();
    }
  }
  if (ok) {
    m_ok_rows[index] = result;
    // A pruned median is of a few samples only: it never sets the pace.
    if (!result.pruned && (!m_best || better_result(result, *m_best))) {
      m_best = result;
      m_best_at = m_done;
    }
  } else {
    ++m_failed;
    ++m_failures[result.status];
  }
}

void TuneRun::record(std::size_t index, ResultRecord result) {
  const JobRecord& rec = m_plan.record;
  result.job_id = rec.id;
  result.kernel = rec.kernel;
  result.source_hash = rec.source_hash;
  result.shape = rec.shape;
  result.dtype = rec.dtype;
  result.fingerprint = rec.fingerprint;
  result.config = config_json_text(m_plan.configs[index]);
  result.config_index = static_cast<std::int64_t>(index);

  ++m_done;
  m_host.count_result(rec, result);
  learn(index, result);
  KTUNE_LOG(debug) << "job " << rec.id << " [" << m_done << "/" << m_total << "] "
                   << config_to_string(m_plan.configs[index]) << ": "
                   << to_string(result.status)
                   << (result.status == CandidateStatus::ok
                           ? " median " + std::to_string(result.stats.median_ms) + " ms" +
                                 (result.pruned ? " (pruned)" : "")
                           : " " + result.reason);
  // The row and the job's progress in one commit: durable (stored, or in the spill journal while
  // the database waits) before anyone hears of it. The event is the job as it is now.
  const std::int64_t job_id = rec.id;
  nlohmann::json event = m_host.watched(job_id) ? progress(result) : nlohmann::json();
  const std::string name = config_to_string(m_plan.configs[index]);
  m_writer.submit_result(
      std::move(result), m_done, m_failed,
      [host = &m_host, job_id, name, event = std::move(event)](const Result<void>& stored) {
        if (!stored) {
          if (TuneRun* run = host->find_run(job_id)) {
            run->fail("database: cannot store the result of " + name + ": " + stored.error().message);
          }
          return;
        }
        if (!event.is_null()) host->tell_progress(job_id, event);
      });
}

nlohmann::json TuneRun::progress(const ResultRecord& last) const {
  nlohmann::json event = {
      {"job", m_plan.record.id},
      {"done", m_done},
      {"total", m_total},
      {"failed", m_failed},
      {"params", param_order(last.config)},
      {"best_config", nullptr},
      {"best_median_ms", nullptr},
      {"best_gflops", nullptr},
      {"best_at", nullptr},
      {"last",
       {{"config", stored_config_to_json(last.config)},
        {"config_index", last.config_index},
        {"status", std::string(to_string(last.status))},
        {"reason", last.reason},
        {"median_ms", last.stats.median_ms}}},
  };
  if (m_best) {
    event["best_config"] = stored_config_to_json(m_best->config);
    event["best_median_ms"] = m_best->stats.median_ms;
    event["best_gflops"] = m_best->gflops;
    event["best_at"] = m_best_at;
  }
  return event;
}

// What the job's search learnt from and how it went (JobSearch): the prior it was given, whether
// the strategy still trusted it at the end, and the rank among the job's successes of the config
// the prior ranked first (1: the prior's favourite won; null: it failed or was not evaluated).
JobSearch TuneRun::search_record() const {
  JobSearch out;
  out.best_at = m_best_at;
  nlohmann::json prior = prior_summary(m_plan.prior_sources);
  if (prior.is_null()) return out;
  const auto use = m_strategy ? m_strategy->prior_use() : std::nullopt;
  prior["trusted"] = use ? nlohmann::json(use->trusted) : nlohmann::json(nullptr);
  prior["favourite_rank"] = nullptr;
  if (use && use->favourite) {
    const auto favourite = m_ok_rows.find(*use->favourite);
    if (favourite != m_ok_rows.end()) {
      std::int64_t rank = 1;
      for (const auto& [index, row] : m_ok_rows) {
        if (row.stats.median_ms < favourite->second.stats.median_ms) ++rank;
      }
      prior["favourite_rank"] = rank;
    }
  }
  out.prior = prior.dump();
  return out;
}

namespace {

// What a job's end writes, the rows named by config index (their ids are the store's: a row may
// still wait in the writer).
struct JobEnd {
  std::int64_t job_id = 0;
  JobTiming timing;
  JobSearch search;
  std::vector<std::pair<std::int64_t, Remeasurement>> remeasured; // by config index
  std::vector<std::int64_t> ties;                                // config indices
  WinnerRecord winner;                                           // result_id set by the write
  std::int64_t winner_index = 0;
};

// The job's end in one commit: timing, the finals' measurements, the ties, the winner, done.
// `step` names what was being written when it failed.
StoreWriter::Write job_end_write(JobEnd end, std::shared_ptr<std::string> step) {
  return [end = std::move(end), step](Store& store) mutable -> Result<void> {
    const std::int64_t job_id = end.job_id;
    *step = "its rows";
    auto stored_rows = store.job_results(job_id);
    if (!stored_rows) return stored_rows.error();
    std::map<std::int64_t, std::int64_t> ids; // config index -> result id
    for (const auto& row : *stored_rows) ids[row.config_index] = row.id;
    const auto id_of = [&](std::int64_t index) -> Result<std::int64_t> {
      const auto it = ids.find(index);
      if (it == ids.end()) {
        return make_error(ErrorCode::unknown_result, "job " + std::to_string(job_id) +
                                                         " has no stored row for config index " +
                                                         std::to_string(index));
      }
      return it->second;
    };
    *step = "timing";
    if (auto r = store.set_job_timing(job_id, end.timing); !r) return r.error();
    *step = "the search record";
    if (auto r = store.set_job_search(job_id, end.search); !r) return r.error();
    *step = "a measurement of the finals";
    for (const auto& [index, m] : end.remeasured) {
      auto id = id_of(index);
      if (!id) return id.error();
      if (auto r = store.update_measurement(*id, m); !r) return r.error();
    }
    *step = "the ties";
    std::vector<std::int64_t> tie_ids;
    for (const auto index : end.ties) {
      auto id = id_of(index);
      if (!id) return id.error();
      tie_ids.push_back(*id);
    }
    if (auto r = store.mark_ties(job_id, tie_ids); !r) return r.error();
    *step = "the winner";
    auto id = id_of(end.winner_index);
    if (!id) return id.error();
    end.winner.result_id = *id;
    if (auto r = store.upsert_winner(end.winner); !r) return r.error();
    if (auto r = store.set_job_winner(job_id, *id); !r) return r.error();
    *step = "the state";
    return store.set_job_state(job_id, JobState::done);
  };
}

} // namespace

// The job's winning group and winner from what it measured (daemon/finals.hpp), the incumbent
// read from the store. The job's rows take the pooled figures of the finals.
WinnerChoice TuneRun::choose() {
  const JobRecord& rec = m_plan.record;
  FinalsInput input;
  input.ok_rows = m_ok_rows;
  input.finalists = rounds_of(m_finalists);
  input.raced_out = rounds_of(m_raced_out);
  input.measured_here = !m_artifacts.empty();
  input.tie_margin = m_settings.measure.tie_margin;
  // The incumbent: the key's winner before this job. Kept when it is in the winning group.
  auto incumbent = m_store.find_winner(rec.kernel, rec.source_hash, rec.shape, rec.dtype, rec.fingerprint);
  if (!incumbent) {
    KTUNE_LOG(warn) << "job " << rec.id << ": cannot read the incumbent winner: "
                    << incumbent.error().message;
  }
  if (incumbent && incumbent->has_value()) input.incumbent_config = (*incumbent)->config;
  WinnerChoice choice = choose_winner(input);
  for (std::size_t i = 0; i < m_finalists.size() && !choice.verdict.tied.empty(); ++i) {
    KTUNE_LOG(debug) << "job " << rec.id << " finals: "
                     << config_to_string(m_plan.configs[m_finalists[i].index]) << " x"
                     << choice.verdict.ratio[i] << " (95% >= x" << choice.verdict.ratio_low[i] << ")"
                     << (choice.verdict.tied[i] ? " tied" : "");
  }
  for (const auto index : choice.remeasured) {
    for (const ResultRecord& row : choice.rows) {
      if (row.config_index == index) m_ok_rows[static_cast<std::size_t>(index)] = row;
    }
  }
  return choice;
}

std::string TuneRun::end_summary(const WinnerChoice& choice) const {
  const ResultRecord& winner = choice.rows.at(choice.winner);
  std::ostringstream summary;
  summary << "job " << m_plan.record.id << " done in " << log::elapsed_ms(m_started)
          << " ms: winner " << winner.config << " median " << winner.stats.median_ms << " ms"
          << (choice.ties.size() > 1 ? " (" + std::to_string(choice.ties.size()) + "-way tie" +
                                           (choice.incumbent_kept ? ", the incumbent kept)" : ")")
                                     : "")
          << ", " << m_failed << " of " << m_done << " candidates failed"
          << "; best found at candidate " << m_best_at
          << (m_plan.prior.empty() ? std::string(", no prior")
                                   : ", prior of " + std::to_string(m_plan.prior.size()) +
                                         " earlier key(s)")
          << (m_failures.empty() ? "" : " (" + describe_failures(m_failures) + ")")
          << "; " << m_retaken << " preempted samples retaken"
          << (m_killed_retries > 0 ? "; " + std::to_string(m_killed_retries) +
                                         " request(s) sent again after a worker was killed from outside"
                                   : std::string())
          << "; compile " << static_cast<std::int64_t>(m_timing.compile_ms)
          << " ms, bench " << static_cast<std::int64_t>(m_timing.bench_ms)
          << " ms, overhead " << static_cast<std::int64_t>(m_timing.overhead_ms) << " ms";
  return summary.str();
}

// A job without an ok result: its timing and search record are kept, and it fails.
void TuneRun::fail_without_winner() {
  const std::int64_t id = m_plan.record.id;
  m_writer.submit("job " + std::to_string(id) + "'s timing",
                  [id, timing = m_timing, search = search_record()](Store& store) -> Result<void> {
                    if (auto r = store.set_job_timing(id, timing); !r) return r;
                    return store.set_job_search(id, search);
                  },
                  [id](const Result<void>& r) {
                    if (!r) KTUNE_LOG(warn) << "job " << id << ": cannot store its timing: " << r.error().message;
                  });
  m_host.end_job(id, JobState::failed,
                 "no candidate succeeded (" + describe_failures(m_failures) + ")");
}

void TuneRun::finish() {
  const JobRecord& rec = m_plan.record;
  account();
  if (m_ok_rows.empty()) {
    fail_without_winner();
    return;
  }
  const WinnerChoice choice = choose();
  const ResultRecord& chosen = choice.rows.at(choice.winner);
  JobEnd end;
  end.job_id = rec.id;
  end.timing = m_timing;
  end.search = search_record();
  end.ties = choice.ties;
  end.winner_index = chosen.config_index;
  end.winner.kernel = rec.kernel;
  end.winner.source_hash = rec.source_hash;
  end.winner.shape = rec.shape;
  end.winner.dtype = rec.dtype;
  end.winner.fingerprint = rec.fingerprint;
  end.winner.job_id = chosen.job_id;
  end.winner.config = chosen.config;
  end.winner.median_ms = chosen.stats.median_ms;
  end.winner.gflops = chosen.gflops;
  for (const auto index : choice.remeasured) {
    const ResultRecord& row = m_ok_rows.at(static_cast<std::size_t>(index));
    end.remeasured.emplace_back(index, Remeasurement{row.stats, row.samples_ms, row.gflops,
                                                     row.gbps, row.unlocked});
  }
  const std::int64_t job_id = rec.id;
  auto step = std::make_shared<std::string>();
  m_writer.submit("job " + std::to_string(job_id) + "'s end", job_end_write(std::move(end), step),
                  [host = &m_host, job_id, step,
                   summary = end_summary(choice)](const Result<void>& stored) {
                    if (!stored) {
                      host->end_job(job_id, JobState::failed,
                                    "database: cannot store " + *step + ": " + stored.error().message);
                      return;
                    }
                    KTUNE_LOG(info) << summary;
                    host->announce_end(job_id, JobState::done);
                  });
}


} // namespace ktune::daemon
