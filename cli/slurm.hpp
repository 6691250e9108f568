#pragma once
// Slurm's own commands, run as child processes without a shell: sbatch to submit, scontrol (and
// sacct where the cluster keeps accounting) to learn what became of an array job's tasks. Nothing
// here keeps state: the fleet manifest (cli/fleet.hpp) remembers which jobs were submitted.
// The commands are looked up in PATH and read the cluster's configuration as they always do
// (SLURM_CONF, /etc/slurm).
#include "core/result.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::cli::slurm {

// What Slurm says about one task of an array job.
struct TaskState {
  std::int64_t job_id = 0;        // the task's own job id
  std::int64_t array_job_id = 0;
  int task = 0;                   // SLURM_ARRAY_TASK_ID
  std::string state;              // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
  std::string node;               // "" while pending
  std::string exit_code;          // "status:signal", e.g. "2:0"
  std::string reason;             // why it waits or why it ended ("None" dropped)
};

// Whether Slurm will still run (or is running) a task in `state`.
[[nodiscard]] bool is_active(std::string_view state);

// `sbatch --parsable ARGS...`: the id of the job it submitted. Errors: "slurm_error" with the
// command line and sbatch's output (or why it could not be started).
[[nodiscard]] Result<std::int64_t> submit(const std::vector<std::string>& args);

// The tasks of array job `array_job_id` that Slurm knows, by task id: `scontrol show job` (pending,
// running and recently finished tasks; a pending range such as 1-4%2 is expanded), else `sacct`
// (finished tasks, where the cluster keeps accounting). Empty when neither knows the job any more.
// Errors: "slurm_error" when scontrol cannot be run or fails for another reason than an unknown
// job.
[[nodiscard]] Result<std::map<int, TaskState>> array_tasks(std::int64_t array_job_id);

// Parsers of the commands' output, pure (tests/cli).
// `scontrol -o show job` lines: one record per line of Key=Value words.
[[nodiscard]] std::vector<TaskState> parse_scontrol(std::string_view text);
// `sacct -n -P -X -o JobID,JobIDRaw,State,ExitCode,NodeList,Reason` lines ("12_3|15|COMPLETED|0:0|node1|None").
[[nodiscard]] std::vector<TaskState> parse_sacct(std::string_view text);
// An array's task list "1-3,5%2" -> {1, 2, 3, 5}; "[1-3]" brackets are accepted.
[[nodiscard]] std::vector<int> expand_task_ids(std::string_view text);
// The inverse for sbatch --array: {1, 2, 3, 5} -> "1-3,5".
[[nodiscard]] std::string task_list(const std::vector<int>& tasks);

} // namespace ktune::cli::slurm
