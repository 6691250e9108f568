#include "cli/tune_command.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/format.hpp"
#include "cli/job_view.hpp"
#include "client/client.hpp"
#include "core/protocol.hpp"
#include "search/stop_condition.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <map>
#include <utility>

#include <unistd.h>

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;
using std::chrono::milliseconds;


// While `tune --wait` is attached: Ctrl-C (SIGINT) prints that the job goes on in ktuned and how
// to follow or cancel it, then exits 130. The text is prepared outside the handler, which only
// calls write() and _exit().
char g_detach_text[256];
volatile std::sig_atomic_t g_detach_length = 0;

extern "C" void on_detach_signal(int) {
  if (g_detach_length > 0) {
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, g_detach_text, static_cast<std::size_t>(g_detach_length));
  }
  ::_exit(130);
}

class DetachNotice {
public:
  DetachNotice() {
    set_text("\nktune: detached; the job keeps running in ktuned (`ktune jobs` lists it, "
             "`ktune cancel N` cancels it)\n");
    struct sigaction action {};
    action.sa_handler = on_detach_signal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &m_previous);
  }
  ~DetachNotice() { ::sigaction(SIGINT, &m_previous, nullptr); }
  DetachNotice(const DetachNotice&) = delete;
  DetachNotice& operator=(const DetachNotice&) = delete;

  void set_job(std::int64_t job) {
    if (job == m_job) return;
    m_job = job;
    const std::string id = std::to_string(job);
    set_text("\nktune: detached; job " + id + " keeps running in ktuned (`ktune job " + id +
             "` shows it, `ktune cancel " + id + "` cancels it)\n");
  }

private:
  static void set_text(const std::string& text) {
    g_detach_length = 0;
    const std::size_t n = std::min(text.size(), sizeof g_detach_text);
    std::memcpy(g_detach_text, text.data(), n);
    g_detach_length = static_cast<std::sig_atomic_t>(n);
  }
  std::int64_t m_job = 0;
  struct sigaction m_previous {};
};


// ", prior: 3 earlier tunes, 412 results" for a tune reply's "prior"; "" for null.
std::string prior_note(const json& prior) {
  if (!prior.is_object()) return "";
  const json& sources = field(prior, "sources");
  const std::size_t count = sources.is_array() ? sources.size() : 0;
  return ", prior: " + std::to_string(count) + " earlier tune" + (count == 1 ? "" : "s") + ", " +
         std::to_string(as_int(field(prior, "results"))) + " results";
}

json tune_request(const TuneOptions& options) {
  protocol::TuneRequest request;
  request.kernel = options.kernel;
  request.shape = options.shape;
  request.dtype = options.dtype;
  request.device = options.device;
  request.strategy = options.strategy;
  request.budget = options.budget;
  request.budget_fraction = options.budget_fraction;
  request.budget_s = options.budget_s;
  request.seed = options.seed;
  request.remeasure = options.remeasure;
  request.cold = options.cold;
  request.wait = options.wait;
  json body = request.to_json();
  body["op"] = "tune";
  if (options.retry_failed) body["retry_failed"] = true;
  if (options.compile_timeout_s) body["compile_timeout_s"] = *options.compile_timeout_s;
  if (options.bench_timeout_s) body["bench_timeout_s"] = *options.bench_timeout_s;
  return body;
}

// A reply's jobs: "jobs" for --device all, else the reply itself is the one job.
json jobs_of(const json& result) {
  const json& jobs = field(result, "jobs");
  return jobs.is_array() ? jobs : json::array({result});
}

// Without --wait: one line per queued job.
void print_queued(Output& io, const json& result) {
  for (const json& queued : jobs_of(result)) {
    const json& device = field(queued, "device");
    io.out << "job " << as_text(field(queued, "job")) << ' ' << as_text(field(queued, "state"))
           << (device.is_string() ? " on " + device.get<std::string>() : std::string()) << " ("
           << as_int(field(queued, "total")) << " candidates" << prior_note(field(queued, "prior"))
           << ")\n";
  }
}

// What the progress events of an attached tune said, per job.
struct SearchRecord {
  std::map<std::int64_t, json> search_best;       // job -> the best config its progress line showed
  std::map<std::int64_t, std::int64_t> best_at;   // job -> the candidate that found that best
};

// --wait: the tune request on `conn` with its progress on io.err, Ctrl-C detaching.
Result<json> attach(Connection& conn, json body, Output& io, SearchRecord& record) {
  ProgressPrinter progress(io.err, io.err_is_tty);
  DetachNotice notice;
  auto result = call(conn, std::move(body), milliseconds(0), [&](const json& event) {
    const json& data = field(event, "data");
    if (const auto job = as_int(field(data, "job")); job > 0) {
      notice.set_job(job);
      if (const json& best = field(data, "best_config"); best.is_object()) record.search_best[job] = best;
      if (const auto at = as_int(field(data, "best_at")); at > 0) record.best_at[job] = at;
    }
    progress.update(data);
  });
  progress.finish();
  return result;
}

// The notes under a winner line: a tie-break's choice, the finals' overruling of the search's
// best. They need the job's candidate rows, asked for on `conn`.
void print_winner_notes(Output& io, Connection& conn, std::int64_t job, const json& winner,
                        const SearchRecord& record) {
  json job_request{{"op", "job"}, {"job", job}};
  auto full = call(conn, std::move(job_request), k_request_timeout);
  if (!full) return;
  if (auto tie = tie_break_line(winner, field(*full, "results")); !tie.empty()) io.out << tie << '\n';
  const auto best = record.search_best.find(job);
  if (best == record.search_best.end()) return;
  if (auto finals = finals_line(best->second, winner, field(*full, "results")); !finals.empty())
    io.out << finals << '\n';
}

// One job's end: its winner, a tie-break note, and its counts. True when it has a winner.
bool print_job_end(Output& io, Connection& conn, const json& summary, const SearchRecord& record) {
  const json& job = field(summary, "job");
  const json& winner = field(summary, "winner");
  const std::string state = as_text(field(job, "state"));
  const std::string id = as_text(field(job, "id"));
  if (winner.is_object()) {
    io.out << winner_line(winner) << '\n';
    print_winner_notes(io, conn, as_int(field(job, "id")), winner, record);
  }
  if (state != "done") {
    std::string error = as_text(field(job, "error"));
    io.err << "ktune: job " << id << ' ' << state << (error == "-" ? "" : ": " + error) << '\n';
    return false;
  }
  const auto found = record.best_at.find(as_int(field(job, "id")));
  io.out << "job " << id << " done: " << as_int(field(job, "total")) << " candidates, "
         << as_int(field(job, "failed")) << " failed"
         << (found == record.best_at.end()
                 ? std::string()
                 : "; the search's best came at candidate " + std::to_string(found->second))
         << '\n';
  if (!winner.is_object())
    io.err << "ktune: no candidate passed; see `ktune job " << id << "` for the reasons\n";
  return winner.is_object();
}

// --json with --wait: 0 only when every job is done with a winner.
int json_wait_exit(const json& result) {
  bool success = true;
  for (const json& summary : jobs_of(result)) {
    success = success && as_text(field(field(summary, "job"), "state")) == "done" &&
              field(summary, "winner").is_object();
  }
  return success ? k_exit_ok : k_exit_error;
}

} // namespace

Result<void> parse_budget_option(const std::string& text, TuneOptions& options) {
  auto bad = [&] {
    return make_error(ErrorCode::bad_budget, "expected a number of candidates (e.g. 30), a share of the "
                                    "admitted configs (e.g. 5%) or seconds (e.g. 60s), found '" + text + "'");
  };
  if (text.empty()) return bad();
  if (search::is_time_budget(text)) {
    const auto time = search::parse_time_budget(text);
    if (!time) return bad();
    options.budget_s = static_cast<double>(time->count()) / 1000.0;
    options.budget.reset();
    options.budget_fraction.reset();
    return {};
  }
  const bool percent = text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  std::size_t used = 0;
  try {
    if (percent) {
      const double value = std::stod(number, &used);
      if (used != number.size() || !(value > 0 && value <= 100)) return bad();
      options.budget_fraction = value / 100.0;
      options.budget.reset();
      options.budget_s.reset();
    } else {
      const long long value = std::stoll(number, &used);
      if (used != number.size() || value < 1) return bad();
      options.budget = value;
      options.budget_fraction.reset();
      options.budget_s.reset();
    }
  } catch (const std::exception&) {
    return bad();
  }
  return {};
}

int tune(const GlobalOptions& global, const TuneOptions& options, Output& io) {
  const std::string socket = socket_path(global);
  auto conn = connect_daemon(socket, global, io);
  if (!conn) return report(io, conn.error(), socket);

  if (!options.wait) {
    auto result = call(*conn, tune_request(options), k_request_timeout);
    if (!result) return report(io, result.error(), socket);
    if (global.json) print_json(io, *result);
    else print_queued(io, *result);
    return k_exit_ok;
  }

  SearchRecord record;
  auto result = attach(*conn, tune_request(options), io, record);
  if (!result) return report(io, result.error(), socket);
  if (global.json) {
    print_json(io, *result);
    return json_wait_exit(*result);
  }
  bool success = true;
  for (const json& summary : jobs_of(*result)) {
    success = print_job_end(io, *conn, summary, record) && success;
  }
  return success ? k_exit_ok : k_exit_error;
}

void add_tune_command(CLI::App& app, TuneCommand& command) {
  TuneOptions& tune_options = command.options;
  command.tune = app.add_subcommand("tune", "Tune a kernel for one shape, dtype and device");
  command.tune->add_option("kernel", tune_options.kernel, "kernel family, e.g. gemm")->required();
  command.tune->add_option("--shape", tune_options.shape,
                       "problem shape as NAME=value pairs, e.g. M=256,N=256,K=256")
      ->required();
  command.tune->add_option("--dtype", tune_options.dtype, "element type (f32, f16, f64, ...)");
  command.tune->add_option("--device", tune_options.device,
                       "device: cpu, cuda:N, or all (one job per device that has a family of "
                       "the kernel; they run in parallel, one per device lane)");
  command.tune->add_option("--strategy", tune_options.strategy,
                       "search strategy: exhaustive (default), random, local, annealing, "
                       "genetic or bayes");
  command.budget_option = command.tune->add_option(
      "--budget", command.budget,
      "evaluate at most this many candidates, or this share of the admitted configs with a "
      "'%', or propose candidates for this many seconds with an 's' (e.g. 30, 5% or 60s); "
      "default: all");
  command.tune->add_option("--seed", tune_options.seed,
                       "seed of the strategy's random choices (default 0): the same seed "
                       "proposes the same configs")
      ->check(CLI::NonNegativeNumber);
  command.tune->add_flag("--remeasure", tune_options.remeasure,
                     "measure configs again that an earlier job already measured for this "
                     "kernel, shape, dtype and device (default: reuse those results)");
  command.tune->add_flag("--wait", tune_options.wait,
                     "stay attached: progress on stderr, then the winner");
  command.tune->add_flag("--retry-failed", tune_options.retry_failed,
                     "run again the configs that crashed or hung in earlier jobs (quarantined)");
  command.tune->add_flag("--cold", tune_options.cold,
                     "search from nothing: without this, a strategy that learns from earlier "
                     "results (bayes) starts from the store's results of the kernel at other "
                     "shapes and on other devices");
  command.tune->add_option("--compile-timeout", tune_options.compile_timeout_s,
                       "seconds one candidate may compile (default: ktuned's compile_timeout_s)")
      ->check(CLI::PositiveNumber);
  command.tune->add_option("--bench-timeout", tune_options.bench_timeout_s,
                       "seconds one candidate may run (default: derived from the measurement "
                       "settings)")
      ->check(CLI::PositiveNumber);
  command.tune->footer(
      "Queues a job: every config of the kernel's parameter space that its constraints admit\n"
      "(or the strategy's choice within --budget) is compiled, checked against the reference\n"
      "and benchmarked. Without --wait, prints \"job N queued (T candidates)\" and returns.\n"
      "With --wait, shows [done/total] progress and prints the winner; Ctrl-C detaches and\n"
      "the job keeps running in ktuned (see `ktune job N`).\n\n"
      "Examples:\n  ktune tune gemm --shape M=256,N=256,K=256 --device cpu --wait\n"
      "  ktune tune gemm --shape M=4096,N=4096,K=4096 --device cuda:0 --strategy random "
      "--budget 200\n"
      "  ktune tune gemm --shape M=256,N=256,K=256 --strategy genetic --budget 30 --seed 7 "
      "--wait" + k_exit_codes_help);
}

std::optional<int> check_tune_command(TuneCommand& command, Output& io) {
  if (command.budget_option->count() == 0) return std::nullopt;
  if (auto r = parse_budget_option(command.budget, command.options); !r) {
    return report_error(io, ErrorCode::usage, "tune --budget: " + r.error().message, k_exit_usage);
  }
  return std::nullopt;
}

std::optional<int> run_tune_command(const TuneCommand& command, const GlobalOptions& global,
                                    Output& io) {
  if (!command.tune->parsed()) return std::nullopt;
  return tune(global, command.options, io);
}

} // namespace ktune::cli
