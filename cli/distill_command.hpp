#pragma once
// `ktune distill KERNEL --device D [--dtype f32] [--max-configs K] [--max-regret R] [--json]
//                [--db PATH] [--no-measure] [--format json|cpp-header|python -o FILE]`
//
// Builds a distilled rule (tableio/distill.hpp) from the store's results of the kernel on the
// device (opened read-only), reports its regret by leave-one-shape-out beside the nearest-shape
// rule's, and stores it beside the database (<db>-rules/<kernel>.<dtype>.<fingerprint>.json,
// written atomically). Configs the rule or its folds need at a shape that were never measured
// there are measured first: one `tune` of exactly those configs per shape (the `configs` field,
// docs/protocol.md), ktuned started as every command does; --no-measure leaves them out and
// says which. -o writes the rule also as FILE in --format. Exit codes: 0 built (and, with
// --max-regret, reached); 1 an error, or the regret bound not reached; 2 usage.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct DistillCommandOptions {
  std::string kernel, device = "cpu", dtype = "f32", db;
  std::size_t max_configs = 8;
  std::optional<double> max_regret;
  std::size_t pool = 8;           // each shape's fastest configs that may enter the rule
  bool no_measure = false;
  std::string format = "json";    // of -o
  std::string output;
};

struct DistillCommand {
  CLI::App* command = nullptr;
  DistillCommandOptions options;
};

// Registers `distill` on `app`. `command` must outlive the parse.
void add_distill_command(CLI::App& app, DistillCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_distill_command(const DistillCommand& command,
                                                     const GlobalOptions& global, Output& io);
[[nodiscard]] int run_distill(const GlobalOptions& global, const DistillCommandOptions& options,
                              Output& io);

} // namespace ktune::cli
