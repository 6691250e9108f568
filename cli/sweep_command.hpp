#pragma once
// `ktune sweep FILE [--shard i/N] [--baseline last-good|TABLE] [--max-regression 5%]
//                   [--out TABLE] [--junit FILE] [--remeasure] [--no-confirm] [--strict]
//                   [--dry-run]`
//
// Submits every job of the sweep file (sweep/sweep_file.hpp) -- or of one shard of it -- to ktuned
// at the sweep's priority (below interactive tunes), shows one progress bar over all of them with
// an ETA on stderr, waits, and exports the winners of the sweep's keys as a JSON table
// (docs/export-format.md) to --out, with the speed canary's readings of the sweep's devices
// (taken at its start and end) in the table's provenance. With --baseline, compares them key by
// key with the rules of tableio/compare.hpp (history, or the rank rule against a table), which
// select the keys to confirm: each is measured again as an A/B by ktuned (cli/ab_confirm.hpp),
// whose verdict decides (--no-confirm: the rule's verdict stands, ambiguous where the canary
// says the machine moved). Prints a markdown summary. --junit is written whenever given: the
// comparison, or without a baseline one passing case per key. --remeasure asks ktuned to
// measure every config again (tune's `remeasure`) instead of reusing rows of earlier jobs.
// Exit codes: 0 every job done and nothing regressed; 1 a regression; 2 an error (a failed or
// rejected job, ktuned unreachable, a bad option or file); 3 (--strict) an ambiguous key and no
// regression. --dry-run lists the shard's jobs and submits nothing.
//
// With --slurm the sweep is not run here: its shards are submitted to Slurm as an array job, each
// task running `ktune fleet shard` with a private ktuned, and a merge job after them
// (cli/fleet.hpp); --out names the fleet's output directory.
#include "cli/commands.hpp"

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ktune::cli {

struct SweepOptions {
  std::string file;
  std::string shard = "1/1";
  std::string baseline;
  std::string max_regression = "5%";
  std::string out;
  std::string junit;
  bool remeasure = false;
  bool no_confirm = false;   // judge by history or the table alone (no A/B measurements)
  bool strict = false;       // an ambiguous key is a failure (exit 3)
  bool dry_run = false;
  // When an object: written into the --out table as its provenance, completed with the jobs'
  // counts ("jobs", "failed_jobs", "rejected_jobs"), the devices of its rows and the finish time.
  nlohmann::ordered_json provenance;
};

// `--slurm` and its options (cli/fleet.hpp).
struct SlurmSubmitOptions {
  bool enabled = false;
  std::size_t shards = 0;          // 0 = one per job of the sweep
  std::string partition;
  int gpus_per_task = 0;           // 0 = none asked for
  int max_parallel = 0;            // 0 = as many as Slurm runs
  std::string time_limit;          // sbatch --time; "" = the partition's default
  std::string config;              // the shards' ktuned config
  std::vector<std::string> kernel_dirs;
};

struct SweepCommand {
  CLI::App* command = nullptr;
  SweepOptions options;
  SlurmSubmitOptions slurm;
};

// Registers `sweep` on `app`. `command` must outlive the parse.
void add_sweep_command(CLI::App& app, SweepCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_sweep_command(const SweepCommand& command,
                                                   const GlobalOptions& global, Output& io);

[[nodiscard]] int run_sweep(const GlobalOptions& global, const SweepOptions& options, Output& io);

} // namespace ktune::cli
