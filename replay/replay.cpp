#include "replay/replay.hpp"

#include "search/stop_condition.hpp"
#include "search/strategy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ktune::replay {

std::uint64_t repeat_seed(std::uint64_t seed, std::size_t repeat) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(repeat) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {

// Runs `strategy` within `budget`; with a wall time in it, the StopCondition's clock is the
// simulated one: the recorded costs of the evaluations so far.
Result<ReplayRun> run_within(const RecordedSpace& recorded, const std::string& strategy, const search::Budget& budget,
                             std::uint64_t seed, std::size_t batch, const search::Prior& prior) {
  auto made = search::make_strategy(strategy, recorded.space, seed, prior);
  if (!made) return made.error();
  search::Strategy& s = **made;
  const auto start = search::StopCondition::Clock::time_point{};
  search::StopCondition stop(budget, recorded.space.size(), start);
  const bool costed = recorded.cost_ms.size() == recorded.time_ms.size();
  ReplayRun run;
  run.proposals.reserve(stop.evaluation_limit());
  run.best_after.reserve(stop.evaluation_limit());
  double best = std::numeric_limits<double>::infinity();
  double elapsed_ms = 0;
  auto now = [&] {
    return start + std::chrono::duration_cast<search::StopCondition::Clock::duration>(
                       std::chrono::duration<double, std::milli>(elapsed_ms));
  };
  while (!stop.reached(now())) {
    const auto proposed = s.propose(std::min(std::max<std::size_t>(batch, 1), stop.proposals_left(s.pending_count())));
    if (proposed.empty()) break; // cannot happen with nothing pending unless exhausted
    for (std::size_t id : proposed) {
      const auto& t = recorded.time_ms[id];
      // Proposals are valid and new by contract; an error here is a bug in a strategy.
      const auto observed = s.observe(id, t);
      if (!observed) return observed.error();
      stop.record(t);
      if (t) {
        best = std::min(best, *t);
      } else {
        ++run.failed;
      }
      run.proposals.push_back(id);
      run.best_after.push_back(best);
      if (costed) {
        elapsed_ms += recorded.cost_ms[id];
        run.elapsed_ms.push_back(elapsed_ms);
      }
    }
  }
  return run;
}

} // namespace

Result<ReplayRun> replay_run(const RecordedSpace& recorded, const std::string& strategy, std::size_t budget,
                             std::uint64_t seed, std::size_t batch, const search::Prior& prior) {
  return run_within(recorded, strategy, search::Budget{budget, std::nullopt, std::nullopt, std::nullopt}, seed, batch,
                    prior);
}

Result<ReplayRun> replay_run_for(const RecordedSpace& recorded, const std::string& strategy,
                                 std::chrono::milliseconds simulated, std::uint64_t seed, std::size_t batch,
                                 const search::Prior& prior) {
  if (recorded.cost_ms.size() != recorded.time_ms.size()) {
    return make_error(ErrorCode::no_cost, recorded.label + " records no compile and benchmark time to charge a time budget (" +
                                     recorded.cost_missing + "); give the budget in evaluations instead");
  }
  return run_within(recorded, strategy, search::Budget{std::nullopt, std::nullopt, simulated, std::nullopt}, seed,
                    batch, prior);
}

double random_expected_failures(const RecordedSpace& recorded, double evaluations) {
  if (recorded.space.size() == 0) return 0;
  return evaluations * static_cast<double>(recorded.failed) / static_cast<double>(recorded.space.size());
}

Result<search::PriorSource> prior_source(const RecordedSpace& target, const RecordedSpace& source) {
  const auto& to = target.space.params();
  const auto& from = source.space.params();
  auto names = [](const std::vector<search::SearchParam>& params) {
    std::vector<std::string> out;
    for (const auto& p : params) out.push_back(p.name);
    std::sort(out.begin(), out.end());
    return out;
  };
  if (names(to) != names(from)) {
    auto list = [](const std::vector<std::string>& n) {
      std::string out;
      for (const auto& name : n) out += (out.empty() ? "" : ",") + name;
      return out;
    };
    return make_error(ErrorCode::bad_prior, "prior " + source.label + " has the params " + list(names(from)) + ", " +
                                       target.label + " has " + list(names(to)) +
                                       ": a prior must be a recording of the same kernel");
  }
  // value_map[p][v]: the index in target of value v of source's param p (-1: target has no such value).
  std::vector<std::size_t> position(from.size());
  std::vector<std::vector<std::int64_t>> value_map(from.size());
  for (std::size_t p = 0; p < from.size(); ++p) {
    for (std::size_t q = 0; q < to.size(); ++q) {
      if (to[q].name == from[p].name) position[p] = q;
    }
    for (const auto& text : source.value_text[p]) {
      const auto& target_texts = target.value_text[position[p]];
      const auto it = std::find(target_texts.begin(), target_texts.end(), text);
      value_map[p].push_back(it == target_texts.end() ? -1 : it - target_texts.begin());
    }
  }
  search::PriorSource out;
  out.label = source.label;
  std::vector<std::uint32_t> indices(to.size());
  for (std::size_t id = 0; id < source.space.size(); ++id) {
    const auto from_indices = source.space.indices(id);
    bool known = true;
    for (std::size_t p = 0; p < from.size() && known; ++p) {
      const std::int64_t v = value_map[p][from_indices[p]];
      known = v >= 0;
      if (known) indices[position[p]] = static_cast<std::uint32_t>(v);
    }
    if (!known) continue;
    if (const auto mapped = target.space.find(indices)) out.results.push_back({*mapped, source.time_ms[id]});
  }
  return out;
}

std::vector<std::size_t> even_checkpoints(std::size_t budget, std::size_t steps) {
  std::vector<std::size_t> out;
  if (budget == 0) return out;
  steps = std::max<std::size_t>(1, steps);
  for (std::size_t i = 1; i <= steps; ++i) {
    const auto k = static_cast<std::size_t>(std::llround(static_cast<double>(budget) * static_cast<double>(i) /
                                                         static_cast<double>(steps)));
    if (k >= 1 && (out.empty() || k > out.back())) out.push_back(k);
  }
  if (out.empty() || out.back() != budget) out.push_back(budget);
  return out;
}

namespace {

// The report's checkpoints, empty: the time checkpoints of a time budget (ascending within it;
// none = the budget), else the evaluation checkpoints (ascending within the budget, capped at
// the space size, duplicates dropped; none = the budget).
Result<std::vector<CheckpointStats>> empty_checkpoints(const ReplayOptions& options, std::size_t budget) {
  std::vector<CheckpointStats> out;
  if (options.time_budget) {
    auto times = options.time_checkpoints;
    if (times.empty()) times.push_back(*options.time_budget);
    for (std::size_t i = 0; i < times.size(); ++i) {
      if (times[i].count() <= 0 || times[i] > *options.time_budget || (i > 0 && times[i] <= times[i - 1])) {
        return make_error(ErrorCode::bad_budget, "replay: time checkpoints must ascend within (0, " +
                                            std::to_string(options.time_budget->count()) + "] ms, found " +
                                            std::to_string(times[i].count()) + " at position " + std::to_string(i));
      }
    }
    for (auto t : times) out.push_back(CheckpointStats{0, t, 0, 0, 1, 0, 0});
    return out;
  }
  std::vector<std::size_t> checkpoints = options.checkpoints;
  if (checkpoints.empty()) checkpoints.push_back(options.budget);
  for (std::size_t i = 0; i < checkpoints.size(); ++i) {
    if (checkpoints[i] == 0 || checkpoints[i] > options.budget ||
        (i > 0 && checkpoints[i] <= checkpoints[i - 1])) {
      return make_error(ErrorCode::bad_budget, "replay: checkpoints must ascend within [1, " +
                                          std::to_string(options.budget) + "], found " +
                                          std::to_string(checkpoints[i]) + " at position " + std::to_string(i));
    }
  }
  for (auto& c : checkpoints) c = std::min(c, budget);
  checkpoints.erase(std::unique(checkpoints.begin(), checkpoints.end()), checkpoints.end());
  for (std::size_t c : checkpoints) out.push_back(CheckpointStats{c, {}, 0, 0, 1, 0, 0});
  return out;
}

// One run's best time at each checkpoint added to the checkpoints' sums (the means are divided
// by the repeats at the end). With a time budget a checkpoint counts the evaluations started
// before it: those whose predecessor ended before it.
void add_run(std::vector<CheckpointStats>& checkpoints, const ReplayRun& run, const RecordedSpace& recorded,
             bool timed) {
  for (auto& cp : checkpoints) {
    std::size_t made = std::min(cp.evaluations, run.best_after.size());
    if (timed) {
      made = 0;
      while (made < run.elapsed_ms.size() &&
             (made == 0 ? 0.0 : run.elapsed_ms[made - 1]) < static_cast<double>(cp.simulated.count())) {
        ++made;
      }
    }
    const double best = made == 0 ? std::numeric_limits<double>::infinity() : run.best_after[made - 1];
    const double fraction = std::isfinite(best) ? recorded.optimum_ms / best : 0.0;
    cp.mean_evaluations += static_cast<double>(made);
    cp.mean_fraction += fraction;
    cp.min_fraction = std::min(cp.min_fraction, fraction);
    cp.max_fraction = std::max(cp.max_fraction, fraction);
    if (best <= recorded.optimum_ms) cp.optimum_rate += 1;
  }
}

} // namespace

Result<ReplayReport> run_replay(const RecordedSpace& recorded, const ReplayOptions& options) {
  if (options.budget == 0 && !options.time_budget) {
    return make_error(ErrorCode::bad_budget, "replay: expected a budget of at least 1 evaluation");
  }
  if (options.repeats == 0) return make_error(ErrorCode::bad_budget, "replay: expected at least 1 repeat");
  if (options.batch == 0) return make_error(ErrorCode::bad_budget, "replay: expected a batch of at least 1 config");
  if (options.time_budget && options.time_budget->count() <= 0) {
    return make_error(ErrorCode::bad_budget, "replay: expected a time budget of more than 0 ms");
  }
  ReplayReport report;
  report.strategy = options.strategy;
  report.repeats = options.repeats;
  report.budget = options.time_budget ? recorded.space.size() : std::min(options.budget, recorded.space.size());
  report.time_budget = options.time_budget;
  auto checkpoints = empty_checkpoints(options, report.budget);
  if (!checkpoints) return checkpoints.error();
  report.checkpoints = std::move(*checkpoints);

  double failed_total = 0;
  double evaluations_total = 0;
  for (std::size_t r = 0; r < options.repeats; ++r) {
    const std::uint64_t seed = repeat_seed(options.seed, r);
    auto run = options.time_budget
                   ? replay_run_for(recorded, options.strategy, *options.time_budget, seed, options.batch,
                                    options.prior)
                   : replay_run(recorded, options.strategy, report.budget, seed, options.batch, options.prior);
    if (!run) return run.error();
    add_run(report.checkpoints, *run, recorded, options.time_budget.has_value());
    const std::size_t made = run->proposals.size();
    report.min_evaluations = r == 0 ? made : std::min(report.min_evaluations, made);
    report.max_evaluations = std::max(report.max_evaluations, made);
    evaluations_total += static_cast<double>(made);
    failed_total += static_cast<double>(run->failed);
  }
  const auto n = static_cast<double>(options.repeats);
  for (auto& cp : report.checkpoints) {
    cp.mean_fraction /= n;
    cp.optimum_rate /= n;
    cp.mean_evaluations /= n;
  }
  report.mean_failed = failed_total / n;
  report.mean_evaluations = evaluations_total / n;
  report.random_expected_failed = random_expected_failures(recorded, report.mean_evaluations);
  return report;
}

} // namespace ktune::replay
