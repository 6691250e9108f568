#pragma once
// `ktune top`: a live view of ktuned -- jobs, device lanes, workers, throughput and the latest
// failed candidates -- read from the `top` op (docs/protocol.md) once per interval and redrawn in
// place with ANSI escapes on the terminal's alternate screen; `q` (or Ctrl-C) quits and restores
// the terminal. `--once` prints one frame as plain text, `--json` the `top` result as one JSON
// document; both are implied when stdout or stdin is not a terminal. Never starts ktuned: when
// none answers it says so and exits 1.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ktune::cli {

struct TopOptions {
  bool once = false;
  double interval_s = 1.0;
};

[[nodiscard]] int top(const GlobalOptions& global, const TopOptions& options, Output& io);

// One frame of the view as lines without escapes: `width` columns at most each (0 = no limit).
// The live view shows the first rows of it that fit the terminal.
[[nodiscard]] std::vector<std::string> render_top(const nlohmann::ordered_json& view,
                                                  std::size_t width);

// The subcommand after add_top_command() registered it on the app.
struct TopCommand {
  CLI::App* top = nullptr;
  TopOptions options;
};
// Registers `top` on `app`. `command` must outlive the parse.
void add_top_command(CLI::App& app, TopCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_top_command(const TopCommand& command,
                                                 const GlobalOptions& global, Output& io);

} // namespace ktune::cli
