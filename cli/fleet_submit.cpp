#include "cli/fleet.hpp"

#include "cli/compare_command.hpp"
#include "cli/daemon_calls.hpp"
#include "cli/fleet_layout.hpp"
#include "core/file_io.hpp"
#include "cli/slurm.hpp"
#include "core/hash.hpp"
#include "core/paths.hpp"
#include "core/safe_fs.hpp"
#include "replay/file_reader.hpp"
#include "sweep/sweep_file.hpp"

#include <filesystem>
#include <utility>

namespace ktune::cli {

using namespace fleet;

namespace {

namespace fs = std::filesystem;

// The sweep options --slurm does not take, or a baseline it cannot use; nullopt when none.
std::optional<Error> refuse_slurm_options(const SweepOptions& options) {
  if (options.out.empty()) return make_error(ErrorCode::usage, "--slurm needs --out DIR: the fleet's output directory");
  if (options.shard != "1/1") return make_error(ErrorCode::usage, "--slurm submits every shard; --shard is not an option of it");
  if (options.dry_run) return make_error(ErrorCode::usage, "--slurm does not take --dry-run");
  if (!options.junit.empty()) {
    return make_error(ErrorCode::usage, "with --slurm the merge job writes the JUnit report to DIR/merged.xml; "
                                        "--junit is not an option of it");
  }
  if (!options.baseline.empty() && !fs::exists(options.baseline)) {
    return make_error(ErrorCode::not_found, "--baseline " + options.baseline + ": no such file");
  }
  if (!options.baseline.empty()) {
    if (auto r = parse_max_regression(options.max_regression); !r) return r.error();
  }
  return std::nullopt;
}

// The directory's manifest: the one there (which must hold the same sweep file, split into as
// many shards), else a new one for `parsed` (the sweep file `text` is copied into the directory).
Result<Manifest> open_manifest(const Layout& layout, const std::optional<Manifest>& existing,
                               const sweep::Sweep& parsed, const std::string& text, const SweepOptions& options,
                               const SlurmSubmitOptions& slurm_options, std::size_t shards) {
  const std::string sweep_hash = hash_hex(text);
  if (existing) {
    if (existing->sweep_hash != sweep_hash) {
      return make_error(ErrorCode::bad_fleet, layout.dir + " holds the shards of another sweep file (" +
                                                  existing->source + ", now changed or different); submit to a new --out");
    }
    if (slurm_options.shards > 0 && slurm_options.shards != existing->shards) {
      return make_error(ErrorCode::bad_fleet, layout.dir + " holds " + std::to_string(existing->shards) +
                                                  " shards; --shards " + std::to_string(slurm_options.shards) +
                                                  " would split the jobs differently; submit to a new --out");
    }
    return *existing;
  }
  Manifest manifest;
  manifest.sweep = parsed.name;
  manifest.sweep_hash = sweep_hash;
  manifest.source = absolute_path(options.file);
  manifest.shards = shards;
  manifest.jobs = parsed.jobs.size();
  if (auto w = write_file_atomic(layout.sweep(), text); !w) return w.error();
  return manifest;
}

// The #SBATCH lines both scripts carry.
std::string common_header(const SlurmSubmitOptions& slurm_options) {
  std::string lines;
  if (!slurm_options.partition.empty()) lines += "#SBATCH --partition=" + slurm_options.partition + "\n";
  if (!slurm_options.time_limit.empty()) lines += "#SBATCH --time=" + slurm_options.time_limit + "\n";
  return lines;
}

// DIR/shard.sbatch: array task i runs `ktune fleet shard` for shard i.
std::string shard_script(const std::string& ktune, const Layout& layout, const Manifest& manifest,
                         const SlurmSubmitOptions& slurm_options, const std::string& config, bool remeasure) {
  std::string script =
      "#!/bin/sh\n# Written by `ktune sweep --slurm`: array task i runs shard i of " +
      std::to_string(manifest.shards) + " of the sweep\n# (ktune fleet shard; docs/deploy.md).\n" +
      "#SBATCH --job-name=ktune-" + manifest.sweep + "\n#SBATCH --ntasks=1\n" +
      "#SBATCH --output=" + layout.logs_dir() + "/shard-%a.%A.log\n" + common_header(slurm_options);
  if (slurm_options.gpus_per_task > 0) {
    script += "#SBATCH --gpus-per-task=" + std::to_string(slurm_options.gpus_per_task) + "\n";
  }
  script += "exec " + sh_quote(ktune) + " fleet shard " + sh_quote(layout.sweep()) +
            " --shard \"$SLURM_ARRAY_TASK_ID/" + std::to_string(manifest.shards) + "\" --out " +
            sh_quote(layout.dir);
  if (!config.empty()) script += " --config " + sh_quote(config);
  for (const auto& d : slurm_options.kernel_dirs) script += " --kernel-dir " + sh_quote(absolute_path(d));
  if (remeasure) script += " --remeasure";
  return script + "\n";
}

// DIR/merge.sbatch: `ktune fleet merge` once the array has ended.
std::string merge_script(const std::string& ktune, const Layout& layout, const Manifest& manifest,
                         const SlurmSubmitOptions& slurm_options, const SweepOptions& options) {
  std::string script =
      "#!/bin/sh\n# Written by `ktune sweep --slurm`: merges the shards once the array has ended.\n"
      "#SBATCH --job-name=ktune-merge-" + manifest.sweep + "\n#SBATCH --ntasks=1\n" +
      "#SBATCH --output=" + layout.logs_dir() + "/merge.%j.log\n" + common_header(slurm_options);
  script += "exec " + sh_quote(ktune) + " fleet merge " + sh_quote(layout.dir) + " --output " +
            sh_quote(layout.merged()) + " --junit " + sh_quote(layout.merged_junit());
  if (!options.baseline.empty()) {
    script += " --baseline " + sh_quote(absolute_path(options.baseline)) +
              " --max-regression " + sh_quote(options.max_regression);
  }
  return script + "\n";
}

// The shards to submit: those neither done nor still queued or running (counted in `done` and
// `active`).
Result<std::vector<int>> shards_to_submit(const Layout& layout, const std::optional<Manifest>& existing,
                                          std::size_t shards, std::size_t& done, std::size_t& active) {
  std::string slurm_error;
  const auto states = collect_shards(layout, existing, shards, slurm_error);
  if (!slurm_error.empty()) return make_error(ErrorCode::slurm_error, slurm_error);
  std::vector<int> tasks;
  for (const auto& s : states) {
    if (s.state == "done") ++done;
    else if (s.state == "pending" || s.state == "running") ++active;
    else tasks.push_back(static_cast<int>(s.index));
  }
  return tasks;
}

// The fleet's files written for the batch jobs: the shards' ktuned config (travelling with the
// fleet, like the sweep file) and the two scripts. `config` receives the config's path in DIR.
Result<void> write_batch_files(const std::string& ktune, const Layout& layout, const Manifest& manifest,
                               const SweepOptions& options, const SlurmSubmitOptions& slurm_options) {
  std::string config;
  if (!slurm_options.config.empty()) {
    auto config_text = replay::read_text_file(slurm_options.config);
    if (!config_text) return config_text.error();
    if (auto w = write_file_atomic(layout.config(), *config_text); !w) return w.error();
    config = layout.config();
  }
  const std::string shard = shard_script(ktune, layout, manifest, slurm_options, config, options.remeasure);
  const std::string merge = merge_script(ktune, layout, manifest, slurm_options, options);
  for (const auto& [path, script] : {std::pair{layout.shard_script(), shard}, std::pair{layout.merge_script(), merge}}) {
    if (auto w = write_file_atomic(path, script); !w) return w.error();
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec, ec);
  }
  return {};
}

void print_submitted(const GlobalOptions& global, const Layout& layout, const Manifest& manifest,
                     const std::vector<int>& tasks, std::int64_t array_job, std::int64_t merge_job, Output& io) {
  if (global.json) {
    print_json(io, {{"out", layout.dir},
                    {"submitted", true},
                    {"sweep", manifest.sweep},
                    {"shards", manifest.shards},
                    {"tasks", slurm::task_list(tasks)},
                    {"array_job", array_job},
                    {"merge_job", merge_job},
                    {"script", layout.shard_script()},
                    {"merged", layout.merged()}});
  } else {
    io.out << "sweep " << manifest.sweep << ": shards " << slurm::task_list(tasks) << " of "
           << manifest.shards << " submitted as array job " << array_job << ", merge job "
           << merge_job << " (afterany)\n"
           << "logs " << layout.logs_dir() << "/shard-<i>." << array_job << ".log; merged table "
           << layout.merged() << "\nktune fleet status " << layout.dir << '\n';
  }
}

} // namespace

int submit_slurm_sweep(const GlobalOptions& global, const SweepOptions& options,
                       const SlurmSubmitOptions& slurm_options, Output& io) {
  auto fail = [&](const Error& error) { return report_error(io, error.code, error.message, k_exit_failed); };
  if (auto refused = refuse_slurm_options(options)) return fail(*refused);
  auto text = replay::read_text_file(options.file);
  if (!text) return fail(text.error());
  auto parsed = sweep::parse_sweep(*text, options.file);
  if (!parsed) return fail(parsed.error());
  if (parsed->jobs.empty()) return fail(make_error(ErrorCode::sweep_error, options.file + ": the sweep has no jobs"));
  const std::size_t shards = slurm_options.shards > 0 ? slurm_options.shards : parsed->jobs.size();
  if (shards > parsed->jobs.size()) {
    return fail(make_error(ErrorCode::usage, "--shards " + std::to_string(shards) + ": the sweep has only " +
                                                 std::to_string(parsed->jobs.size()) + " jobs"));
  }

  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return fail(make_error(ErrorCode::io_error, "cannot locate the ktune executable (/proc/self/exe): " + ec.message()));
  const std::string ktune = self.string();
  const Layout layout{absolute_path(options.out)};
  for (const auto& d : {layout.dir, layout.shards_dir(), layout.logs_dir()}) {
    fs::create_directories(d, ec);
    if (ec) return fail(make_error(ErrorCode::io_error, "cannot create " + d + ": " + ec.message()));
  }
  auto existing = read_manifest(layout);
  if (!existing) return fail(existing.error());
  auto manifest = open_manifest(layout, *existing, *parsed, *text, options, slurm_options, shards);
  if (!manifest) return fail(manifest.error());

  std::size_t done = 0, active = 0;
  auto tasks = shards_to_submit(layout, *existing, manifest->shards, done, active);
  if (!tasks) return fail(tasks.error());
  if (tasks->empty()) {
    if (global.json) {
      print_json(io, {{"out", layout.dir}, {"submitted", false}, {"done", done}, {"active", active}});
    } else {
      io.out << "nothing to submit: " << done << " of " << manifest->shards << " shards done, "
             << active << " queued or running (ktune fleet status " << layout.dir << ")\n";
    }
    return k_exit_ok;
  }
  if (auto written = write_batch_files(ktune, layout, *manifest, options, slurm_options); !written) {
    return fail(written.error());
  }

  std::string array = slurm::task_list(*tasks);
  if (slurm_options.max_parallel > 0) array += "%" + std::to_string(slurm_options.max_parallel);
  auto array_job = slurm::submit({"--array=" + array, layout.shard_script()});
  if (!array_job) return fail(array_job.error());
  auto merge_job = slurm::submit({"--dependency=afterany:" + std::to_string(*array_job), layout.merge_script()});
  manifest->submissions.push_back({*array_job, merge_job ? *merge_job : 0, *tasks, now_ms()});
  if (auto w = write_file_atomic(layout.manifest(), manifest_to_json(*manifest).dump(2) + "\n"); !w) {
    return fail(make_error(w.error().code, w.error().message + " (array job " + std::to_string(*array_job) +
                                               " is submitted)"));
  }
  if (auto state = SafeDir::open(resolve_paths(path_env_from_process()).state_dir, DirCreate::yes)) {
    (void)state->write_atomic("last-fleet", layout.dir + "\n");
  }
  if (!merge_job) {
    return fail(make_error(merge_job.error().code, "array job " + std::to_string(*array_job) +
                                                       " is submitted, the merge job is not: " +
                                                       merge_job.error().message));
  }
  print_submitted(global, layout, *manifest, *tasks, *array_job, *merge_job, io);
  return k_exit_ok;
}

} // namespace ktune::cli
