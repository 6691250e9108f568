#include "cli/fleet_layout.hpp"

#include "cli/table.hpp"
#include "core/paths.hpp"
#include "replay/file_reader.hpp"
#include "tableio/formats.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>

namespace ktune::cli::fleet {

namespace fs = std::filesystem;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  auto p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// Single-quoted for sh: 'it'\''s'.
std::string sh_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// --- the output directory -----------------------------------------------------------------------

json manifest_to_json(const Manifest& m) {
  json subs = json::array();
  for (const auto& s : m.submissions) {
    subs.push_back({{"array_job", s.array_job},
                    {"merge_job", s.merge_job},
                    {"tasks", slurm::task_list(s.tasks)},
                    {"submitted_at_ms", s.submitted_at_ms}});
  }
  return {{"format", k_manifest_format}, {"sweep", m.sweep},   {"sweep_hash", m.sweep_hash},
          {"source", m.source},          {"shards", m.shards}, {"jobs", m.jobs},
          {"submissions", subs}};
}

// The manifest of `layout`, nullopt when there is none. Errors ("bad_fleet") name the file.
Result<std::optional<Manifest>> read_manifest(const Layout& layout) {
  if (!fs::exists(layout.manifest())) return std::optional<Manifest>();
  auto text = replay::read_text_file(layout.manifest());
  if (!text) return text.error();
  const json doc = json::parse(*text, nullptr, false);
  if (!doc.is_object() || doc.value("format", std::string()) != k_manifest_format) {
    return make_error(ErrorCode::bad_fleet, layout.manifest() + ": expected a fleet manifest (\"format\": \"" +
                                       k_manifest_format + "\")");
  }
  try {
    Manifest m;
    m.sweep = doc.value("sweep", std::string());
    m.sweep_hash = doc.value("sweep_hash", std::string());
    m.source = doc.value("source", std::string());
    m.shards = doc.at("shards").get<std::size_t>();
    m.jobs = doc.value("jobs", std::size_t{0});
    for (const auto& s : doc.value("submissions", json::array())) {
      m.submissions.push_back({s.at("array_job").get<std::int64_t>(), s.value("merge_job", std::int64_t{0}),
                               slurm::expand_task_ids(s.value("tasks", std::string())),
                               s.value("submitted_at_ms", std::int64_t{0})});
    }
    return std::optional<Manifest>(std::move(m));
  } catch (const json::exception& e) {
    return make_error(ErrorCode::bad_fleet, layout.manifest() + ": " + e.what());
  }
}

// --- what became of each shard ------------------------------------------------------------------

// Reads each shard's table and asks Slurm about the tasks the manifest submitted. `slurm_error`
// receives a Slurm error once (the states are then what the files say).
std::vector<ShardStatus> collect_shards(const Layout& layout, const std::optional<Manifest>& manifest,
                                        std::size_t shards, std::string& slurm_error) {
  std::map<std::int64_t, std::map<int, slurm::TaskState>> known;  // array job -> tasks
  std::vector<ShardStatus> out;
  for (std::size_t i = 1; i <= shards; ++i) {
    ShardStatus s;
    s.index = i;
    const Submission* sub = manifest ? manifest->latest_for(i) : nullptr;
    const slurm::TaskState* task = nullptr;
    if (sub != nullptr) {
      s.array_job = sub->array_job;
      s.log = layout.shard_log(i, sub->array_job);
      if (known.count(sub->array_job) == 0) {
        auto tasks = slurm::array_tasks(sub->array_job);
        if (!tasks && slurm_error.empty()) slurm_error = tasks.error().message;
        known[sub->array_job] = tasks ? *tasks : std::map<int, slurm::TaskState>{};
      }
      auto& tasks = known[sub->array_job];
      if (auto it = tasks.find(static_cast<int>(i)); it != tasks.end()) task = &it->second;
    }
    if (task != nullptr) {
      s.slurm_state = task->state;
      s.node = task->node;
      s.job_id = task->job_id;
      s.exit_code = task->exit_code;
    }
    const std::string path = layout.shard_table(i);
    std::string table_problem;
    if (fs::exists(path)) {
      auto text = replay::read_text_file(path);
      auto table = text ? tableio::read_table(*text, path) : Result<tableio::Table>(text.error());
      if (table) s.table = std::move(*table);
      else table_problem = table.error().message;
    }
    if (task != nullptr && slurm::is_active(task->state)) {
      s.state = task->state == "PENDING" ? "pending" : "running";
      s.why = task->reason;
    } else if (s.table) {
      const auto& p = s.table->provenance;
      const auto failed = p.value("failed_jobs", std::int64_t{0}) + p.value("rejected_jobs", std::int64_t{0});
      if (s.node.empty()) s.node = p.value("node", std::string());
      if (failed > 0) {
        s.state = "failed";
        s.why = std::to_string(failed) + " of " + std::to_string(p.value("jobs", std::int64_t{0})) +
                " jobs failed or were rejected";
      } else {
        s.state = "done";
      }
    } else if (task != nullptr) {
      s.state = "failed";
      s.why = "Slurm " + task->state + (task->exit_code.empty() ? "" : " (exit " + task->exit_code + ")") +
              (task->reason.empty() ? "" : ", " + task->reason) + "; no table " +
              (table_problem.empty() ? "at " + path : "(" + table_problem + ")");
    } else {
      s.state = "missing";
      s.why = table_problem.empty() ? "no table at " + path : table_problem;
      if (sub == nullptr) s.why += manifest ? "; never submitted" : "";
      else s.why += "; Slurm no longer knows array job " + std::to_string(sub->array_job);
    }
    out.push_back(std::move(s));
  }
  return out;
}

ordered_json shard_json(const ShardStatus& s) {
  ordered_json j = {{"shard", s.index}, {"state", s.state}};
  if (!s.why.empty()) j["why"] = s.why;
  j["node"] = s.node;
  if (!s.slurm_state.empty()) j["slurm_state"] = s.slurm_state;
  if (s.array_job > 0) j["array_job"] = s.array_job;
  if (s.job_id > 0) j["job"] = s.job_id;
  if (!s.exit_code.empty()) j["exit_code"] = s.exit_code;
  if (!s.log.empty()) j["log"] = s.log;
  j["rows"] = s.table ? s.table->rows.size() : 0;
  return j;
}

void print_shards(const std::vector<ShardStatus>& shards, std::ostream& out) {
  Table table({{"SHARD", Align::right}, {"STATE"}, {"NODE"}, {"SLURM"}, {"ROWS", Align::right},
               {"LOG"}, {"WHY"}});
  for (const auto& s : shards) {
    const std::string slurm_text =
        s.array_job > 0 ? std::to_string(s.array_job) + "_" + std::to_string(s.index) +
                              (s.slurm_state.empty() ? "" : " " + s.slurm_state)
                        : "-";
    table.add_row({std::to_string(s.index), s.state, s.node.empty() ? "-" : s.node, slurm_text,
                   s.table ? std::to_string(s.table->rows.size()) : "-",
                   s.log.empty() ? "-" : s.log, s.why.empty() ? "-" : s.why});
  }
  table.print(out);
}

// The file naming the last fleet directory this user submitted, for `fleet status` without DIR.
std::string last_fleet_file() {
  return resolve_paths(path_env_from_process()).state_dir + "/last-fleet";
}

} // namespace ktune::cli::fleet
