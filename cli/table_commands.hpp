#pragma once
// The table commands of `ktune` (cli/commands.hpp for exit codes and output conventions;
// docs/export-format.md for the formats):
//
//   ktune export [--kernel K] [--device D] --format json|csv|cpp-header|t4 [-o FILE] [--db PATH]
//       reads the winners from the store, opened READ-ONLY (the instance's database, else --db;
//       ktuned keeps the only read-write connection), and writes them to FILE (temp file +
//       rename) or stdout. No daemon needed.
//   ktune export --format engine-json --by DIM -o DIR [--kernel K] [--device D] [--db PATH]
//       one file per (kernel, other dims, device) into DIR (tableio/engine_json.hpp), with the
//       lookup rule between keys from the rules stored beside the database (ktune distill).
//   ktune import FILE [--policy faster|newer|keep] [--json]
//                [--kernel K --shape S --dtype D --device NAME --fingerprint FP --source-hash H]
//       reads FILE (a json export or a T4 results file, plain or gzip, told apart by content) and
//       sends the table to ktuned in one `import` request; prints the reply: imported, replaced,
//       kept and unchanged counts and the conflicts. The key options are needed only for a T4
//       file from elsewhere, whose results carry no ktune key.
#include "cli/commands.hpp"
#include "tableio/formats.hpp"
#include "tableio/merge.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <ostream>
#include <string>

namespace ktune::cli {

struct ExportOptions {
  std::string kernel;          // "" = every kernel
  std::string device;          // "" = every device; a device name or a fingerprint prefix
  std::string format = "json";
  std::string output;          // "" = stdout; engine-json: the directory
  std::string db;              // "" = the instance's database (core/paths.hpp)
  std::string by;              // engine-json: the dim that keys each file
};

struct ImportOptions {
  std::string file;
  std::string policy = "faster";
  bool json = false;
  tableio::T4Defaults t4;      // key of a T4 file from elsewhere
};

// The subcommands after add_table_commands() registered them on the app.
struct TableCommands {
  CLI::App* export_cmd = nullptr;
  CLI::App* import_cmd = nullptr;
  ExportOptions export_options;
  ImportOptions import_options;
};

// Registers `export` and `import` on `app`. `commands` must outlive the parse.
void add_table_commands(CLI::App& app, TableCommands& commands);
// Runs whichever of them was parsed; nullopt when neither was.
[[nodiscard]] std::optional<int> run_table_commands(const TableCommands& commands,
                                                    const GlobalOptions& global, Output& io);

[[nodiscard]] int export_table(const ExportOptions& options, Output& io);
[[nodiscard]] int import_table_file(const GlobalOptions& global, const ImportOptions& options,
                                    Output& io);

// The `import` request for a table: {"op":"import","table":{...},"policy":"..."}.
[[nodiscard]] nlohmann::json import_request(const tableio::Table& table, tableio::Policy policy);
// Prints an import reply (counts, then one line per conflict). Exposed for tests.
void print_import_reply(const nlohmann::json& result, std::ostream& out);

} // namespace ktune::cli
