#pragma once
// `ktune db backup DEST [--db PATH]` and `ktune db recover SOURCE DEST`: copies of the store made
// without ktuned (db/salvage.hpp); the source is only read.
//
// backup:  SQLite's online backup of the instance's database (or --db), consistent while ktuned
//          writes; DEST must not exist and is made 0600.
// recover: what can still be read of a damaged database (ktuned refuses to start on one and
//          names this command), copied into DEST, a new sound database; per table the rows kept
//          and those that could not be read. Move DEST into place with ktuned stopped.
#include "cli/commands.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace ktune::cli {

struct DbCommand {
  CLI::App* backup = nullptr;
  CLI::App* recover = nullptr;
  std::string db;            // backup's source ("" = the instance's); recover's SOURCE
  std::string destination;
};

// Registers `db` on `app`. `command` must outlive the parse.
void add_db_command(CLI::App& app, DbCommand& command);
// Runs it when it was parsed; nullopt otherwise.
[[nodiscard]] std::optional<int> run_db_command(const DbCommand& command, const GlobalOptions& global,
                                               Output& io);

} // namespace ktune::cli
