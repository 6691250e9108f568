#include "tableio/formats.hpp"

#include "tableio/engine_json.hpp"

#include "core/hash.hpp"
#include "core/stats.hpp"

#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <utility>

namespace ktune::tableio {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::string_view k_format_name = "ktune-table";
constexpr std::string_view k_t4_schema_version = "1.0.0";

Error invalid(std::string_view where, const std::string& path, const std::string& message) {
  return make_error(ErrorCode::invalid_table, std::string(where) + ": " + path + ": " + message);
}

std::string describe(const ordered_json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(value.type_name()) + " " + text;
}

// Typed field access with errors that name the source, the path and what was found.
class Object {
public:
  Object(const ordered_json& value, std::string_view where, std::string path)
      : m_value(value), m_where(where), m_path(std::move(path)) {}

  [[nodiscard]] Result<void> require_object() const {
    if (m_value.is_object()) return {};
    return invalid(m_where, m_path, "expected an object, found " + describe(m_value));
  }
  [[nodiscard]] bool has(const char* name) const {
    return m_value.contains(name) && !m_value.at(name).is_null();
  }
  [[nodiscard]] std::string path_of(const char* name) const {
    return m_path.empty() ? std::string(name) : m_path + "." + name;
  }
  [[nodiscard]] Result<std::string> text(const char* name, bool required = true) const {
    if (!has(name)) {
      if (!required) return std::string();
      return invalid(m_where, path_of(name), "missing; expected a string");
    }
    const auto& v = m_value.at(name);
    if (!v.is_string()) return invalid(m_where, path_of(name), "expected a string, found " + describe(v));
    return v.get<std::string>();
  }
  [[nodiscard]] Result<double> number(const char* name, bool required = true) const {
    if (!has(name)) {
      if (!required) return 0.0;
      return invalid(m_where, path_of(name), "missing; expected a number");
    }
    const auto& v = m_value.at(name);
    if (!v.is_number()) return invalid(m_where, path_of(name), "expected a number, found " + describe(v));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0) {
      return invalid(m_where, path_of(name), "expected a finite number >= 0, found " + v.dump());
    }
    return d;
  }
  [[nodiscard]] Result<std::int64_t> integer(const char* name, bool required = true) const {
    if (!has(name)) {
      if (!required) return std::int64_t{0};
      return invalid(m_where, path_of(name), "missing; expected an integer");
    }
    const auto& v = m_value.at(name);
    if (!v.is_number_integer() || (v.is_number_integer() && v.get<std::int64_t>() < 0)) {
      return invalid(m_where, path_of(name), "expected an integer >= 0, found " + describe(v));
    }
    return v.get<std::int64_t>();
  }
  [[nodiscard]] const ordered_json& at(const char* name) const { return m_value.at(name); }

private:
  const ordered_json& m_value;
  std::string_view m_where;
  std::string m_path;
};

#define KTUNE_TABLE_TRY(target, expr)      \
  do {                                     \
    auto try_value_ = (expr);              \
    if (!try_value_) return try_value_.error(); \
    target = std::move(try_value_).value(); \
  } while (false)

ordered_json stats_to_json(const SampleStats& s) {
  ordered_json out = ordered_json::object();
  out["n"] = s.n;
  out["min_ms"] = s.min_ms;
  out["max_ms"] = s.max_ms;
  out["median_ms"] = s.median_ms;
  out["mean_ms"] = s.mean_ms;
  out["stddev_ms"] = s.stddev_ms;
  out["q1_ms"] = s.q1_ms;
  out["q3_ms"] = s.q3_ms;
  return out;
}

ordered_json row_to_json(const TableRow& row) {
  ordered_json out = ordered_json::object();
  out["kernel"] = row.kernel;
  out["shape"] = row.shape;
  out["dtype"] = row.dtype;
  out["fingerprint"] = row.fingerprint;
  out["source_hash"] = row.source_hash;
  out["config"] = row.config;
  out["median_ms"] = row.median_ms;
  if (row.stats.n > 0) out["stats"] = stats_to_json(row.stats);
  if (!row.samples_ms.empty()) out["samples_ms"] = row.samples_ms;
  out["gflops"] = row.gflops;
  out["gbps"] = row.gbps;
  out["compile_ms"] = row.compile_ms;
  out["device"] = ordered_json{{"name", row.device_name}, {"details", row.device}};
  out["toolchain"] = row.toolchain;
  out["time_ms"] = row.time_ms;
  out["host"] = row.host;
  return out;
}

Result<SampleStats> stats_from_json(const Object& row, std::string_view where) {
  SampleStats s;
  if (!row.has("stats")) return s;
  const Object stats(row.at("stats"), where, row.path_of("stats"));
  if (auto ok = stats.require_object(); !ok) return ok.error();
  std::int64_t n = 0;
  KTUNE_TABLE_TRY(n, stats.integer("n"));
  s.n = static_cast<std::size_t>(n);
  KTUNE_TABLE_TRY(s.min_ms, stats.number("min_ms"));
  KTUNE_TABLE_TRY(s.max_ms, stats.number("max_ms"));
  KTUNE_TABLE_TRY(s.median_ms, stats.number("median_ms"));
  KTUNE_TABLE_TRY(s.mean_ms, stats.number("mean_ms"));
  KTUNE_TABLE_TRY(s.stddev_ms, stats.number("stddev_ms"));
  KTUNE_TABLE_TRY(s.q1_ms, stats.number("q1_ms", false));
  KTUNE_TABLE_TRY(s.q3_ms, stats.number("q3_ms", false));
  return s;
}

Result<void> check_config(const ordered_json& config, std::string_view where,
                          const std::string& path) {
  if (!config.is_object()) {
    return invalid(where, path, "expected an object of parameter values, found " + describe(config));
  }
  for (auto it = config.begin(); it != config.end(); ++it) {
    const auto& v = it.value();
    if (!v.is_number() && !v.is_string() && !v.is_boolean()) {
      return invalid(where, path + "." + it.key(),
                     "expected a number or a string, found " + describe(v));
    }
  }
  return {};
}

Result<TableRow> row_from_json(const ordered_json& value, std::string_view where,
                               const std::string& path) {
  const Object row(value, where, path);
  if (auto ok = row.require_object(); !ok) return ok.error();
  TableRow out;
  KTUNE_TABLE_TRY(out.kernel, row.text("kernel"));
  KTUNE_TABLE_TRY(out.shape, row.text("shape"));
  KTUNE_TABLE_TRY(out.dtype, row.text("dtype"));
  KTUNE_TABLE_TRY(out.fingerprint, row.text("fingerprint"));
  KTUNE_TABLE_TRY(out.source_hash, row.text("source_hash", false));
  for (auto [field, text] : {std::pair{"kernel", &out.kernel}, std::pair{"shape", &out.shape},
                             std::pair{"dtype", &out.dtype},
                             std::pair{"fingerprint", &out.fingerprint}}) {
    if (text->empty()) return invalid(where, row.path_of(field), "expected a non-empty string");
  }
  if (!row.has("config")) return invalid(where, row.path_of("config"), "missing; expected an object");
  out.config = row.at("config");
  if (auto ok = check_config(out.config, where, row.path_of("config")); !ok) return ok.error();
  KTUNE_TABLE_TRY(out.median_ms, row.number("median_ms"));
  KTUNE_TABLE_TRY(out.stats, stats_from_json(row, where));
  if (row.has("samples_ms")) {
    const auto& samples = row.at("samples_ms");
    if (!samples.is_array()) {
      return invalid(where, row.path_of("samples_ms"),
                     "expected an array of times in ms, found " + describe(samples));
    }
    for (std::size_t i = 0; i < samples.size(); ++i) {
      if (!samples[i].is_number() || samples[i].get<double>() < 0) {
        return invalid(where, row.path_of("samples_ms") + "[" + std::to_string(i) + "]",
                       "expected a time in ms >= 0, found " + describe(samples[i]));
      }
      out.samples_ms.push_back(samples[i].get<float>());
    }
  }
  KTUNE_TABLE_TRY(out.gflops, row.number("gflops", false));
  KTUNE_TABLE_TRY(out.gbps, row.number("gbps", false));
  KTUNE_TABLE_TRY(out.compile_ms, row.number("compile_ms", false));
  if (row.has("device")) {
    const Object device(row.at("device"), where, row.path_of("device"));
    if (auto ok = device.require_object(); !ok) return ok.error();
    KTUNE_TABLE_TRY(out.device_name, device.text("name", false));
    if (device.has("details")) {
      const auto& details = device.at("details");
      if (!details.is_object()) {
        return invalid(where, device.path_of("details"),
                       "expected an object, found " + describe(details));
      }
      out.device = json(details);
    }
  }
  KTUNE_TABLE_TRY(out.toolchain, row.text("toolchain", false));
  KTUNE_TABLE_TRY(out.time_ms, row.integer("time_ms", false));
  KTUNE_TABLE_TRY(out.host, row.text("host", false));
  return out;
}

// ---- CSV ----

std::string number_text(double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::string("nan");
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string device_description(const TableRow& row) {
  for (const char* field : {"name", "model"}) {
    auto it = row.device.find(field);
    if (it != row.device.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

// ---- T4 ----

// "2023-12-22 09:54:05.502007+00:00" (what Kernel Tuner writes) for a unix ms time.
std::string iso_timestamp(std::int64_t time_ms) {
  const std::time_t seconds = static_cast<std::time_t>(time_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06d+00:00", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(time_ms % 1000) * 1000);
  return buf;
}

// Unix ms of "YYYY-MM-DD[ T]HH:MM:SS[.ffffff][Z|+HH:MM|-HH:MM]"; nullopt when it does not parse.
std::optional<std::int64_t> parse_timestamp(const std::string& text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, used = 0;
  char separator = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d%n", &year, &month, &day, &separator,
                  &hour, &minute, &second, &used) != 7 ||
      (separator != ' ' && separator != 'T')) {
    return std::nullopt;
  }
  std::size_t pos = static_cast<std::size_t>(used);
  std::int64_t micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      if (digits < 6) {
        micros = micros * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    while (digits++ < 6) micros *= 10;
  }
  std::int64_t offset_s = 0;
  if (pos < text.size()) {
    if (text[pos] == 'Z' && pos + 1 == text.size()) {
    } else if (text[pos] == '+' || text[pos] == '-') {
      int oh = 0, om = 0;
      if (std::sscanf(text.c_str() + pos + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
      offset_s = (text[pos] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
    } else {
      return std::nullopt;
    }
  }
  std::tm utc{};
  utc.tm_year = year - 1900;
  utc.tm_mon = month - 1;
  utc.tm_mday = day;
  utc.tm_hour = hour;
  utc.tm_min = minute;
  utc.tm_sec = second;
  const std::time_t seconds = timegm(&utc);
  return (static_cast<std::int64_t>(seconds) - offset_s) * 1000 + micros / 1000;
}

std::optional<double> measurement(const ordered_json& result, const char* name) {
  auto it = result.find("measurements");
  if (it == result.end() || !it->is_array()) return std::nullopt;
  for (const auto& m : *it) {
    if (m.is_object() && m.value("name", std::string()) == name && m.contains("value") &&
        m["value"].is_number()) {
      return m["value"].get<double>();
    }
  }
  return std::nullopt;
}

// One result of a T4 file from elsewhere: the candidate and its time.
struct ForeignCandidate {
  TableRow row;
  double objective_ms = 0;
};

Result<std::optional<ForeignCandidate>> foreign_candidate(const ordered_json& result,
                                                          std::string_view where,
                                                          const std::string& path) {
  const Object r(result, where, path);
  std::string invalidity;
  KTUNE_TABLE_TRY(invalidity, r.text("invalidity"));
  if (invalidity != "correct") return std::optional<ForeignCandidate>{};
  if (!r.has("configuration")) {
    return invalid(where, r.path_of("configuration"), "missing; expected an object");
  }
  ForeignCandidate candidate;
  candidate.row.config = r.at("configuration");
  if (auto ok = check_config(candidate.row.config, where, r.path_of("configuration")); !ok)
    return ok.error();

  std::vector<double> runtimes;
  if (r.has("times")) {
    const Object times(r.at("times"), where, r.path_of("times"));
    if (auto ok = times.require_object(); !ok) return ok.error();
    KTUNE_TABLE_TRY(candidate.row.compile_ms, times.number("compilation", false));
    if (times.has("runtimes")) {
      const auto& list = times.at("runtimes");
      if (!list.is_array()) {
        return invalid(where, times.path_of("runtimes"), "expected an array, found " + describe(list));
      }
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_number()) {
          return invalid(where, times.path_of("runtimes") + "[" + std::to_string(i) + "]",
                         "expected a number, found " + describe(list[i]));
        }
        runtimes.push_back(list[i].get<double>());
      }
    }
  }
  const auto time = measurement(result, "time");
  if (!time && runtimes.empty()) {
    return invalid(where, r.path_of("measurements"),
                   "a correct result needs a numeric \"time\" measurement or times.runtimes");
  }
  if (!runtimes.empty()) {
    candidate.row.stats = summarize(runtimes);
    candidate.row.median_ms = candidate.row.stats.median_ms;
  } else {
    candidate.row.median_ms = *time;
  }
  // The objective Kernel Tuner minimised ("time", the mean of the runtimes).
  candidate.objective_ms = time ? *time : candidate.row.stats.mean_ms;
  candidate.row.gflops = measurement(result, "GFLOP/s").value_or(0.0);
  candidate.row.gbps = measurement(result, "GB/s").value_or(0.0);
  if (r.has("timestamp")) {
    std::string stamp;
    KTUNE_TABLE_TRY(stamp, r.text("timestamp"));
    const auto parsed = parse_timestamp(stamp);
    if (!parsed) {
      return invalid(where, r.path_of("timestamp"),
                     "expected \"YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]\", found \"" + stamp + "\"");
    }
    candidate.row.time_ms = *parsed;
  }
  return std::optional<ForeignCandidate>(std::move(candidate));
}

Result<std::vector<KernelSource>> kernels_from_json(const ordered_json& list,
                                                    std::string_view where,
                                                    const std::string& path) {
  std::vector<KernelSource> kernels;
  if (!list.is_array()) return invalid(where, path, "expected an array, found " + describe(list));
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Object k(list[i], where, path + "[" + std::to_string(i) + "]");
    if (auto ok = k.require_object(); !ok) return ok.error();
    KernelSource source;
    KTUNE_TABLE_TRY(source.name, k.text("name"));
    KTUNE_TABLE_TRY(source.source_hash, k.text("source_hash"));
    KTUNE_TABLE_TRY(source.spec_text, k.text("spec_text"));
    kernels.push_back(std::move(source));
  }
  return kernels;
}

ordered_json kernels_to_json(const std::vector<KernelSource>& kernels) {
  ordered_json list = ordered_json::array();
  for (const auto& k : kernels) {
    list.push_back(ordered_json{{"name", k.name}, {"source_hash", k.source_hash},
                                {"spec_text", k.spec_text}});
  }
  return list;
}

Result<ordered_json> parse_document(std::string_view text, std::string_view where) {
  try {
    return ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return make_error(ErrorCode::invalid_table, std::string(where) + ": not JSON: " + e.what());
  }
}

} // namespace

std::string_view to_string(Format format) {
  switch (format) {
    case Format::json: return "json";
    case Format::csv: return "csv";
    case Format::cpp_header: return "cpp-header";
    case Format::t4: return "t4";
  }
  return "unknown";
}

std::optional<Format> parse_format(std::string_view text) {
  for (Format f : {Format::json, Format::csv, Format::cpp_header, Format::t4}) {
    if (to_string(f) == text) return f;
  }
  return std::nullopt;
}

// ---- writers ----

ordered_json table_to_json(const Table& table) {
  ordered_json out = ordered_json::object();
  out["format"] = k_format_name;
  out["schema_version"] = k_table_schema_version;
  out["host"] = table.host;
  out["exported_at_ms"] = table.exported_at_ms;
  if (!table.provenance.empty()) out["provenance"] = table.provenance;
  ordered_json rows = ordered_json::array();
  for (const auto& row : table.rows) rows.push_back(row_to_json(row));
  out["rows"] = std::move(rows);
  out["kernels"] = kernels_to_json(table.kernels);
  return out;
}

std::string write_json(const Table& table) { return table_to_json(table).dump(2) + "\n"; }

std::string write_csv(const Table& table) {
  std::string out =
      "kernel,shape,dtype,device,fingerprint,source_hash,config,median_ms,n,min_ms,max_ms,"
      "mean_ms,stddev_ms,q1_ms,q3_ms,gflops,gbps,compile_ms,device_description,toolchain,time_ms,"
      "host\r\n";
  for (const auto& row : table.rows) {
    const SampleStats& s = row.stats;
    const std::vector<std::string> fields{
        row.kernel, row.shape, row.dtype, row.device_name, row.fingerprint, row.source_hash,
        row.config_text(), number_text(row.median_ms), std::to_string(s.n),
        number_text(s.min_ms), number_text(s.max_ms), number_text(s.mean_ms),
        number_text(s.stddev_ms), number_text(s.q1_ms), number_text(s.q3_ms),
        number_text(row.gflops), number_text(row.gbps), number_text(row.compile_ms),
        device_description(row), row.toolchain, std::to_string(row.time_ms), row.host};
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i) out += ',';
      out += csv_field(fields[i]);
    }
    out += "\r\n";
  }
  return out;
}

std::string write_t4(const Table& table) {
  ordered_json out = ordered_json::object();
  out["schema_version"] = k_t4_schema_version;
  out["metadata"] = ordered_json{
      {"timeunit", "miliseconds"},
      {"ktune", ordered_json{{"format", k_format_name},
                             {"schema_version", k_table_schema_version},
                             {"host", table.host},
                             {"exported_at_ms", table.exported_at_ms},
                             {"kernels", kernels_to_json(table.kernels)}}}};
  ordered_json results = ordered_json::array();
  for (const auto& row : table.rows) {
    ordered_json result = ordered_json::object();
    result["timestamp"] = iso_timestamp(row.time_ms);
    result["configuration"] = row.config;
    result["times"] = ordered_json{{"compilation", row.compile_ms},
                                   {"framework", 0},
                                   {"search_algorithm", 0},
                                   {"validation", 0}};
    result["invalidity"] = "correct";
    result["correctness"] = 1;
    ordered_json measurements = ordered_json::array();
    measurements.push_back(ordered_json{{"name", "time"}, {"value", row.median_ms}, {"unit", "ms"}});
    if (row.gflops > 0) {
      measurements.push_back(
          ordered_json{{"name", "GFLOP/s"}, {"value", row.gflops}, {"unit", "GFLOP/s"}});
    }
    if (row.gbps > 0) {
      measurements.push_back(ordered_json{{"name", "GB/s"}, {"value", row.gbps}, {"unit", "GB/s"}});
    }
    result["measurements"] = std::move(measurements);
    result["objectives"] = ordered_json::array({"time"});
    result["ktune"] = row_to_json(row);
    results.push_back(std::move(result));
  }
  out["results"] = std::move(results);
  return out.dump(2) + "\n";
}

Result<std::string> write_table(const Table& table, Format format) {
  switch (format) {
    case Format::json: return write_json(table);
    case Format::csv: return write_csv(table);
    case Format::cpp_header: return write_cpp_header(table);
    case Format::t4: return write_t4(table);
  }
  return make_error(ErrorCode::invalid_table, "unknown export format");
}

// ---- readers ----

Result<Table> table_from_json(const ordered_json& document, std::string_view where) {
  const Object top(document, where, "");
  if (!document.is_object()) {
    return make_error(ErrorCode::invalid_table, std::string(where) + ": expected a JSON object, found " +
                                           describe(document));
  }
  std::string format;
  KTUNE_TABLE_TRY(format, top.text("format"));
  if (format != k_format_name) {
    return invalid(where, "format", "expected \"" + std::string(k_format_name) + "\", found \"" +
                                        format + "\"");
  }
  std::int64_t version = 0;
  KTUNE_TABLE_TRY(version, top.integer("schema_version"));
  if (version != k_table_schema_version) {
    return invalid(where, "schema_version",
                   "expected " + std::to_string(k_table_schema_version) + ", found " +
                       std::to_string(version) + " (written by another ktune version)");
  }
  Table table;
  KTUNE_TABLE_TRY(table.host, top.text("host", false));
  KTUNE_TABLE_TRY(table.exported_at_ms, top.integer("exported_at_ms", false));
  if (top.has("provenance")) {
    if (!top.at("provenance").is_object()) {
      return invalid(where, "provenance", "expected an object, found " + describe(top.at("provenance")));
    }
    table.provenance = top.at("provenance");
  }
  if (!top.has("rows")) return invalid(where, "rows", "missing; expected an array");
  const auto& rows = top.at("rows");
  if (!rows.is_array()) return invalid(where, "rows", "expected an array, found " + describe(rows));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto row = row_from_json(rows[i], where, "rows[" + std::to_string(i) + "]");
    if (!row) return row.error();
    table.rows.push_back(std::move(row).value());
  }
  if (top.has("kernels")) KTUNE_TABLE_TRY(table.kernels, kernels_from_json(top.at("kernels"), where, "kernels"));
  if (auto ok = table.normalize(); !ok) {
    return make_error(ErrorCode::invalid_table, std::string(where) + ": " + ok.error().message);
  }
  return table;
}

Result<Table> read_json(std::string_view text, std::string_view where) {
  auto document = parse_document(text, where);
  if (!document) return document.error();
  return table_from_json(*document, where);
}

namespace {

// A T4 result written by ktune (its "ktune" object): the row, with the T4 "configuration"
// (what other tools edit) winning over the copy in "ktune".
Result<TableRow> ktune_t4_row(const ordered_json& result_json, const Object& result, std::string_view where,
                              const std::string& path) {
  auto row = row_from_json(result_json["ktune"], where, path + ".ktune");
  if (!row) return row.error();
  if (result.has("configuration")) {
    auto config = result_json["configuration"];
    if (auto ok = check_config(config, where, result.path_of("configuration")); !ok) return ok.error();
    row->config = reorder_config(config, [&] {
      std::vector<std::string> order;
      for (auto it = row->config.begin(); it != row->config.end(); ++it) order.push_back(it.key());
      return order;
    }());
  }
  return row;
}

// The best of another tool's T4 results as a row of the key `defaults` names.
Result<TableRow> foreign_t4_row(ForeignCandidate best, const T4Defaults& defaults, const Table& table,
                                std::string_view where) {
  if (defaults.kernel.empty() || defaults.shape.empty() || defaults.dtype.empty()) {
    return make_error(ErrorCode::invalid_table,
                      std::string(where) + ": the T4 results carry no kernel, shape or dtype "
                      "(no \"ktune\" object); give the kernel, shape and dtype they were tuned "
                      "for (ktune import --kernel K --shape S --dtype D)");
  }
  TableRow& row = best.row;
  row.kernel = defaults.kernel;
  row.shape = defaults.shape;
  row.dtype = defaults.dtype;
  row.device_name = defaults.device_name;
  row.device = json{{"kind", "imported"}, {"name", defaults.device_name}};
  row.fingerprint = defaults.fingerprint.empty() ? hash_hex(row.device.dump()) : defaults.fingerprint;
  row.source_hash = defaults.source_hash;
  row.host = defaults.host.empty() ? table.host : defaults.host;
  return std::move(row);
}

// The T4 header: schema 1.x and, when ktune wrote it, the host, export time and kernels.
Result<Table> t4_header(const ordered_json& document, const Object& top, std::string_view where) {
  std::string version;
  KTUNE_TABLE_TRY(version, top.text("schema_version"));
  if (version.rfind("1.", 0) != 0) {
    return invalid(where, "schema_version", "expected a T4 schema 1.x.y, found \"" + version + "\"");
  }
  Table table;
  if (top.has("metadata") && document["metadata"].is_object() &&
      document["metadata"].contains("ktune")) {
    const Object meta(document["metadata"]["ktune"], where, "metadata.ktune");
    if (auto ok = meta.require_object(); !ok) return ok.error();
    KTUNE_TABLE_TRY(table.host, meta.text("host", false));
    KTUNE_TABLE_TRY(table.exported_at_ms, meta.integer("exported_at_ms", false));
    if (meta.has("kernels"))
      KTUNE_TABLE_TRY(table.kernels, kernels_from_json(meta.at("kernels"), where, "metadata.ktune.kernels"));
  }
  return table;
}

Result<Table> t4_from_document(const ordered_json& document, std::string_view where,
                               const T4Defaults& defaults) {
  if (!document.is_object()) {
    return make_error(ErrorCode::invalid_table, std::string(where) + ": expected a T4 object, found " +
                                           describe(document));
  }
  const Object top(document, where, "");
  auto table = t4_header(document, top, where);
  if (!table) return table.error();
  if (!top.has("results")) return invalid(where, "results", "missing; expected an array");
  const auto& results = top.at("results");
  if (!results.is_array()) {
    return invalid(where, "results", "expected an array, found " + describe(results));
  }
  std::optional<ForeignCandidate> best;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::string path = "results[" + std::to_string(i) + "]";
    const Object result(results[i], where, path);
    if (auto ok = result.require_object(); !ok) return ok.error();
    if (result.has("ktune")) {
      auto row = ktune_t4_row(results[i], result, where, path);
      if (!row) return row.error();
      table->rows.push_back(std::move(row).value());
      continue;
    }
    auto candidate = foreign_candidate(results[i], where, path);
    if (!candidate) return candidate.error();
    if (*candidate && (!best || (*candidate)->objective_ms < best->objective_ms)) {
      best = std::move(*candidate);
    }
  }
  if (best) {
    auto row = foreign_t4_row(std::move(*best), defaults, *table, where);
    if (!row) return row.error();
    table->rows.push_back(std::move(row).value());
  }
  if (auto ok = table->normalize(); !ok) {
    return make_error(ErrorCode::invalid_table, std::string(where) + ": " + ok.error().message);
  }
  return table;
}

} // namespace

Result<Table> read_t4(std::string_view text, std::string_view where, const T4Defaults& defaults) {
  auto document = parse_document(text, where);
  if (!document) return document.error();
  return t4_from_document(*document, where, defaults);
}

Result<Table> read_table(std::string_view text, std::string_view where,
                         const T4Defaults& defaults) {
  auto document = parse_document(text, where);
  if (!document) return document.error();
  if (document->is_object() && document->contains("format")) return table_from_json(*document, where);
  if (document->is_object() && document->contains("results")) return t4_from_document(*document, where, defaults);
  if (is_engine_json(*document)) return read_engine_json(*document, where);
  return make_error(ErrorCode::invalid_table,
                    std::string(where) + ": expected a ktune table (\"format\": \"" +
                        std::string(k_format_name) + "\"), a T4 results file (\"results\") or an "
                        "engine-json file (\"metadata\"), found " + describe(*document));
}

} // namespace ktune::tableio
