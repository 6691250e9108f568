#pragma once
// Sharded sweeps on a cluster: the Slurm submission of `ktune sweep --slurm` and the commands
//   ktune fleet shard FILE --shard i/N --out DIR   one shard on this node (the entry point every
//                                                  Slurm array task and Kubernetes pod runs)
//   ktune fleet status [DIR]                       each shard: done, failed, pending, running,
//                                                  missing (Slurm's state, node, log)
//   ktune fleet merge DIR [-o TABLE]               the shards' tables merged into one, JUnit
//
// The output directory DIR holds one fleet (docs/deploy.md § Many nodes):
//   DIR/fleet.json            the manifest: sweep, shard count, every submission's job ids
//   DIR/sweep.toml            the sweep file the shards run (a copy taken at submission)
//   DIR/ktuned.toml           the shards' ktuned config, when one was given
//   DIR/shard.sbatch, DIR/merge.sbatch   the batch scripts submitted
//   DIR/shards/shard-<i>.json each shard's table, with its provenance; written atomically
//   DIR/logs/shard-<i>.<array job id>.log, DIR/logs/merge.<job id>.log   Slurm's output files
//   DIR/merged.json, DIR/merged.xml      the merge's table and JUnit report
// A ktuned with `table_dirs = [DIR]` imports merged.json (the shards are one level down).
#include "cli/commands.hpp"
#include "cli/sweep_command.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ktune::cli {

struct FleetShardOptions {
  std::string file;
  std::string shard;  // "i/N"
  std::string out;
  std::string config;  // the private ktuned's config
  std::vector<std::string> kernel_dirs;
  std::string home;    // "" = a fresh directory under $TMPDIR (node-local), removed at the end
  bool remeasure = false;
};

struct FleetMergeOptions {
  std::string dir;
  std::string output;  // "" = DIR/merged.json
  std::string baseline;
  std::string max_regression = "5%";
  std::string junit;   // "" = none
  std::string policy = "faster";
  std::size_t shards = 0;  // 0 = the manifest's count (required without a manifest)
};

struct FleetCommands {
  CLI::App* fleet = nullptr;
  CLI::App* shard_cmd = nullptr;
  CLI::App* status_cmd = nullptr;
  CLI::App* merge_cmd = nullptr;
  FleetShardOptions shard;
  std::string status_dir;
  std::size_t status_shards = 0;
  FleetMergeOptions merge;
};

void add_fleet_commands(CLI::App& app, FleetCommands& commands);
[[nodiscard]] std::optional<int> run_fleet_commands(const FleetCommands& commands,
                                                    const GlobalOptions& global, Output& io);

// `ktune sweep FILE --slurm --out DIR`: writes DIR's sweep copy, batch scripts and manifest,
// submits the shards that are neither done nor queued as one array job and a merge job after it
// (afterany), and prints the job ids. Exit 0 once submitted, 2 on an error (a bad option, sbatch
// refused, DIR holding another sweep's shards).
[[nodiscard]] int submit_slurm_sweep(const GlobalOptions& global, const SweepOptions& options,
                                     const SlurmSubmitOptions& slurm, Output& io);

[[nodiscard]] int run_fleet_shard(const FleetShardOptions& options, Output& io);
[[nodiscard]] int fleet_status(const GlobalOptions& global, const std::string& dir,
                               std::size_t shards, Output& io);
[[nodiscard]] int fleet_merge(const GlobalOptions& global, const FleetMergeOptions& options,
                              Output& io);

} // namespace ktune::cli
