#pragma once
// `ktune cache verify [--cache-dir DIR]` and `ktune cache prune [--cache-dir DIR] [--older-than D]`:
// the compile cache checked and cleaned without a daemon (jobs/artifact_cache.hpp).
//
// verify: every artifact against the content hash recorded with its key; lists what is damaged
// (missing record, size or hash that differ, unreadable) and exits 1 when anything is.
// prune:  removes damaged artifacts with their records, records without an artifact, temp files
// a killed compile left (older than an hour) and, with --older-than DAYS, sound artifacts not
// written for that long; a running ktuned compiles again whatever it needs.
// The cache directory is the instance's (core/paths.hpp: $KTUNE_HOME/cache, else
// $XDG_STATE_HOME/ktune/cache) unless --cache-dir names another ([daemon].cache_dir).
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct CacheCommand {
  CLI::App* verify = nullptr;
  CLI::App* prune = nullptr;
  std::string cache_dir;
  double older_than_days = 0;   // 0 = sound artifacts stay whatever their age
};

// Registers `cache` on `app`. `command` must outlive the parse.
void add_cache_command(CLI::App& app, CacheCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_cache_command(const CacheCommand& command, const GlobalOptions& global,
                                               Output& io);

} // namespace ktune::cli
