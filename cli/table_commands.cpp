#include "cli/table_commands.hpp"

#include "cli/daemon_calls.hpp"
#include "core/file_io.hpp"
#include "cli/table.hpp"
#include "core/paths.hpp"
#include "db/store.hpp"
#include "replay/file_reader.hpp"
#include "tableio/engine_json.hpp"
#include "tableio/rule_formats.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace ktune::cli {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr milliseconds k_import_timeout{120'000};
constexpr std::size_t k_default_max_message_bytes = 1'048'576;  // ktuned's default limit

int report(Output& io, const Error& error) { return report_error(io, error.code, error.message); }


std::string value_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "-";
  return j.dump();
}

std::string config_text(const json& config) {
  if (!config.is_object() || config.empty()) return "-";
  std::string out;
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!out.empty()) out += ' ';
    out += it.key() + "=" + value_text(it.value());
  }
  return out;
}

} // namespace

void add_table_commands(CLI::App& app, TableCommands& commands) {
  auto& e = commands.export_options;
  commands.export_cmd =
      app.add_subcommand("export", "Write the tuned winners as json, csv, a C++ header or T4");
  commands.export_cmd->add_option("--kernel", e.kernel, "only this kernel family");
  commands.export_cmd->add_option("--device", e.device,
                                  "only this device: a name (cpu, cuda:0) or a fingerprint prefix");
  commands.export_cmd->add_option("--format", e.format, "json, csv, cpp-header, t4 or engine-json")
      ->required()
      ->check(CLI::IsMember({"json", "csv", "cpp-header", "t4", "engine-json"}));
  commands.export_cmd->add_option("-o,--output", e.output,
                                  "write to this file (default: stdout); engine-json: this directory");
  commands.export_cmd->add_option("--by", e.by, "engine-json: the dim whose values key each file (e.g. M)");
  commands.export_cmd->add_option("--db", e.db,
                                  "database to read (default: the instance's, as ktuned uses)");
  commands.export_cmd->footer(
      "\nReads the store read-only; ktuned need not run. One row per winner key (kernel, shape,\n"
      "dtype, device fingerprint, source hash) with its config, statistics and provenance.\n"
      "Formats: docs/export-format.md. engine-json writes one file per (kernel, other dims,\n"
      "device) into the directory -o, keyed by the values of --by, as inference engines ship\n"
      "their tuned configs; between keys, the buckets of the rule `ktune distill` stored.\n\n"
      "Examples:\n"
      "  ktune export --format json -o winners.json\n"
      "  ktune export --kernel gemm --device cpu --format cpp-header -o tuned.hpp\n"
      "  ktune export --kernel gemm --format engine-json --by M -o gemm_configs/");

  auto& i = commands.import_options;
  commands.import_cmd =
      app.add_subcommand("import", "Merge an exported table (json or T4) into ktuned's winners");
  commands.import_cmd->add_option("file", i.file, "a json export or a T4 results file (.gz too)")
      ->required()
      ->check(CLI::ExistingFile);
  commands.import_cmd->add_option("--policy", i.policy,
                                  "for a key ktuned already has: faster (lower median), newer "
                                  "(measured later) or keep (the existing winner)")
      ->check(CLI::IsMember({"faster", "newer", "keep"}));
  commands.import_cmd->add_flag("--json", i.json, "print ktuned's reply as JSON");
  commands.import_cmd->add_option("--kernel", i.t4.kernel, "T4 from elsewhere: the kernel family");
  commands.import_cmd->add_option("--shape", i.t4.shape, "T4 from elsewhere: the shape (M=..,N=..)");
  commands.import_cmd->add_option("--dtype", i.t4.dtype, "T4 from elsewhere: the dtype (default f32)");
  commands.import_cmd->add_option("--device", i.t4.device_name,
                                  "T4 from elsewhere: a name for the device (default imported)");
  commands.import_cmd->add_option("--fingerprint", i.t4.fingerprint,
                                  "T4 from elsewhere: the device fingerprint (default: derived "
                                  "from --device)");
  commands.import_cmd->add_option("--source-hash", i.t4.source_hash,
                                  "T4 from elsewhere: the kernel source hash (default: unknown)");
  commands.import_cmd->footer(
      "\nThe whole table goes to ktuned in one request (it must fit ktuned's max_message_bytes).\n"
      "Every imported row is kept as history (a job with strategy \"import\"); the winner of a key\n"
      "changes when the policy says so. A T4 file written by another tool holds one tuning run:\n"
      "its best correct result becomes the winner of --kernel/--shape/--dtype on --device.\n\n"
      "Examples:\n  ktune import winners.json --policy newer\n"
      "  ktune import A100_T4.json.gz --kernel convolution --shape W=4096,H=4096 --device a100");
}

std::optional<int> run_table_commands(const TableCommands& commands, const GlobalOptions& global,
                                      Output& io) {
  if (commands.export_cmd && commands.export_cmd->parsed()) {
    return export_table(commands.export_options, io);
  }
  if (commands.import_cmd && commands.import_cmd->parsed()) {
    return import_table_file(global, commands.import_options, io);
  }
  return std::nullopt;
}

namespace {

// The rules stored beside the database (ktune distill): every readable one; one that does not
// parse is named on io.err and left out.
std::vector<tableio::RuleDocument> stored_rules(const std::string& db, Output& io) {
  std::vector<tableio::RuleDocument> rules;
  const std::filesystem::path path(db);
  const std::filesystem::path dir = path.parent_path() / tableio::rules_dir_name(path.filename().string());
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return rules;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json" && entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    auto text = replay::read_text_file(file.string());
    auto rule = text ? tableio::read_rule_json(*text, file.string()) : Result<tableio::RuleDocument>(text.error());
    if (!rule) {
      io.err << "ktune: skipping the rule " << file.string() << ": " << rule.error().message << '\n';
      continue;
    }
    rules.push_back(std::move(*rule));
  }
  return rules;
}

int export_engine_json(const ExportOptions& options, const std::string& db, const tableio::Table& table,
                       Output& io) {
  if (options.by.empty() || options.output.empty()) {
    return report_error(io, ErrorCode::usage, "--format engine-json needs --by DIM and -o DIRECTORY", k_exit_usage);
  }
  tableio::EngineExportOptions engine{options.by, KTUNE_VERSION};
  auto files = tableio::write_engine_json(table, stored_rules(db, io), engine);
  if (!files) return report(io, files.error());
  std::error_code ec;
  std::filesystem::create_directories(options.output, ec);
  if (ec) return report_error(io, ErrorCode::io_error, "cannot make the directory " + options.output + ": " + ec.message());
  for (const auto& file : *files) {
    const std::string path = (std::filesystem::path(options.output) / file.name).string();
    if (auto written = write_file_atomic(path, file.text); !written) return report(io, written.error());
  }
  if (io.json) {
    json names = json::array();
    for (const auto& file : *files) names.push_back(file.name);
    print_json(io, json{{"output", options.output}, {"format", "engine-json"}, {"files", names},
                        {"winners", table.rows.size()}});
  } else {
    io.err << "exported " << table.rows.size() << " winner(s) as " << files->size() << " file(s) to "
           << options.output << '\n';
  }
  return k_exit_ok;
}

} // namespace

int export_table(const ExportOptions& options, Output& io) {
  if (options.format == "engine-json") {
    const std::string db = options.db.empty() ? resolve_paths(path_env_from_process()).db : options.db;
    auto store = Store::open(db, OpenMode::read_only);
    if (!store) return report(io, store.error());
    auto table = tableio::load_table(*store, {options.kernel, options.device});
    if (!table) return report(io, table.error());
    table->exported_at_ms = std::chrono::duration_cast<milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    return export_engine_json(options, db, *table, io);
  }
  if (!options.by.empty()) {
    return report_error(io, ErrorCode::usage, "--by is an option of --format engine-json", k_exit_usage);
  }
  const auto format = tableio::parse_format(options.format);
  if (!format) {
    io.err << "ktune: unknown format '" << options.format
           << "' (expected json, csv, cpp-header or t4)\n";
    return k_exit_usage;
  }
  const std::string db =
      options.db.empty() ? resolve_paths(path_env_from_process()).db : options.db;
  auto store = Store::open(db, OpenMode::read_only);
  if (!store) return report(io, store.error());
  auto table = tableio::load_table(*store, {options.kernel, options.device});
  if (!table) return report(io, table.error());
  table->exported_at_ms = std::chrono::duration_cast<milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  auto text = tableio::write_table(*table, *format);
  if (!text) return report(io, text.error());
  if (options.output.empty()) {
    io.out << *text << std::flush;
    return io.out ? k_exit_ok : k_exit_error;
  }
  if (auto written = write_file_atomic(options.output, *text); !written) return report(io, written.error());
  if (io.json) {
    print_json(io, json{{"output", options.output}, {"format", options.format},
                        {"winners", table->rows.size()}});
  } else {
    io.err << "exported " << table->rows.size() << " winner(s) to " << options.output << '\n';
  }
  return k_exit_ok;
}

json import_request(const tableio::Table& table, tableio::Policy policy) {
  return json{{"op", "import"},
              {"table", json(tableio::table_to_json(table))},
              {"policy", tableio::to_string(policy)}};
}

namespace {

// The table cut into parts whose import requests fit ktuned's request lines of at most `limit`
// bytes ([daemon].max_message_bytes), rows in order. Errors: message_too_large when one row alone
// does not fit.
Result<std::vector<tableio::Table>> split_for_limit(const tableio::Table& table, tableio::Policy policy,
                                                    std::size_t limit) {
  auto request_bytes = [](const json& request) {
    return request.dump(-1, ' ', false, json::error_handler_t::replace).size() + 1;
  };
  std::vector<tableio::Table> parts;
  std::vector<tableio::Table> pending{table};
  while (!pending.empty()) {
    tableio::Table part = std::move(pending.back());
    pending.pop_back();
    const std::size_t bytes = request_bytes(import_request(part, policy));
    if (bytes + 64 <= limit || part.rows.size() <= 1) {
      if (bytes + 64 > limit) {
        return make_error(ErrorCode::message_too_large,
                          "a single row of the table makes an import request of " + std::to_string(bytes) +
                              " bytes; ktuned accepts request lines of at most [daemon].max_message_bytes (" +
                              std::to_string(limit) + " bytes here): raise that setting in ktuned's "
                              "configuration");
      }
      parts.push_back(std::move(part));
      continue;
    }
    tableio::Table second = part;
    const auto half = static_cast<std::ptrdiff_t>(part.rows.size() / 2);
    part.rows.erase(part.rows.begin() + half, part.rows.end());
    second.rows.erase(second.rows.begin(), second.rows.begin() + half);
    pending.push_back(std::move(second)); // popped after `part`: the rows stay in order
    pending.push_back(std::move(part));
  }
  return parts;
}

} // namespace

int import_table_file(const GlobalOptions& global, const ImportOptions& options, Output& io) {
  const auto policy = tableio::parse_policy(options.policy);
  if (!policy) {
    return report_error(io, ErrorCode::usage, "unknown policy '" + options.policy +
                                         "' (expected faster, newer or keep)", k_exit_usage);
  }
  auto text = replay::read_text_file(options.file);
  if (!text) return report(io, text.error());
  tableio::T4Defaults t4 = options.t4;
  if (t4.host.empty()) t4.host = tableio::local_host_name();  // a foreign T4 file names no host
  auto table = tableio::read_table(*text, options.file, t4);
  if (!table) return report(io, table.error());

  const std::string socket = socket_path(global);
  auto conn = connect_daemon(socket, global, io);
  if (!conn) return report(io, conn.error(), socket);
  // ktuned reads request lines of at most [daemon].max_message_bytes: a bigger table goes in
  // parts, each one import request, their replies added up.
  std::size_t limit = k_default_max_message_bytes;
  if (auto stats = call(*conn, json{{"op", "stats"}}, k_request_timeout)) {
    limit = static_cast<std::size_t>(stats->value("max_message_bytes", limit));
  }
  auto parts = split_for_limit(*table, *policy, limit);
  if (!parts) return report(io, parts.error());
  json result = {{"rows", 0}, {"imported", 0}, {"replaced", 0}, {"kept", 0}, {"unchanged", 0},
                 {"policy", tableio::to_string(*policy)}, {"jobs", json::array()},
                 {"conflicts", json::array()}, {"requests", parts->size()}};
  for (std::size_t i = 0; i < parts->size(); ++i) {
    if (parts->size() > 1 && io.err_is_tty) {
      io.err << "\rimporting part " << (i + 1) << "/" << parts->size() << std::flush;
    }
    auto reply = call(*conn, import_request((*parts)[i], *policy), k_import_timeout);
    if (!reply) {
      if (parts->size() > 1 && io.err_is_tty) io.err << '\n';
      if (i > 0) {
        io.err << "ktune: parts 1-" << i << " of " << parts->size()
               << " were imported before this error\n";
      }
      return report(io, reply.error(), socket);
    }
    for (const char* count : {"rows", "imported", "replaced", "kept", "unchanged"}) {
      result[count] = result[count].get<std::int64_t>() + reply->value(count, std::int64_t{0});
    }
    for (const char* list : {"jobs", "conflicts"}) {
      for (const auto& item : reply->value(list, json::array())) result[list].push_back(item);
    }
  }
  if (parts->size() > 1 && io.err_is_tty) io.err << '\n';
  if (global.json || options.json) {
    print_json(io, result);
  } else {
    print_import_reply(result, io.out);
  }
  return k_exit_ok;
}

void print_import_reply(const json& result, std::ostream& out) {
  auto count = [&](const char* name) { return std::to_string(result.value(name, 0LL)); };
  out << "rows " << count("rows") << ": imported " << count("imported") << ", replaced "
      << count("replaced") << ", kept " << count("kept") << ", unchanged " << count("unchanged")
      << " (policy " << result.value("policy", std::string("?")) << ")\n";
  const json conflicts = result.value("conflicts", json::array());
  if (conflicts.empty()) return;
  out << '\n' << conflicts.size() << " conflict(s):\n";
  Table table({{"KERNEL"}, {"SHAPE"}, {"DTYPE"}, {"DEVICE"}, {"KEPT"}, {"DROPPED"}, {"WHY"}});
  for (const auto& c : conflicts) {
    const json kept = c.value("kept", json::object());
    const json dropped = c.value("dropped", json::object());
    auto side = [](const json& s) {
      return config_text(s.value("config", json())) + " (" + s.value("from", std::string("?")) +
             ")";
    };
    table.add_row({value_text(c.value("kernel", json())), value_text(c.value("shape", json())),
                   value_text(c.value("dtype", json())),
                   value_text(c.value("fingerprint", json())).substr(0, 12), side(kept),
                   side(dropped), value_text(c.value("why", json()))});
  }
  table.print(out);
}

} // namespace ktune::cli
