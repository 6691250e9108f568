#include "cli/job_view.hpp"

#include "cli/format.hpp"
#include "cli/table.hpp"
#include "core/file_io.hpp"

#include <algorithm>
#include <climits>
#include <vector>

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// "BM=64,BN=32 median 0.123 ms, 213.5 GFLOP/s": the words of the progress line's best and of
// the winner line.
std::string candidate_text(const json& config, double median_ms, double gflops) {
  std::string text = format_config(config, ",") + " median " + format_ms(median_ms) + " ms";
  if (gflops > 0) text += ", " + format_gflops(gflops) + " GFLOP/s";
  return text;
}

void print_job_header(std::ostream& out, const json& job, const json& winner) {
  out << "job " << as_text(field(job, "id")) << ": " << as_text(field(job, "kernel")) << ' '
         << as_text(field(job, "shape")) << ", " << as_text(field(job, "dtype")) << ", "
         << as_text(field(job, "device")) << '\n';
  std::string state = as_text(field(job, "state"));
  if (!field(job, "strategy").is_null()) state += " (" + as_text(field(job, "strategy")) + ")";
  out << "  state     " << state << '\n';
  out << "  progress  " << as_int(field(job, "done")) << '/' << as_int(field(job, "total"))
         << " done, " << as_int(field(job, "failed")) << " failed\n";
  out << "  created   " << format_time(field(job, "created_at")) << '\n';
  out << "  started   " << format_time(field(job, "started_at")) << '\n';
  std::string finished = format_time(field(job, "finished_at"));
  const json& started_at = field(job, "started_at");
  const json& finished_at = field(job, "finished_at");
  if (started_at.is_number() && finished_at.is_number()) {
    double seconds = finished_at.get<double>() - started_at.get<double>();
    if (finished_at.get<double>() > 1e11) seconds /= 1000;
    if (seconds >= 0) finished += " (took " + format_duration(seconds) + ")";
  }
  out << "  finished  " << finished << '\n';
  const json& timing = field(job, "timing");
  if (timing.is_object() && as_double(field(timing, "bench_ms")) + as_double(field(timing, "compile_ms")) > 0) {
    auto seconds = [&](const char* key) { return format_duration(as_double(field(timing, key)) / 1000); };
    out << "  time      queue " << seconds("queue_ms") << ", compile " << seconds("compile_ms")
           << ", bench " << seconds("bench_ms") << ", overhead " << seconds("overhead_ms")
           << " (" << as_int(field(timing, "compiles")) << " compiled, the rest cached or reused)\n";
  }
  // The search's record: when it found its best, and what its prior was and did.
  const json& prior = field(job, "prior");
  if (const auto best_at = as_int(field(job, "best_at")); best_at > 0 || prior.is_object()) {
    std::string search = best_at > 0 ? "best at candidate " + std::to_string(best_at) : "no full measurement";
    if (prior.is_object()) {
      const json& sources = field(prior, "sources");
      const std::size_t count = sources.is_array() ? sources.size() : 0;
      search += "; prior of " + std::to_string(count) + " earlier tune" + (count == 1 ? "" : "s") + " (" +
                std::to_string(as_int(field(prior, "results"))) + " results)";
      const json& trusted = field(prior, "trusted");
      if (trusted.is_boolean()) search += trusted.get<bool>() ? ", trusted to the end" : ", distrusted (it disagreed with the results here)";
      if (const auto rank = as_int(field(prior, "favourite_rank")); rank > 0)
        search += ", its favourite ranked " + std::to_string(rank);
    } else if (as_text(field(job, "strategy")) == "bayes") {
      search += "; no prior";
    }
    out << "  search    " << search << '\n';
  }
  const json& error = field(job, "error");
  if (error.is_string() && !error.get<std::string>().empty())
    out << "  error     " << first_line(error.get<std::string>(), MoreLines::mark) << '\n';
  if (winner.is_object())
    out << "  winner    " << format_config(field(winner, "config"), ",") << ", median "
           << format_ms(as_double(field(winner, "median_ms"))) << " ms, "
           << format_gflops(as_double(field(winner, "gflops"))) << " GFLOP/s\n";
  else
    out << "  winner    none\n";
}

// Rows measured without the device's machine-wide lock (another ktuned may have measured at
// the same time): counted, with the first reason.
void print_unlocked_warning(std::ostream& out, const json& all_results) {
  std::size_t unlocked = 0;
  std::string unlocked_why;
  for (const auto& r : all_results) {
    if (const json& why = field(r, "unlocked"); why.is_string()) {
      if (unlocked++ == 0) unlocked_why = why.get<std::string>();
    }
  }
  if (unlocked > 0) {
    out << "  warning   " << unlocked << " result(s) measured without the device lock: "
        << unlocked_why << '\n';
  }
}

// One row per candidate of `results`: '*' marks the winner, "ok (tie)" its tied finalists.
void print_candidate_table(std::ostream& out, const json& results, const json& all_results,
                           const json& winner) {
  // `tied` marks the winning group, the winner included: a tie needs two.
  const auto tied_count = std::count_if(all_results.begin(), all_results.end(), [](const json& r) {
    return field(r, "tied") == json(true);
  });
  const json& winner_config = field(winner, "config");
  bool marked = false;
  Table table({{"  CONFIG"}, {"STATUS"}, {"MEDIAN(ms)", Align::right},
               {"GFLOP/s", Align::right}, {"RESULT", Align::right}, {"REASON"}});
  for (const auto& r : results) {
    const json& config = field(r, "config");
    bool is_winner = !marked && winner_config.is_object() && config == winner_config;
    marked = marked || is_winner;
    std::string status = as_text(field(r, "status"));
    bool ok = status == "ok";
    if (ok && field(r, "pruned") == json(true)) status = "ok (pruned)";
    if (ok && tied_count >= 2 && field(r, "tied") == json(true)) status = "ok (tie)";
    if (ok && field(r, "unlocked").is_string()) status += " (unlocked)";
    const json& median = field(r, "median_ms");
    const json& reason = field(r, "reason");
    table.add_row({(is_winner ? "* " : "  ") + format_config(config, ","), status,
                   ok && median.is_number() ? format_ms(median.get<double>()) : "-",
                   ok ? format_gflops(as_double(field(r, "gflops"))) : "-",
                   field(r, "id").is_number() ? std::to_string(field(r, "id").get<std::int64_t>())
                                              : "-",
                   reason.is_string() && !reason.get<std::string>().empty()
                       ? first_line(reason.get<std::string>(), MoreLines::mark)
                       : ""});
  }
  out << '\n';
  table.print(out);
}

} // namespace

json arrange_results(const json& results, const JobViewOptions& view) {
  if (!results.is_array()) return json::array();
  std::vector<json> rows(results.begin(), results.end());
  auto index = [](const json& r) { return as_int(field(r, "config_index"), INT64_MAX); };
  auto ok = [](const json& r) { return as_text(field(r, "status")) == "ok"; };
  auto median = [](const json& r) { return as_double(field(r, "median_ms"), 1e300); };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const json& a, const json& b) { return index(a) < index(b); });
  if (view.sort == JobSort::median) {
    std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
      if (ok(a) != ok(b)) return ok(a);
      if (ok(a)) return median(a) < median(b);
      return as_text(field(a, "status")) < as_text(field(b, "status"));
    });
  } else if (view.sort == JobSort::status) {
    std::stable_sort(rows.begin(), rows.end(), [&](const json& a, const json& b) {
      if (ok(a) != ok(b)) return ok(a);
      const auto sa = as_text(field(a, "status")), sb = as_text(field(b, "status"));
      if (sa != sb) return sa < sb;
      return median(a) < median(b);
    });
  }
  if (view.top > 0 && rows.size() > static_cast<std::size_t>(view.top)) rows.resize(view.top);
  return json(rows);
}

void print_job(std::ostream& out, const json& reply, const json& all_results) {
  const json& winner = field(reply, "winner");
  print_job_header(out, field(reply, "job"), winner);
  if (auto tie = tie_break_line(winner, all_results); !tie.empty()) out << "  " << tie << '\n';
  print_unlocked_warning(out, all_results);
  const json& results = field(reply, "results");
  if (!results.is_array() || results.empty()) {
    out << "\nno candidates measured yet\n";
    return;
  }
  print_candidate_table(out, results, all_results, winner);
  const std::size_t total_rows = all_results.is_array() ? all_results.size() : 0;
  if (results.size() < total_rows)
    out << "(" << results.size() << " of " << total_rows << " candidates; --top 0 shows all)\n";
}

std::string winner_line(const json& winner) {
  return "winner: " + candidate_text(field(winner, "config"), as_double(field(winner, "median_ms")),
                                     as_double(field(winner, "gflops")));
}

std::string tie_break_line(const json& winner, const json& results) {
  if (!winner.is_object() || !results.is_array()) return {};
  const double winner_median = as_double(field(winner, "median_ms"));
  const json* fastest = nullptr;
  for (const auto& r : results) {
    if (field(r, "tied") != json(true) || as_text(field(r, "status")) != "ok") continue;
    const double median = as_double(field(r, "median_ms"));
    if (median < winner_median && (!fastest || median < as_double(field(*fastest, "median_ms"))))
      fastest = &r;
  }
  if (!fastest) return {};
  return "tie: " + candidate_text(field(*fastest, "config"), as_double(field(*fastest, "median_ms")),
                                  as_double(field(*fastest, "gflops"))) +
         " is within the tie margin; the tie-break (fewer resources, then config order) chose "
         "the winner";
}

std::string finals_line(const json& search_best, const json& winner, const json& results) {
  if (!search_best.is_object() || search_best.empty() || !winner.is_object() || !results.is_array())
    return {};
  const json& winner_config = field(winner, "config");
  auto same = [](const json& a, const json& b) {
    // Compared as sets of parameters: the order of the members does not matter.
    return nlohmann::json(a) == nlohmann::json(b);
  };
  if (same(search_best, winner_config)) return {};
  for (const auto& r : results) {
    if (!same(field(r, "config"), search_best) || field(r, "remeasured") != json(true)) continue;
    return "finals: the search's best " + format_config(search_best, ",") +
           " measured " + format_ms(as_double(field(r, "median_ms"))) +
           " ms when the finalists were measured again in interleaved rounds; the winner was "
           "faster there";
  }
  return {};
}

std::string ProgressPrinter::line(const json& data) {
  std::int64_t done = as_int(field(data, "done"));
  std::int64_t total = as_int(field(data, "total"));
  std::int64_t failed = as_int(field(data, "failed"));
  std::string text = "[" + std::to_string(done) + "/" + std::to_string(total) + "] failed " +
                     std::to_string(failed) + "  best: ";
  const json& config = field(data, "best_config");
  if (!config.is_object() || config.empty()) return text + "-";
  return text + candidate_text(config, as_double(field(data, "best_median_ms")),
                               as_double(field(data, "best_gflops")));
}

void ProgressPrinter::update(const json& data) {
  std::int64_t done = as_int(field(data, "done"));
  std::int64_t total = as_int(field(data, "total"));
  if (m_tty) {
    m_err << '\r' << line(data) << "\x1b[K" << std::flush;
    m_open_line = true;
    return;
  }
  auto now = Clock::now();
  std::int64_t decile = total > 0 ? done * 10 / total : 0;
  bool due = !m_printed_any || decile > m_last_decile || (done == total && done != m_last_done) ||
             (done != m_last_done && now - m_last_print >= std::chrono::seconds(2));
  if (!due) return;
  m_err << line(data) << '\n' << std::flush;
  m_printed_any = true;
  m_last_decile = decile;
  m_last_done = done;
  m_last_print = now;
}

void ProgressPrinter::finish() {
  if (m_open_line) m_err << '\n' << std::flush;
  m_open_line = false;
}
} // namespace ktune::cli
