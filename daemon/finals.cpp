#include "daemon/finals.hpp"

#include "db/job_winner.hpp"

#include <algorithm>
#include <utility>

namespace ktune::daemon {

namespace {

// A near-tie of `best` by median alone: the rule for a best that was not in the finals (a row
// reused from an earlier job, or a job without finals).
bool near_tie(const ResultRecord& row, const ResultRecord& best, double margin) {
  return !row.pruned && row.stats.median_ms <= best.stats.median_ms * (1.0 + margin);
}

// The winning group without finals, as config indices: every row reused from an earlier job that
// judged its ties when nothing was measured here (that judgement stands, so a re-run of a
// finished key names the same winner); else the fastest row and those within tie_margin of it.
std::vector<std::size_t> ties_without_finals(const std::vector<ResultRecord>& rows,
                                             bool measured_here, double tie_margin) {
  std::vector<std::size_t> ties;
  if (!measured_here) {
    for (const auto& row : rows) {
      if (row.status == CandidateStatus::ok && row.tied) {
        ties.push_back(static_cast<std::size_t>(row.config_index));
      }
    }
    if (!ties.empty()) return ties;
  }
  const ResultRecord& best = *fastest_result(rows);
  for (const auto& row : rows) {
    if (row.status == CandidateStatus::ok && near_tie(row, best, tie_margin)) {
      ties.push_back(static_cast<std::size_t>(row.config_index));
    }
  }
  return ties;
}

} // namespace

std::vector<std::size_t> pick_finalists(const std::map<std::size_t, ResultRecord>& ok_rows,
                                        const std::optional<ResultRecord>& best,
                                        const std::set<std::size_t>& measured_here,
                                        double final_margin, int finalists) {
  if (!best || measured_here.count(static_cast<std::size_t>(best->config_index)) == 0) return {};
  std::vector<const ResultRecord*> near;
  for (const auto& [index, row] : ok_rows) {
    if (row.pruned || measured_here.count(index) == 0) continue;
    if (row.stats.median_ms > best->stats.median_ms * (1.0 + final_margin)) continue;
    near.push_back(&row);
  }
  std::sort(near.begin(), near.end(), [](const ResultRecord* a, const ResultRecord* b) {
    return better_result(*a, *b);
  });
  near.resize(std::min(near.size(), static_cast<std::size_t>(std::max(0, finalists))));
  if (near.size() < 2) return {};
  std::vector<std::size_t> out;
  for (const ResultRecord* row : near) out.push_back(static_cast<std::size_t>(row->config_index));
  std::sort(out.begin(), out.end());
  return out;
}

FinalsVerdict judge_rounds(const std::vector<FinalistRounds>& finalists, double tie_margin) {
  std::vector<std::vector<double>> round_ms;
  for (const FinalistRounds& f : finalists) {
    round_ms.emplace_back();
    for (const SampleStats& s : f.rounds) round_ms.back().push_back(s.median_ms);
  }
  return judge_finals(round_ms, tie_margin);
}

std::vector<std::size_t> race_out(const std::vector<FinalistRounds>& finalists, int rounds_done,
                                  double tie_margin) {
  if (rounds_done < k_race_finals_after || finalists.size() <= 2) return {};
  const FinalsVerdict verdict = judge_rounds(finalists, tie_margin);
  std::vector<std::pair<double, std::size_t>> losers; // (ratio_low, position)
  for (std::size_t i = 0; i < finalists.size(); ++i) {
    if (verdict.ratio_low[i] > 1.0 + tie_margin) losers.emplace_back(verdict.ratio_low[i], i);
  }
  std::sort(losers.rbegin(), losers.rend());
  if (losers.size() > finalists.size() - 2) losers.resize(finalists.size() - 2);
  std::vector<std::size_t> out;
  for (const auto& loser : losers) out.push_back(loser.second);
  std::sort(out.begin(), out.end());
  return out;
}

void pool_rounds_into(ResultRecord& row, const FinalistRounds& finals) {
  // A worker that sends no samples (an older one) leaves the rounds' figures pooled.
  const SampleStats pooled =
      finals.samples.empty()
          ? pool_rounds(finals.rounds)
          : summarize(std::vector<double>(finals.samples.begin(), finals.samples.end()));
  const double speedup = row.stats.median_ms / pooled.median_ms;
  row.stats = pooled;
  row.samples_ms = finals.samples;
  row.gflops *= speedup;
  row.gbps *= speedup;
  row.remeasured = true;
}

WinnerChoice choose_winner(const FinalsInput& input) {
  WinnerChoice out;
  std::map<std::size_t, ResultRecord> by_index = input.ok_rows;
  const bool finals = input.finalists.size() >= 2;
  if (finals) {
    for (const auto* group : {&input.finalists, &input.raced_out}) {
      for (const FinalistRounds& f : *group) {
        pool_rounds_into(by_index.at(f.index), f);
        out.remeasured.push_back(static_cast<std::int64_t>(f.index));
      }
    }
  }
  out.rows.reserve(by_index.size());
  for (auto& [index, row] : by_index) out.rows.push_back(std::move(row));

  // After finals, a row outside them never wins: its time was taken at another moment.
  std::vector<std::size_t> ties;
  if (finals) {
    out.verdict = judge_rounds(input.finalists, input.tie_margin);
    for (std::size_t i = 0; i < input.finalists.size(); ++i) {
      if (out.verdict.tied[i]) ties.push_back(input.finalists[i].index);
    }
  } else {
    ties = ties_without_finals(out.rows, input.measured_here, input.tie_margin);
  }
  for (auto& row : out.rows) {
    row.tied = std::find(ties.begin(), ties.end(), static_cast<std::size_t>(row.config_index)) !=
               ties.end();
    if (row.tied) out.ties.push_back(row.config_index);
  }
  const ResultRecord* chosen = pick_winner(out.rows, input.incumbent_config);
  out.winner = static_cast<std::size_t>(chosen - out.rows.data());
  out.incumbent_kept = !input.incumbent_config.empty() && chosen->config == input.incumbent_config;
  return out;
}

} // namespace ktune::daemon
