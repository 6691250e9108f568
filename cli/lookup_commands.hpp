#pragma once
// `ktune kernels` (the families ktuned loaded), `ktune query` (the winner ktuned answers for a
// key) and `ktune revalidate` (measure stale winners again under this environment),
// cli/commands.hpp for exit codes and output conventions. Three table entries: `ktune --help`
// lists them apart.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct QueryOptions {
  std::string kernel;
  std::string shape;
  std::string dtype = "f32";
  std::string device = "cpu";
};

[[nodiscard]] int list_kernels(const GlobalOptions& global, Output& io);
// `query`: 0 for an exact (tuned) winner, 3 for a fallback answer.
[[nodiscard]] int query(const GlobalOptions& global, const QueryOptions& options, Output& io);

struct KernelsCommand {
  CLI::App* kernels = nullptr;
};
void add_kernels_command(CLI::App& app, KernelsCommand& command);
[[nodiscard]] std::optional<int> run_kernels_command(const KernelsCommand& command,
                                                     const GlobalOptions& global, Output& io);

struct QueryCommand {
  CLI::App* query = nullptr;
  QueryOptions options;
};
void add_query_command(CLI::App& app, QueryCommand& command);
[[nodiscard]] std::optional<int> run_query_command(const QueryCommand& command,
                                                   const GlobalOptions& global, Output& io);

struct RevalidateCommand {
  CLI::App* revalidate = nullptr;
  std::string kernel;
  std::string device;
};
void add_revalidate_command(CLI::App& app, RevalidateCommand& command);
[[nodiscard]] std::optional<int> run_revalidate_command(const RevalidateCommand& command,
                                                        const GlobalOptions& global, Output& io);

} // namespace ktune::cli
