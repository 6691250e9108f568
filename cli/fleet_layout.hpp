#pragma once
// A fleet's output directory (cli/fleet.hpp lists its files), its manifest and what became of
// each shard: shared by the fleet commands (cli/fleet.cpp) and the Slurm submission
// (cli/fleet_submit.cpp).
#include "cli/slurm.hpp"
#include "core/result.hpp"
#include "tableio/table.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ktune::cli::fleet {

using nlohmann::json;
using nlohmann::ordered_json;

inline constexpr const char* k_manifest_format = "ktune-fleet";

// The wall clock as Unix milliseconds.
[[nodiscard]] std::int64_t now_ms();
// The environment variable `name`, "" when unset.
[[nodiscard]] std::string env(const char* name);
// `path` made absolute and normal (as given when that fails).
[[nodiscard]] std::string absolute_path(const std::string& path);

// Single-quoted for sh: 'it'\''s'.
[[nodiscard]] std::string sh_quote(const std::string& text);

// --- the output directory -----------------------------------------------------------------------

// The paths of one fleet's directory `dir` (absolute).
struct Layout {
  std::string dir;
  [[nodiscard]] std::string manifest() const { return dir + "/fleet.json"; }
  [[nodiscard]] std::string sweep() const { return dir + "/sweep.toml"; }
  [[nodiscard]] std::string config() const { return dir + "/ktuned.toml"; }
  [[nodiscard]] std::string shard_script() const { return dir + "/shard.sbatch"; }
  [[nodiscard]] std::string merge_script() const { return dir + "/merge.sbatch"; }
  [[nodiscard]] std::string shards_dir() const { return dir + "/shards"; }
  [[nodiscard]] std::string logs_dir() const { return dir + "/logs"; }
  [[nodiscard]] std::string shard_table(std::size_t i) const {
    return shards_dir() + "/shard-" + std::to_string(i) + ".json";
  }
  [[nodiscard]] std::string shard_log(std::size_t i, std::int64_t array_job) const {
    return logs_dir() + "/shard-" + std::to_string(i) + "." + std::to_string(array_job) + ".log";
  }
  [[nodiscard]] std::string merged() const { return dir + "/merged.json"; }
  [[nodiscard]] std::string merged_junit() const { return dir + "/merged.xml"; }
};

struct Submission {
  std::int64_t array_job = 0, merge_job = 0;
  std::vector<int> tasks;
  std::int64_t submitted_at_ms = 0;
};

// DIR/fleet.json: which sweep the directory holds and every submission made for it.
struct Manifest {
  std::string sweep;        // the sweep's name
  std::string sweep_hash;   // of DIR/sweep.toml's text
  std::string source;       // the sweep file submitted, as given
  std::size_t shards = 0;
  std::size_t jobs = 0;
  std::vector<Submission> submissions;

  // The latest submission that ran shard `i`, or nullptr.
  [[nodiscard]] const Submission* latest_for(std::size_t i) const {
    for (auto it = submissions.rbegin(); it != submissions.rend(); ++it) {
      if (std::find(it->tasks.begin(), it->tasks.end(), static_cast<int>(i)) != it->tasks.end()) return &*it;
    }
    return nullptr;
  }
};

// DIR/fleet.json's text of `m` (format "ktune-fleet").
[[nodiscard]] json manifest_to_json(const Manifest& m);

// The manifest of `layout`, nullopt when there is none. Errors ("bad_fleet") name the file.
[[nodiscard]] Result<std::optional<Manifest>> read_manifest(const Layout& layout);

// --- what became of each shard ------------------------------------------------------------------

struct ShardStatus {
  std::size_t index = 0;
  std::string state;        // done, failed, pending, running, missing
  std::string why;          // for failed and missing: what Slurm or the table says
  std::string node;
  std::string slurm_state;  // "" when Slurm was not asked or does not know the task
  std::int64_t job_id = 0, array_job = 0;
  std::string exit_code;
  std::string log;          // "" when unknown
  std::optional<tableio::Table> table;
};

// Reads each shard's table and asks Slurm about the tasks the manifest submitted. `slurm_error`
// receives a Slurm error once (the states are then what the files say).
[[nodiscard]] std::vector<ShardStatus> collect_shards(const Layout& layout, const std::optional<Manifest>& manifest,
                                        std::size_t shards, std::string& slurm_error);

// One shard as `fleet status --json` lists it.
[[nodiscard]] ordered_json shard_json(const ShardStatus& s);
// The shards as the `fleet status` table.
void print_shards(const std::vector<ShardStatus>& shards, std::ostream& out);

// The file naming the last fleet directory this user submitted, for `fleet status` without DIR.
[[nodiscard]] std::string last_fleet_file();

} // namespace ktune::cli::fleet
