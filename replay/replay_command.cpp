#include "replay/replay_command.hpp"

#include "replay/file_reader.hpp"
#include "replay/recorded_space.hpp"
#include "replay/replay.hpp"
#include "search/stop_condition.hpp"
#include "search/strategy.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

namespace ktune::replay {

namespace {

constexpr int k_exit_ok = 0;
constexpr int k_exit_error = 1;
constexpr int k_exit_usage = 2;

std::string fixed(double v, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string strategy_list() {
  std::string out;
  for (const auto& n : search::strategy_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

} // namespace

namespace {

// The options CLI11 does not check: a usage error on `err` (exit 2), else nullopt.
std::optional<int> refuse_options(const ReplayCommandOptions& options, std::ostream& err) {
  std::optional<Error> refused;
  const auto& names = search::strategy_names();
  if (std::find(names.begin(), names.end(), options.strategy) == names.end()) {
    refused = make_error(ErrorCode::unknown_strategy, "unknown strategy '" + options.strategy +
                                                          "'; expected one of: " + strategy_list());
  } else if (options.repeats == 0) {
    refused = make_error(ErrorCode::bad_repeats, "--repeats: expected at least 1");
  } else if (options.batch == 0) {
    refused = make_error(ErrorCode::bad_batch, "--batch: expected at least 1");
  }
  if (!refused) return std::nullopt;
  err << "ktune: " << refused->code << ": " << refused->message << '\n';
  return k_exit_usage;
}

// The budget of `options` over `recorded` (a file called `label`): evaluations (a percentage
// counts the configs with a recorded time: a failed config is no option to find) or simulated
// seconds, with the checkpoints the table prints. Every error is a usage error.
Result<ReplayOptions> budget_options(const ReplayCommandOptions& options, const RecordedSpace& recorded,
                                     const std::string& label) {
  ReplayOptions replay_options;
  const std::size_t steps = options.json ? 1 : std::max<std::size_t>(1, options.steps);
  if (search::is_time_budget(options.budget)) {
    auto time_budget = search::parse_time_budget(options.budget);
    if (!time_budget) return time_budget.error();
    if (recorded.cost_ms.empty()) {
      return make_error(ErrorCode::no_cost, label + " records no compile and benchmark time (" + recorded.cost_missing +
                                                "): a time budget such as " + options.budget +
                                                " needs them; give the budget in evaluations or as a percentage");
    }
    replay_options.time_budget = *time_budget;
    for (std::size_t k : even_checkpoints(static_cast<std::size_t>(time_budget->count()), steps)) {
      replay_options.time_checkpoints.emplace_back(static_cast<std::chrono::milliseconds::rep>(k));
    }
  } else {
    auto budget = search::parse_evaluation_budget(options.budget, recorded.measured);
    if (!budget) return budget.error();
    replay_options.budget = std::min(*budget, recorded.space.size());
    replay_options.checkpoints = even_checkpoints(replay_options.budget, steps);
  }
  replay_options.strategy = options.strategy;
  replay_options.repeats = options.repeats;
  replay_options.seed = options.seed;
  replay_options.batch = options.batch;
  return replay_options;
}

// What a replay printed is made of.
struct ReplayOutcome {
  const RecordedSpace& recorded;
  const ReplayOptions& replay_options;
  const ReplayReport& report;
  std::size_t prior_results = 0;
};

void print_json_outcome(const ReplayCommandOptions& options, const ReplayOutcome& o, std::ostream& out) {
  const bool timed = o.replay_options.time_budget.has_value();
  const CheckpointStats& final_stats = o.report.checkpoints.back();
  const nlohmann::json result{
      {"file", options.file},
      {"strategy", options.strategy},
      {"budget_kind", timed ? "simulated_time" : "evaluations"},
      {"budget", timed ? nlohmann::json(nullptr) : nlohmann::json(o.replay_options.budget)},
      {"budget_s", timed ? nlohmann::json(static_cast<double>(o.replay_options.time_budget->count()) / 1000.0)
                         : nlohmann::json(nullptr)},
      {"budget_basis", timed ? "compile_and_benchmark_time" : "valid_configs"},
      {"evaluations", o.report.mean_evaluations},
      {"min_evaluations", o.report.min_evaluations},
      {"max_evaluations", o.report.max_evaluations},
      {"space_size", o.recorded.space.cartesian_size()},
      {"configs", o.recorded.space.size()},
      {"valid_configs", o.recorded.measured},
      {"failed_configs", o.recorded.failed},
      {"failed_evaluations", o.report.mean_failed},
      {"random_failed_evaluations", o.report.random_expected_failed},
      {"failures_avoided", o.report.random_expected_failed - o.report.mean_failed},
      {"optimum_ms", o.recorded.optimum_ms},
      {"mean_fraction", final_stats.mean_fraction},
      {"min_fraction", final_stats.min_fraction},
      {"repeats", options.repeats},
      {"seed", options.seed},
      {"prior", options.prior_files},
      {"prior_results", o.prior_results},
  };
  out << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

// The lines above the convergence table: the file, its space, priors, optimum and budget.
void print_header(const ReplayCommandOptions& options, const ReplayOutcome& o, std::ostream& out) {
  const RecordedSpace& recorded = o.recorded;
  const std::size_t valid = recorded.measured;
  out << "file       " << options.file << " (" << to_string(recorded.format)
      << (recorded.was_unterminated ? ", unterminated: read up to its last complete entry" : "") << ")\n";
  if (!recorded.kernel_name.empty() || !recorded.device_name.empty()) {
    out << "kernel     " << (recorded.kernel_name.empty() ? "-" : recorded.kernel_name) << " on "
        << (recorded.device_name.empty() ? "-" : recorded.device_name) << '\n';
  }
  out << "space      " << recorded.space.size() << " configs of " << recorded.space.cartesian_size() << " (" << valid
      << " valid: measured, " << recorded.failed << " failed)\n";
  for (std::size_t i = 0; i < options.prior_files.size(); ++i) {
    out << (i == 0 ? "prior      " : "           ") << options.prior_files[i] << " ("
        << o.replay_options.prior[i].results.size() << " configs of this space)\n";
  }
  out << "optimum    " << recorded.optimum_ms << " ms  " << recorded.config_text(recorded.optimum_config) << '\n';
  out << "strategy   " << options.strategy << ", budget ";
  if (o.replay_options.time_budget) {
    out << fixed(static_cast<double>(o.replay_options.time_budget->count()) / 1000.0, 1)
        << " s of recorded compile + benchmark time (" << fixed(o.report.mean_evaluations, 1) << " evaluations on average, "
        << o.report.min_evaluations << "-" << o.report.max_evaluations << ")";
  } else {
    out << o.replay_options.budget << " evaluations ("
        << fixed(100.0 * static_cast<double>(o.replay_options.budget) / static_cast<double>(valid), 2) << "% of valid)";
  }
  out << ", " << options.repeats << " repeats, seed " << options.seed;
  if (options.batch > 1) out << ", batches of " << options.batch;
  out << "\n\n";
}

// The convergence table and the failure counts under it.
void print_table(const ReplayCommandOptions& options, const ReplayOutcome& o, std::ostream& out) {
  const bool timed = o.replay_options.time_budget.has_value();
  const auto valid = static_cast<double>(o.recorded.measured);
  out << (timed ? "  SIM_S   EVALS" : " EVALS  %VALID") << "  MEAN_FRAC  MIN_FRAC  MAX_FRAC  FOUND_OPT\n";
  for (const auto& cp : o.report.checkpoints) {
    if (timed) {
      out << pad_left(fixed(static_cast<double>(cp.simulated.count()) / 1000.0, 1), 7) << "  "
          << pad_left(fixed(cp.mean_evaluations, 1), 6);
    } else {
      out << pad_left(std::to_string(cp.evaluations), 6) << "  "
          << pad_left(fixed(100.0 * static_cast<double>(cp.evaluations) / valid, 2), 6);
    }
    out << "  " << pad_left(fixed(cp.mean_fraction, 4), 9) << "  " << pad_left(fixed(cp.min_fraction, 4), 8) << "  "
        << pad_left(fixed(cp.max_fraction, 4), 8) << "  " << pad_left(fixed(100.0 * cp.optimum_rate, 0) + "%", 9)
        << '\n';
  }
  out << "\nfraction of optimum = optimum time / best time found (1 = optimum), averaged over "
      << options.repeats << " repeats\nfailed evaluations per run: " << fixed(o.report.mean_failed, 1)
      << " (uniform random sampling: " << fixed(o.report.random_expected_failed, 1) << ", failures avoided "
      << fixed(o.report.random_expected_failed - o.report.mean_failed, 1) << ")\n";
}

} // namespace

int run_replay_command(const ReplayCommandOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const Error& e, int code) {
    err << "ktune: " << e.code << ": " << e.message << '\n';
    return code;
  };
  if (auto refused = refuse_options(options, err)) return *refused;

  auto text = read_text_file(options.file);
  if (!text) return fail(text.error(), k_exit_error);
  const std::string label = std::filesystem::path(options.file).filename().string();
  auto recorded = parse_recorded_space(*text, label);
  if (!recorded) return fail(recorded.error(), k_exit_error);
  text->clear();
  text->shrink_to_fit();

  search::Prior prior;
  std::size_t prior_results = 0;
  for (const auto& prior_file : options.prior_files) {
    auto prior_text = read_text_file(prior_file);
    if (!prior_text) return fail(prior_text.error(), k_exit_error);
    auto prior_recorded = parse_recorded_space(*prior_text, std::filesystem::path(prior_file).filename().string());
    if (!prior_recorded) return fail(prior_recorded.error(), k_exit_error);
    auto source = prior_source(*recorded, *prior_recorded);
    if (!source) return fail(source.error(), k_exit_usage);
    prior_results += source->results.size();
    prior.push_back(std::move(*source));
  }

  auto replay_options = budget_options(options, *recorded, label);
  if (!replay_options) return fail(replay_options.error(), k_exit_usage);
  replay_options->prior = std::move(prior);
  auto report = run_replay(*recorded, *replay_options);
  if (!report) return fail(report.error(), k_exit_error);
  const ReplayOutcome outcome{*recorded, *replay_options, *report, prior_results};
  if (options.json) {
    print_json_outcome(options, outcome, out);
    return k_exit_ok;
  }
  print_header(options, outcome, out);
  print_table(options, outcome, out);
  return k_exit_ok;
}

ReplayCommand::ReplayCommand(CLI::App& app) {
  m_command = app.add_subcommand("replay", "Replay a recorded GPU search space with a search strategy");
  m_command->add_option("file", m_options.file,
                        "Kernel Tuner cache (.json or .json.gz), T4 results file or old results list")
      ->required();
  m_command->add_option("--prior", m_options.prior_files,
                        "recordings of the same kernel on other devices or sizes to start from");
  m_command->add_option("--strategy", m_options.strategy, "search strategy: " + strategy_list())
      ->check(CLI::IsMember(search::strategy_names()));
  m_command->add_option("--budget", m_options.budget,
                        "evaluations per run, a percentage of the valid configs (e.g. 2%), or seconds of "
                        "recorded compile + benchmark time (e.g. 60s)");
  m_command->add_option("--repeats", m_options.repeats, "independent runs to average")->check(CLI::PositiveNumber);
  m_command->add_option("--seed", m_options.seed, "seed of the first run (the runs' seeds derive from it)");
  m_command->add_option("--steps", m_options.steps, "rows of the convergence table")->check(CLI::PositiveNumber);
  m_command->add_option("--batch", m_options.batch, "configs proposed at a time, as with parallel workers")
      ->check(CLI::PositiveNumber);
  m_command->add_flag("--json", m_options.json, "print one JSON object instead of the table");
  m_command->footer(
      "Every proposed config is answered from the file: configs recorded as failed fail,\n"
      "configs absent from the file are invalid and never proposed. The strategy code is the\n"
      "one `ktune tune --strategy` runs. Prints the fraction of the optimum (optimum time /\n"
      "best time found) after each budget step, averaged over the repeats. A percentage\n"
      "budget counts the valid configs (those with a recorded time); a budget in seconds (60s)\n"
      "charges each evaluation the compile and benchmark time the file recorded for it\n"
      "(Kernel Tuner caches, T4 files) and ends a run once they add up to it. --prior files give the\n"
      "strategy earlier results of the kernel, as ktuned gives it its store's (bayes uses them).\n\n"
      "Examples:\n"
      "  ktune replay A100.json.gz --strategy bayes --budget 2% --repeats 20\n"
      "  ktune replay A100.json.gz --strategy bayes --budget 600s --json\n"
      "  ktune replay RTX_3090.json.gz --strategy genetic --budget 400 --repeats 50 --seed 7 --json\n"
      "  ktune replay A100.json.gz --prior A4000.json.gz A6000.json.gz --strategy bayes --budget 1%\n\n"
      "Exit codes: 0 ok, 1 error (unreadable or unsupported file), 2 usage error.");
}

bool ReplayCommand::parsed() const { return m_command->parsed(); }

int ReplayCommand::run(bool json, std::ostream& out, std::ostream& err) const {
  ReplayCommandOptions options = m_options;
  options.json = options.json || json;
  return run_replay_command(options, out, err);
}

} // namespace ktune::replay
