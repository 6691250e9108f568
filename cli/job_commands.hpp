#pragma once
// `ktune job N`, `ktune cancel N` and `ktune jobs` (cli/commands.hpp for exit codes and output
// conventions; cli/job_view.hpp for how a job is shown).
#include "cli/commands.hpp"
#include "cli/job_view.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ktune::cli {

[[nodiscard]] int show_job(const GlobalOptions& global, std::int64_t job_id, Output& io,
                           const JobViewOptions& view = {});
// `cancel N`: cancels a queued or running job (results measured so far are kept).
[[nodiscard]] int cancel_job(const GlobalOptions& global, std::int64_t job_id, Output& io);
[[nodiscard]] int list_jobs(const GlobalOptions& global, std::int64_t limit, Output& io);

// The subcommands after add_job_commands() registered them on the app.
struct JobCommands {
  CLI::App* job = nullptr;
  CLI::App* cancel = nullptr;
  CLI::App* jobs = nullptr;
  std::int64_t job_id = 0;
  JobViewOptions job_view;
  std::string job_sort = "config";
  std::int64_t cancel_id = 0;
  std::int64_t limit = 50;
};
// Registers `job`, `cancel` and `jobs` on `app`. `commands` must outlive the parse.
void add_job_commands(CLI::App& app, JobCommands& commands);
// Runs whichever of them was parsed; nullopt when none was.
[[nodiscard]] std::optional<int> run_job_commands(const JobCommands& commands,
                                                  const GlobalOptions& global, Output& io);

} // namespace ktune::cli
