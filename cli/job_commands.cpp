#include "cli/job_commands.hpp"

#include "cli/daemon_calls.hpp"
#include "cli/format.hpp"
#include "cli/table.hpp"
#include "core/protocol.hpp"

namespace ktune::cli {

namespace {

using json = nlohmann::ordered_json;

// A job id as `ktune jobs` lists them: a whole number from 1.
CLI::Validator job_id_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (digits && text.find_first_not_of('0') != std::string::npos) return {};
        return "expected a job id (a whole number from 1, as `ktune jobs` lists them), found '" +
               text + "'";
      },
      "JOB_ID");
}

// The `jobs` table, newest first as ktuned lists them.
void print_jobs(std::ostream& out, const json& jobs) {
  if (!jobs.is_array() || jobs.empty()) {
    out << "no jobs\n";
    return;
  }
  Table table({{"ID", Align::right}, {"KERNEL"}, {"SHAPE"}, {"DTYPE"}, {"DEVICE"}, {"STATE"},
               {"DONE/TOTAL", Align::right}, {"FAILED", Align::right}});
  for (const auto& j : jobs)
    table.add_row({as_text(field(j, "id")), as_text(field(j, "kernel")),
                   as_text(field(j, "shape")), as_text(field(j, "dtype")),
                   as_text(field(j, "device")), as_text(field(j, "state")),
                   std::to_string(as_int(field(j, "done"))) + "/" +
                       std::to_string(as_int(field(j, "total"))),
                   std::to_string(as_int(field(j, "failed")))});
  table.print(out);
}

} // namespace

int show_job(const GlobalOptions& global, std::int64_t job_id, Output& io,
             const JobViewOptions& view) {
  const std::string socket = socket_path(global);
  protocol::JobRequest request;
  request.job = job_id;
  json body = request.to_json();
  body["op"] = "job";
  auto result = call_daemon(socket, global, std::move(body), k_request_timeout, io);
  if (!result) return report(io, result.error(), socket);
  const json all_results = field(*result, "results");
  if (result->is_object() && all_results.is_array())
    (*result)["results"] = arrange_results(all_results, view);
  if (global.json) {
    print_json(io, *result);
    return k_exit_ok;
  }
  print_job(io.out, *result, all_results);
  return k_exit_ok;
}

int cancel_job(const GlobalOptions& global, std::int64_t job_id, Output& io) {
  protocol::JobRequest request;
  request.job = job_id;
  json body = request.to_json();
  body["op"] = "cancel";
  return ask_daemon(global, std::move(body), io, [&](const json& result) {
    io.out << "job " << job_id << " " << as_text(field(result, "state"))
           << " (results measured so far are kept; see `ktune job " << job_id << "`)\n";
    return k_exit_ok;
  });
}

int list_jobs(const GlobalOptions& global, std::int64_t limit, Output& io) {
  protocol::JobsRequest request;
  request.limit = limit;
  json body = request.to_json();
  body["op"] = "jobs";
  return ask_daemon(global, std::move(body), io, [&](const json& result) {
    print_jobs(io.out, field(result, "jobs"));
    return k_exit_ok;
  });
}

void add_job_commands(CLI::App& app, JobCommands& commands) {
  commands.job = app.add_subcommand("job", "Show one job and every candidate's result");
  commands.job->add_option("id", commands.job_id, "job id (from `ktune tune` or `ktune jobs`)")
      ->required()
      ->check(job_id_check());
  commands.job->add_option("--top", commands.job_view.top, "show only the first K candidates (0 = all)")
      ->check(CLI::NonNegativeNumber);
  commands.job->add_option("--sort", commands.job_sort,
                  "config (config order), median (fastest first, failures last) or status "
                  "(grouped by status)")
      ->check(CLI::IsMember({"config", "median", "status"}));
  commands.job->footer(
      "Prints kernel, shape, dtype, device, state, counts and times, then each candidate in\n"
      "config order: CONFIG, STATUS (ok, compile_error, crash, timeout, mismatch, ...),\n"
      "MEDIAN(ms), GFLOP/s and the REASON a candidate failed. '*' marks the winner; 'ok (tie)'\n"
      "marks the finalists tied with it (measured again in rounds after the search; within\n"
      "[measure].tie_margin, 3%, of the best at 95% confidence),\n"
      "'ok (pruned)' those stopped early as clearly slower than the best. The time line splits\n"
      "the job's wall time into queue wait, compile (the bench worker waited for a compile),\n"
      "bench and overhead.\n\n"
      "Examples:\n  ktune job 3\n  ktune job 3 --top 10 --sort median" + k_exit_codes_help);

  commands.cancel = app.add_subcommand("cancel", "Cancel a queued or running job");
  commands.cancel->add_option("id", commands.cancel_id, "job id")->required()->check(job_id_check());
  commands.cancel->footer(
      "A queued job is cancelled at once; a running one once the candidates in flight finish.\n"
      "Its results so far stay in the database; the job ends in state cancelled.\n\n"
      "Example:\n  ktune cancel 3" + k_exit_codes_help);

  commands.jobs = app.add_subcommand("jobs", "List recent jobs, newest first");
  commands.jobs->add_option("--limit", commands.limit, "at most this many jobs")->check(CLI::PositiveNumber);
  commands.jobs->footer("Example:\n  ktune jobs --limit 10" + k_exit_codes_help);
}

std::optional<int> run_job_commands(const JobCommands& commands, const GlobalOptions& global,
                                    Output& io) {
  if (commands.job->parsed()) {
    JobViewOptions view = commands.job_view;
    view.sort = commands.job_sort == "median" ? JobSort::median
                : commands.job_sort == "status" ? JobSort::status
                                                : JobSort::config;
    return show_job(global, commands.job_id, io, view);
  }
  if (commands.cancel->parsed()) return cancel_job(global, commands.cancel_id, io);
  if (commands.jobs->parsed()) return list_jobs(global, commands.limit, io);
  return std::nullopt;
}

} // namespace ktune::cli
