#pragma once
// `ktune repro RESULT_ID -o DIR [--db PATH] [--kernel-dir DIR]... [--compile-timeout S]
//  [--bench-timeout S] [--force]`
//
// Writes a repro bundle: everything needed to rerun one stored candidate outside ktuned
// (docs/operations.md § Repro bundles). The store is read read-only; the family's files come
// from the kernel directories (ktuned's, asked with "stats", else --kernel-dir), and the
// measurement settings and deadlines from the running ktuned (its defaults when none answers).
// A family whose source hash differs from the result's is refused (--force writes the bundle
// anyway, marked as such). Host (cpp) candidates only. Exit codes: 0 written; 1 an error; 2 usage.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ktune::cli {

struct ReproOptions {
  std::int64_t result_id = 0;
  std::string out_dir, db;
  std::vector<std::string> kernel_dirs;
  double compile_timeout_s = 0, bench_timeout_s = 0; // 0 = as ktuned would
  bool force = false;
};

struct ReproCommand {
  CLI::App* command = nullptr;
  ReproOptions options;
};

void add_repro_command(CLI::App& app, ReproCommand& command);
[[nodiscard]] std::optional<int> run_repro_command(const ReproCommand& command,
                                                   const GlobalOptions& global, Output& io);

} // namespace ktune::cli
