// The cpp-header writer: a self-contained C++17 header holding the table as constexpr data and a
// lookup function (docs/export-format.md § cpp-header).
#include "tableio/formats.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

namespace ktune::tableio {

namespace {

std::string literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);  // octal: never swallows the next character
      out += buf;
    } else if (c == '?') {
      out += "\\?";  // no trigraphs before C++17's removal of them
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Text safe inside a // comment: no line breaks, no backslash (a line continuation).
std::string comment_text(std::string_view text) {
  std::string out;
  for (unsigned char c : text) out += (c < 0x20 || c == 0x7f || c == '\\') ? '?' : static_cast<char>(c);
  return out;
}

std::string double_literal(double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  std::string text = ec == std::errc() ? std::string(buf, end) : std::string("0");
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

std::string int_literal(std::int64_t value) {
  if (value == std::numeric_limits<std::int64_t>::min()) return "(-9223372036854775807 - 1)";
  return std::to_string(value);
}

constexpr const char* k_preamble = R"cpp(#include <cstddef>
#include <cstdint>
#include <string_view>

namespace @NS@ {

// One tunable parameter of a winning config.
struct Param {
  std::string_view name;
  std::int64_t value;
};

// One winner: its key, its config and the median time it was measured at.
struct Entry {
  std::string_view kernel;       // kernel family
  std::string_view shape;        // "M=256,N=256,K=256"
  std::string_view dtype;        // "f32"
  std::string_view device;       // device name on the machine that tuned it ("cpu", "cuda:0")
  std::string_view fingerprint;  // that device's fingerprint
  std::string_view source_hash;  // the kernel source it was tuned with
  const Param* params;           // the config, in the kernel's params order
  std::size_t param_count;
  double median_ms;
  double gflops;                 // 0 = unknown

  // The value of parameter `name`, or `fallback` when the config has none.
  constexpr std::int64_t get(std::string_view name, std::int64_t fallback = 0) const noexcept {
    for (std::size_t i = 0; i < param_count; ++i) {
      if (params[i].name == name) return params[i].value;
    }
    return fallback;
  }
};

namespace detail {
inline constexpr Param k_no_params[1] = {{"", 0}};
)cpp";

constexpr const char* k_lookup = R"cpp(
// The winner of (kernel, shape, dtype, device), or nullptr when the table has none. `device` is
// the device name the winner was tuned on ("cpu", "cuda:0") or its full fingerprint; when several
// entries match (tuned on different machines or sources) the first in table order is returned.
// Usable in constant expressions.
constexpr const Entry* lookup(std::string_view kernel, std::string_view shape,
                              std::string_view dtype, std::string_view device) noexcept {
  for (std::size_t i = 0; i < k_entry_count; ++i) {
    const Entry& e = k_entries[i];
    if (e.kernel == kernel && e.shape == shape && e.dtype == dtype &&
        (e.device == device || e.fingerprint == device)) {
      return &e;
    }
  }
  return nullptr;
}

} // namespace @NS@
)cpp";

std::string with_namespace(std::string text, std::string_view name_space) {
  const std::string marker = "@NS@";
  for (auto pos = text.find(marker); pos != std::string::npos; pos = text.find(marker, pos)) {
    text.replace(pos, marker.size(), name_space);
    pos += name_space.size();
  }
  return text;
}

bool is_identifier(std::string_view text) {
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

} // namespace

Result<std::string> write_cpp_header(const Table& table, std::string_view name_space) {
  if (!is_identifier(name_space)) {
    return make_error(ErrorCode::invalid_table, "cpp-header: namespace '" + std::string(name_space) +
                                           "' is not a C++ identifier");
  }
  std::string out = "// ktune tuned configurations: " + std::to_string(table.rows.size()) +
                    " winner(s) exported from " + (table.host.empty() ? "?" : comment_text(table.host)) +
                    " (export schema " + std::to_string(k_table_schema_version) + ").\n"
                    "// Self-contained: needs only the C++17 standard library. Find a config with\n"
                    "// " + std::string(name_space) +
                    "::lookup(kernel, shape, dtype, device)->get(\"PARAM\").\n"
                    "#pragma once\n\n";
  out += with_namespace(k_preamble, name_space);

  std::string entries;
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    const TableRow& row = table.rows[i];
    std::string params = "detail::k_no_params";
    if (!row.config.empty()) {
      params = "detail::k_params_" + std::to_string(i);
      out += "inline constexpr Param k_params_" + std::to_string(i) + "[] = {";
      bool first = true;
      for (auto it = row.config.begin(); it != row.config.end(); ++it) {
        if (!it.value().is_number_integer()) {
          return make_error(ErrorCode::invalid_table,
                            "cpp-header: row " + std::to_string(i) + " (" + to_string(row.key()) +
                                "): config." + it.key() + " is " + it.value().dump() +
                                "; the header holds integer parameter values only");
        }
        out += first ? "" : ", ";
        first = false;
        out += "{" + literal(it.key()) + ", " + int_literal(it.value().get<std::int64_t>()) + "}";
      }
      out += "};\n";
    }
    entries += "    {" + literal(row.kernel) + ", " + literal(row.shape) + ", " +
               literal(row.dtype) + ", " + literal(row.device_name) + ", " +
               literal(row.fingerprint) + ", " + literal(row.source_hash) + ", " + params + ", " +
               std::to_string(row.config.size()) + ", " + double_literal(row.median_ms) + ", " +
               double_literal(row.gflops) + "},\n";
  }
  out += "} // namespace detail\n\n";
  out += "inline constexpr std::size_t k_entry_count = " + std::to_string(table.rows.size()) + ";\n";
  if (table.rows.empty()) {
    entries = "    {\"\", \"\", \"\", \"\", \"\", \"\", detail::k_no_params, 0, 0.0, 0.0},\n";
  }
  out += "inline constexpr Entry k_entries[" + std::to_string(std::max<std::size_t>(1, table.rows.size())) +
         "] = {\n" + entries + "};\n";
  out += with_namespace(k_lookup, name_space);
  return out;
}

} // namespace ktune::tableio
