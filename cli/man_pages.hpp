#pragma once
// Man pages generated from the CLI definition (cli/command_tree.hpp), so they say what --help
// says: ktune(1) with the global options and the list of commands, and one page per command
// group, ktune-COMMAND(1) (git's convention), holding the command's synopsis, description,
// options and, for a group such as `daemon` or `fleet`, each of its subcommands. The build
// writes them with the hidden command `ktune man-pages DIR` (cmake/install.cmake) and installs
// them gzipped under share/man/man1.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ktune::cli {

struct ManPage {
  std::string file;   // "ktune-tune.1"
  std::string text;   // roff (man macros)
};

// The pages of `app`, ktune.1 first; `version` goes into each page's footer.
[[nodiscard]] std::vector<ManPage> man_pages(const CLI::App& app, const std::string& version);

struct ManCommand {
  CLI::App* command = nullptr;
  const CLI::App* app = nullptr;  // the whole command line, whose pages are written
  std::string dir;
};

// Registers the hidden `man-pages DIR` on `app`; `command` must outlive the parse.
void add_man_command(CLI::App& app, ManCommand& command);
// When it was parsed: writes man_pages(app) (this build's version) into its DIR (created), one
// file each, and lists them on io.out; nullopt otherwise.
[[nodiscard]] std::optional<int> run_man_command(const ManCommand& command,
                                                 const GlobalOptions& global, Output& io);

} // namespace ktune::cli
