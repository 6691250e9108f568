#pragma once
// `ktune replay FILE [--prior OTHER_FILE...] --strategy S --budget N --repeats R [--seed X] [--json]`:
// replays a recorded GPU search space (Kernel Tuner cache, .json or .json.gz, T4 file, old results
// list) with a search strategy and prints the fraction of the optimum after each budget step,
// averaged over the repeats, as a convergence table; with --json one object
// {"file","strategy","budget_kind","budget","budget_s","budget_basis","evaluations",
//  "min_evaluations","max_evaluations","space_size","valid_configs","failed_configs","configs",
//  "failed_evaluations","random_failed_evaluations","failures_avoided","optimum_ms",
//  "mean_fraction","min_fraction","repeats","seed","prior","prior_results"}.
//
// budget_kind "evaluations": `budget` evaluations per run (budget_s null); "simulated_time":
// `--budget 60s`, each run charged the recorded compile + benchmark time of every evaluation until
// budget_s is used up (budget null, budget_basis "compile_and_benchmark_time"; a file that records
// no such times is refused, code "no_cost", exit 2). evaluations = evaluations per run, averaged.
// failed_evaluations = evaluations of configs recorded as failed per run, averaged;
// random_failed_evaluations = what uniform random sampling of as many configs makes on average
// (failed_configs / configs * evaluations, exact); failures_avoided = the difference.
//
// space_size = the cartesian product of the parameter values; configs = the configs present in
// the file (the restricted space searched, including those recorded as failed); valid_configs =
// those with a recorded time, failed_configs = the others. `--budget 10%` means 10% of
// valid_configs (budget_basis "valid_configs"). --prior files are recordings of the same kernel on
// other devices or problem sizes: the strategy starts from them (search/prior.hpp).
//
// Exit codes as the rest of `ktune`: 0 ok, 1 error (unreadable or unsupported file), 2 usage.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ktune::replay {

struct ReplayCommandOptions {
  std::string file;
  std::vector<std::string> prior_files;
  std::string strategy = "bayes";
  std::string budget = "2%";  // evaluations, a percentage of the valid configs, or seconds ("60s")
  std::size_t repeats = 20;
  std::uint64_t seed = 0;
  std::size_t steps = 10;     // rows of the convergence table
  std::size_t batch = 1;      // configs proposed at a time (parallel workers in live tuning)
  bool json = false;
};

// Runs the command; results go to `out`, errors to `err` as "ktune: <code>: <message>".
[[nodiscard]] int run_replay_command(const ReplayCommandOptions& options, std::ostream& out, std::ostream& err);

// Registers the `replay` subcommand on a CLI11 app. Usage in the `ktune` front end:
//   replay::ReplayCommand replay_command(app);          // before app.parse()
//   if (replay_command.parsed()) return replay_command.run(global.json, io.out, io.err);
// The subcommand also accepts --json itself, so both `ktune --json replay F` and
// `ktune replay F --json` work. Holds pointers into itself for CLI11: neither copied nor moved.
class ReplayCommand {
public:
  explicit ReplayCommand(CLI::App& app);
  ReplayCommand(const ReplayCommand&) = delete;
  ReplayCommand& operator=(const ReplayCommand&) = delete;

  [[nodiscard]] bool parsed() const;
  // `json`: the front end's own --json flag.
  [[nodiscard]] int run(bool json, std::ostream& out, std::ostream& err) const;

private:
  CLI::App* m_command = nullptr;
  ReplayCommandOptions m_options;
};

} // namespace ktune::replay
