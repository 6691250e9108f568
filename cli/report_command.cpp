#include "cli/report_command.hpp"

#include "cli/daemon_calls.hpp"
#include "core/file_io.hpp"

#include "core/paths.hpp"
#include "db/store.hpp"
#include "report/report.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace ktune::cli {

namespace {

int fail(Output& io, const Error& error) {
  io.err << "ktune report: " << error.code << ": " << error.message << '\n';
  return k_exit_error;
}

} // namespace

void add_report_command(CLI::App& app, ReportCommand& command) {
  ReportOptions& o = command.options;
  command.report = app.add_subcommand(
      "report", "Write a self-contained HTML report (charts) of one job or of several");
  command.report->add_option("jobs", o.jobs, "job id, comma list or range: 12, 12,15 or 20-27")
      ->required();
  command.report->add_option("-o,--output", o.output, "the HTML file to write")->required();
  command.report->add_option("--db", o.db,
                             "the database to read (default: the instance's, $KTUNE_HOME/ktune.db "
                             "else $XDG_STATE_HOME/ktune/ktune.db)");
  command.report->footer(
      "\nReads the store read-only; ktuned need not be running. The page embeds its charting\n"
      "library (Chart.js) and views offline. Per job: a header table (kernel, shape, device,\n"
      "strategy, winner, timing breakdown) and charts of the best time so far vs evaluations\n"
      "(in the order results were stored), the distribution of candidate times and the\n"
      "candidates by status (times on log axes); a table of the failed candidates (config,\n"
      "status, reason, log excerpt, and the `ktune repro ID -o repro-ID` line that rebuilds one);\n"
      "the best and median time per value of each parameter, and a heat map of the best time over\n"
      "two parameters. With several jobs (a sweep), the winners' time and GFLOP/s against shape\n"
      "per device.\n\n"
      "Exit codes: 0 written, 1 error (no database, unknown job, cannot write), 2 usage error.\n\n"
      "Examples:\n  ktune report 12 -o job12.html\n  ktune report 20-27 -o sweep.html\n"
      "  ktune report 3,5,9 -o report.html --db /data/ktune.db");
}

std::optional<int> run_report_command(const ReportCommand& command, Output& io) {
  if (command.report && command.report->parsed()) return write_report(command.options, io);
  return std::nullopt;
}

int write_report(const ReportOptions& options, Output& io) {
  auto ids = report::parse_job_list(options.jobs);
  if (!ids) {
    io.err << "ktune report: " << ids.error().message << '\n';
    return k_exit_usage;
  }
  if (options.output.empty()) {
    io.err << "ktune report: expected an output file (-o report.html), found none\n";
    return k_exit_usage;
  }
  const std::string db =
      options.db.empty() ? resolve_paths(path_env_from_process()).db : options.db;
  if (!std::filesystem::exists(db)) {
    return fail(io, make_error(ErrorCode::db_error, "no database at " + db +
                                               " (tune something first, or pass --db PATH)"));
  }
  auto store = Store::open(db, OpenMode::read_only);
  if (!store) return fail(io, store.error());
  auto jobs = report::load_jobs(*store, *ids);
  if (!jobs) return fail(io, jobs.error());
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const std::string html = report::render_html(report::report_data(*jobs, now));
  if (auto written = write_file_atomic(options.output, html); !written) return fail(io, written.error());
  std::size_t results = 0;
  for (const auto& job : *jobs) results += job.results.size();
  if (io.json) {
    print_json(io, nlohmann::json{{"output", options.output}, {"jobs", jobs->size()}, {"results", results}});
  } else {
    io.err << "wrote " << options.output << ": " << jobs->size() << " job(s), " << results
           << " result(s)\n";
  }
  return k_exit_ok;
}

} // namespace ktune::cli
