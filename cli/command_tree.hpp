#pragma once
// The `ktune` command tree read from its CLI11 definition, for what is generated from it: the
// shell completion scripts (cli/completion.hpp) and the man pages (cli/man_pages.hpp), so neither
// drifts from --help. Hidden commands (CLI11 group "") are left out.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ktune::cli {

struct CommandOption {
  std::vector<std::string> names;  // "--shape", "-n"; empty for a positional
  std::string positional;          // the positional's name ("kernel", "id"), else empty
  std::string description;
  std::string value_name;          // "TEXT", "INT", ... ("" for a flag)
  std::vector<std::string> choices; // the values an IsMember check admits, in its order
  bool takes_value = false;
  bool required = false;
  bool inherited = false;          // an option of a parent command (--json, --socket)
};

struct CommandNode {
  std::string path;                // "" for the program, "daemon start" below it
  std::string description;
  std::string footer;
  std::vector<std::string> subcommands;       // names, in definition order
  std::vector<std::string> subcommand_descriptions;
  std::vector<CommandOption> options;         // positionals first, then options
};

// Every command of `app`, parents before their subcommands (the program first). A command's
// options are its own (help flags included) followed by those of its ancestors that fall
// through to it.
[[nodiscard]] std::vector<CommandNode> command_tree(const CLI::App& app);

} // namespace ktune::cli
