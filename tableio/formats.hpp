#pragma once
// Writers and readers of exported tables (docs/export-format.md):
//   json        ktune's versioned table schema; read back by read_json
//   csv         one line per row, RFC 4180 quoting; write only
//   cpp-header  a self-contained C++17 header: a constexpr table and a lookup function
//   t4          the T4 open auto-tuning results schema 1.0.0 (as Kernel Tuner writes it), each
//               result carrying its ktune row under "ktune"; read back by read_t4, which also
//               reads T4 files from elsewhere (one tuning run: the best correct result wins)
//
// Writers are pure. Reader errors have code "invalid_table" and name the file, the row (or
// result) index and the field: "t.json: rows[2].median_ms: expected a number, found \"x\"".
#include "core/result.hpp"
#include "tableio/table.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace ktune::tableio {

enum class Format { json, csv, cpp_header, t4 };

[[nodiscard]] std::string_view to_string(Format format);
// "json", "csv", "cpp-header", "t4"; nullopt otherwise.
[[nodiscard]] std::optional<Format> parse_format(std::string_view text);

// --- writers ------------------------------------------------------------------------------------

// The JSON document of the table (keys in schema order, configs in the rows' order).
[[nodiscard]] nlohmann::ordered_json table_to_json(const Table& table);
[[nodiscard]] std::string write_json(const Table& table);   // indented, ends with '\n'
[[nodiscard]] std::string write_csv(const Table& table);
// Namespace of the header's declarations; a valid C++ identifier.
inline constexpr std::string_view k_header_namespace = "ktune_tuned";
// Every config value must be an integer (ktune's params are); otherwise an "invalid_table" error
// names the row and the parameter.
[[nodiscard]] Result<std::string> write_cpp_header(const Table& table,
                                                   std::string_view name_space = k_header_namespace);
[[nodiscard]] std::string write_t4(const Table& table);
// Any of the four; only cpp-header can fail.
[[nodiscard]] Result<std::string> write_table(const Table& table, Format format);

// --- readers ------------------------------------------------------------------------------------

// A table from a parsed JSON export (the schema of table_to_json). `where` names the source in
// errors (a file name, "request").
[[nodiscard]] Result<Table> table_from_json(const nlohmann::ordered_json& document,
                                            std::string_view where);
[[nodiscard]] Result<Table> read_json(std::string_view text, std::string_view where);

// What a T4 file from elsewhere lacks: T4 results carry neither kernel, shape, dtype nor device.
// Used only for results without a "ktune" object. An empty fingerprint is derived from the
// device name (hash of {"kind":"imported","name":device_name}); an empty source hash stays
// empty (an unknown source: lookups never match it exactly).
struct T4Defaults {
  std::string kernel, shape, dtype = "f32";
  std::string device_name = "imported";
  std::string fingerprint, source_hash;
  std::string host;           // "" = the `host` given to read_t4's caller (file's metadata)
};

[[nodiscard]] Result<Table> read_t4(std::string_view text, std::string_view where,
                                    const T4Defaults& defaults = {});

// Detects the format from the content: a JSON object with "format": "ktune-table" is json, one
// with a "results" array is t4, one whose metadata.format is "ktune-engine-json" is an engine
// table (tableio/engine_json.hpp). Errors name `where` and what was found.
[[nodiscard]] Result<Table> read_table(std::string_view text, std::string_view where,
                                       const T4Defaults& defaults = {});

} // namespace ktune::tableio
