#include "cli/slurm.hpp"

#include "compiler/subprocess.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace ktune::cli::slurm {

namespace {

constexpr std::size_t k_max_output_bytes = 4 << 20;

// "`sbatch --parsable x`", for messages.
std::string command_text(const std::vector<std::string>& argv) {
  std::string text = "`";
  for (const auto& a : argv) {
    if (text.size() > 1) text += ' ';
    text += a;
  }
  return text + "`";
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.pop_back();
  }
  return text;
}

std::int64_t to_int(std::string_view text) {
  std::int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() ? value : 0;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

// The first word: sacct writes "CANCELLED by 0".
std::string first_word(std::string_view text) {
  return std::string(text.substr(0, text.find(' ')));
}

} // namespace

bool is_active(std::string_view state) {
  for (std::string_view s : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                             "REQUEUED", "RESIZING", "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD",
                             "REQUEUE_FED", "SPECIAL_EXIT", "STOPPED"}) {
    if (state == s) return true;
  }
  return false;
}

Result<std::int64_t> submit(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto run = run_captured(argv, k_max_output_bytes);
  if (!run) {
    return make_error(ErrorCode::slurm_error, "cannot run " + command_text(argv) + ": " +
                                         run.error().message +
                                         " (is Slurm's sbatch, package slurm-client, in PATH?)");
  }
  if (!run->succeeded()) {
    return make_error(ErrorCode::slurm_error, command_text(argv) + " failed (exit " +
                                         std::to_string(run->code) + "): " + trimmed(run->output));
  }
  // --parsable prints "id" or "id;cluster" on its last line; warnings may come before it.
  std::istringstream lines(run->output);
  std::int64_t id = 0;
  for (std::string line; std::getline(lines, line);) {
    line = trimmed(line);
    const auto digits = line.substr(0, line.find(';'));
    if (!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit)) id = to_int(digits);
  }
  if (id <= 0) {
    return make_error(ErrorCode::slurm_error, command_text(argv) + " printed no job id; its output: " + trimmed(run->output));
  }
  return id;
}

std::vector<int> expand_task_ids(std::string_view text) {
  std::vector<int> tasks;
  if (!text.empty() && text.front() == '[') text.remove_prefix(1);
  if (!text.empty() && text.back() == ']') text.remove_suffix(1);
  text = text.substr(0, text.find('%'));
  for (auto part : split(text, ',')) {
    if (part.empty()) continue;
    const auto dash = part.find('-');
    const auto step_at = part.find(':');
    const auto first = static_cast<int>(to_int(part.substr(0, std::min(dash, step_at))));
    int last = first;
    int step = 1;
    if (dash != std::string_view::npos) {
      last = static_cast<int>(to_int(part.substr(dash + 1, step_at == std::string_view::npos
                                                              ? std::string_view::npos
                                                              : step_at - dash - 1)));
      if (step_at != std::string_view::npos) step = std::max(1, static_cast<int>(to_int(part.substr(step_at + 1))));
    }
    for (int t = first; t <= last && t - first <= 1'000'000; t += step) tasks.push_back(t);
  }
  return tasks;
}

std::string task_list(const std::vector<int>& input) {
  std::vector<int> tasks = input;
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  std::string out;
  for (std::size_t i = 0; i < tasks.size();) {
    std::size_t j = i;
    while (j + 1 < tasks.size() && tasks[j + 1] == tasks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(tasks[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(tasks[j]);
    }
    i = j + 1;
  }
  return out;
}

std::vector<TaskState> parse_scontrol(std::string_view text) {
  std::vector<TaskState> out;
  for (auto line : split(text, '\n')) {
    std::map<std::string, std::string, std::less<>> fields;
    for (auto word : split(line, ' ')) {
      const auto eq = word.find('=');
      if (eq == std::string_view::npos) continue;
      fields.emplace(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1)));
    }
    auto get = [&](std::string_view key) {
      auto it = fields.find(key);
      return it == fields.end() ? std::string() : it->second;
    };
    if (get("JobId").empty() || get("ArrayTaskId").empty()) continue;
    TaskState task;
    task.job_id = to_int(get("JobId"));
    task.array_job_id = to_int(get("ArrayJobId"));
    task.state = get("JobState");
    task.node = get("NodeList");
    if (task.node == "(null)") task.node.clear();
    task.exit_code = get("ExitCode");
    task.reason = get("Reason");
    if (task.reason == "None") task.reason.clear();
    for (int id : expand_task_ids(get("ArrayTaskId"))) {
      task.task = id;
      out.push_back(task);
    }
  }
  return out;
}

std::vector<TaskState> parse_sacct(std::string_view text) {
  std::vector<TaskState> out;
  for (auto line : split(text, '\n')) {
    const auto fields = split(line, '|');
    if (fields.size() < 5) continue;
    const auto underscore = fields[0].find('_');
    if (underscore == std::string_view::npos) continue;
    TaskState task;
    task.array_job_id = to_int(fields[0].substr(0, underscore));
    task.job_id = to_int(fields[1]);
    task.state = first_word(fields[2]);
    task.exit_code = std::string(fields[3]);
    task.node = std::string(fields[4]);
    if (task.node == "None assigned") task.node.clear();
    if (fields.size() > 5 && fields[5] != "None") task.reason = std::string(fields[5]);
    for (int id : expand_task_ids(fields[0].substr(underscore + 1))) {
      task.task = id;
      out.push_back(task);
    }
  }
  return out;
}

Result<std::map<int, TaskState>> array_tasks(std::int64_t array_job_id) {
  std::map<int, TaskState> tasks;
  const std::vector<std::string> argv{"scontrol", "-o", "show", "job", std::to_string(array_job_id)};
  auto run = run_captured(argv, k_max_output_bytes);
  if (!run) {
    return make_error(ErrorCode::slurm_error, "cannot run " + command_text(argv) + ": " +
                                         run.error().message +
                                         " (is Slurm's scontrol, package slurm-client, in PATH?)");
  }
  if (run->succeeded()) {
    for (auto& task : parse_scontrol(run->output)) {
      if (task.array_job_id == array_job_id) tasks[task.task] = task;
    }
    if (!tasks.empty()) return tasks;
  } else if (run->output.find("Invalid job id") == std::string::npos) {
    return make_error(ErrorCode::slurm_error, command_text(argv) + " failed (exit " +
                                         std::to_string(run->code) + "): " + trimmed(run->output));
  }
  // Gone from slurmctld's memory (MinJobAge): accounting may still know it.
  const std::vector<std::string> sacct{"sacct", "-n", "-P", "-X", "-j", std::to_string(array_job_id),
                                       "-o", "JobID,JobIDRaw,State,ExitCode,NodeList,Reason"};
  auto acct = run_captured(sacct, k_max_output_bytes);
  if (acct && acct->succeeded()) {
    for (auto& task : parse_sacct(acct->output)) {
      if (task.array_job_id == array_job_id) tasks[task.task] = task;
    }
  }
  return tasks;
}

} // namespace ktune::cli::slurm
