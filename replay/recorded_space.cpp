#include "replay/recorded_space.hpp"

#include "core/json_depth.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <numeric>

namespace ktune::replay {

using json = nlohmann::json;

namespace {

// Kernel Tuner's old convention for a failed config (FORMAT.md § 1).
constexpr double k_failure_time_ms = 1e10;

Error record_error(std::string_view label, const std::string& message) {
  return make_error(ErrorCode::bad_record, std::string(label) + ": " + message);
}

std::string type_name(const json& v) { return v.type_name(); }

// A short rendering of a JSON value for messages.
std::string excerpt(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// One parameter value as the file writes it.
struct Value {
  enum class Kind { number, boolean, text } kind = Kind::number;
  double number = 0;
  std::string text; // Python str() of the value

  bool operator<(const Value& o) const {
    if (kind != o.kind) return kind < o.kind;
    if (kind == Kind::text) return text < o.text;
    return number < o.number;
  }
  bool operator==(const Value& o) const {
    return kind == o.kind && (kind == Kind::text ? text == o.text : number == o.number);
  }
};

std::optional<Value> to_value(const json& v) {
  Value out;
  if (v.is_number_integer() || v.is_number_unsigned()) {
    out.kind = Value::Kind::number;
    out.number = v.get<double>();
    out.text = v.dump();
  } else if (v.is_number_float()) {
    out.kind = Value::Kind::number;
    out.number = v.get<double>();
    if (!std::isfinite(out.number)) return std::nullopt;
    out.text = v.dump();
  } else if (v.is_boolean()) {
    out.kind = Value::Kind::boolean;
    out.number = v.get<bool>() ? 1.0 : 0.0;
    out.text = v.get<bool>() ? "True" : "False";
  } else if (v.is_string()) {
    out.kind = Value::Kind::text;
    out.text = v.get<std::string>();
  } else {
    return std::nullopt;
  }
  return out;
}

// The ordered values of one parameter.
struct ParamValues {
  std::string name;
  std::vector<Value> values;

  [[nodiscard]] std::optional<std::uint32_t> index_of(const Value& v) const {
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i] == v) return static_cast<std::uint32_t>(i);
    }
    return std::nullopt;
  }
  [[nodiscard]] std::optional<std::uint32_t> index_of_text(std::string_view text) const {
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i].text == text) return static_cast<std::uint32_t>(i);
    }
    return std::nullopt;
  }
};

// A config read from the file before the space is built.
struct Row {
  std::vector<std::uint32_t> indices;
  std::optional<double> time_ms;
  std::optional<double> cost_ms; // compile + benchmark time, nullopt when not recorded
  std::string cost_missing;      // why cost_ms is nullopt
  std::string where; // "cache entry '16,1,...'" / "results[12]"
};

// A recorded cost in ms: a number >= 0 in `object[key]`, else nullopt.
std::optional<double> cost_field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  const double ms = it->get<double>();
  if (!std::isfinite(ms) || ms < 0) return std::nullopt;
  return ms;
}

// Kernel Tuner's compile_time + benchmark_time of a cache entry or results-list entry.
void read_kerneltuner_cost(const json& entry, Row& row) {
  for (const char* key : {"compile_time", "benchmark_time"}) {
    if (!cost_field(entry, key)) {
      row.cost_missing = row.where + ": no number >= 0 in '" + key + "'";
      return;
    }
  }
  row.cost_ms = *cost_field(entry, "compile_time") + *cost_field(entry, "benchmark_time");
}

// T4: times.compilation + the sum of times.runtimes (absent for a failed result: 0).
void read_t4_cost(const json& result, Row& row) {
  const auto times = result.find("times");
  const std::optional<double> compile =
      times != result.end() && times->is_object() ? cost_field(*times, "compilation") : std::nullopt;
  if (!compile) {
    row.cost_missing = row.where + ": no number >= 0 in 'times.compilation'";
    return;
  }
  double run_ms = 0;
  if (const auto runtimes = times->find("runtimes"); runtimes != times->end() && runtimes->is_array()) {
    for (const json& t : *runtimes) {
      if (t.is_number() && std::isfinite(t.get<double>()) && t.get<double>() > 0) run_ms += t.get<double>();
    }
  }
  row.cost_ms = *compile + run_ms;
}

// Time of a config: a number (a failure from k_failure_time_ms up), or a marker string (failure).
Result<std::optional<double>> read_time(const json& v, std::string_view label, const std::string& where) {
  if (v.is_string()) return std::optional<double>{};
  if (v.is_number()) {
    const double t = v.get<double>();
    if (t >= k_failure_time_ms) return std::optional<double>{};
    if (!std::isfinite(t) || t <= 0) {
      return record_error(label, where + ": time: expected a number > 0 (ms) or a failure marker string, found " +
                                     excerpt(v));
    }
    return std::optional<double>{t};
  }
  return record_error(label, where + ": time: expected a number (ms) or a failure marker string, found " +
                                 type_name(v) + " " + excerpt(v));
}

// A Kernel Tuner cache entry's "time" (required) and its cost fields, into `row`.
Result<void> read_entry_time(const json& entry, std::string_view label, Row& row) {
  const auto time = entry.find("time");
  if (time == entry.end()) return record_error(label, row.where + ": expected a field 'time', found none");
  auto t = read_time(*time, label, row.where);
  if (!t) return t.error();
  row.time_ms = *t;
  read_kerneltuner_cost(entry, row);
  return {};
}

// Key order of the first configuration object (T4 "configuration", first element of a results
// list), which a std::map-based json object does not keep. A SAX pass that stores nothing else.
// (nlohmann's parser callback could record it during the DOM parse, but its discard handling
// rescans the parent object after every child: quadratic on a cache of 18,000 entries.)
class KeyOrderSax : public nlohmann::json_sax<json> {
public:
  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(json::number_integer_t) override { return scalar(); }
  bool number_unsigned(json::number_unsigned_t) override { return scalar(); }
  bool number_float(json::number_float_t, const std::string&) override { return scalar(); }
  bool string(std::string&) override { return scalar(); }
  bool binary(json::binary_t&) override { return scalar(); }
  bool start_object(std::size_t) override {
    const std::size_t depth = m_frames.size();
    if (!m_recording && depth >= 1) {
      const Frame& parent = m_frames.back();
      if (!m_config_done && !parent.is_array && parent.key == "configuration") {
        start_recording(depth, true);
      } else if (!m_list_done && m_root_is_array && parent.is_array) {
        start_recording(depth, false);
      }
    }
    m_frames.push_back(Frame{false, {}});
    return true;
  }
  bool key(std::string& key) override {
    m_frames.back().key = key;
    if (m_recording && m_frames.size() == m_recording_depth + 1) m_order.push_back(key);
    return true;
  }
  bool end_object() override {
    m_frames.pop_back();
    if (m_recording && m_frames.size() == m_recording_depth) {
      m_recording = false;
      (m_recording_config ? m_config_order : m_list_order) = m_order;
      (m_recording_config ? m_config_done : m_list_done) = true;
    }
    return true;
  }
  bool start_array(std::size_t) override {
    if (m_frames.empty()) m_root_is_array = true;
    m_frames.push_back(Frame{true, {}});
    return true;
  }
  bool end_array() override {
    m_frames.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

  [[nodiscard]] const std::vector<std::string>& config_order() const { return m_config_order; }
  [[nodiscard]] const std::vector<std::string>& list_order() const { return m_list_order; }

private:
  struct Frame {
    bool is_array = false;
    std::string key; // the last key read in this object
  };
  bool scalar() { return true; }
  void start_recording(std::size_t depth, bool config) {
    m_recording = true;
    m_recording_config = config;
    m_recording_depth = depth;
    m_order.clear();
  }

  std::vector<Frame> m_frames;
  bool m_root_is_array = false;
  bool m_recording = false;
  bool m_recording_config = false;
  std::size_t m_recording_depth = 0;
  std::vector<std::string> m_order;
  bool m_config_done = false;
  bool m_list_done = false;
  std::vector<std::string> m_config_order;
  std::vector<std::string> m_list_order;
};

// `names` in `preferred` order where it lists exactly the same names, else sorted.
std::vector<std::string> ordered_names(std::vector<std::string> names, const std::vector<std::string>& preferred) {
  std::vector<std::string> filtered;
  for (const auto& p : preferred) {
    if (std::find(names.begin(), names.end(), p) != names.end() &&
        std::find(filtered.begin(), filtered.end(), p) == filtered.end()) {
      filtered.push_back(p);
    }
  }
  if (filtered.size() == names.size()) return filtered;
  std::sort(names.begin(), names.end());
  return names;
}

// Values seen per parameter, ascending (numbers, then booleans, then strings).
std::vector<ParamValues> collect_values(const std::vector<std::string>& names,
                                        const std::vector<std::vector<Value>>& raw_rows) {
  std::vector<ParamValues> params(names.size());
  for (std::size_t p = 0; p < names.size(); ++p) {
    params[p].name = names[p];
    for (const auto& row : raw_rows) params[p].values.push_back(row[p]);
    auto& v = params[p].values;
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  return params;
}

Result<std::vector<Row>> index_rows(const std::vector<ParamValues>& params, std::vector<std::vector<Value>> raw_rows,
                                    std::vector<Row> rows) {
  for (std::size_t r = 0; r < rows.size(); ++r) {
    rows[r].indices.resize(params.size());
    for (std::size_t p = 0; p < params.size(); ++p) rows[r].indices[p] = *params[p].index_of(raw_rows[r][p]);
  }
  return rows;
}

Result<RecordedSpace> build(std::string_view label, RecordFormat format, const std::vector<ParamValues>& params,
                            std::vector<Row> rows) {
  if (rows.empty()) return record_error(label, "expected at least one configuration, found none");
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.indices < b.indices; });
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].indices == rows[i - 1].indices) {
      return record_error(label, rows[i].where + " repeats the configuration of " + rows[i - 1].where);
    }
  }

  RecordedSpace out;
  out.label = std::string(label);
  out.format = format;
  std::vector<search::SearchParam> search_params;
  for (const auto& p : params) {
    const bool numeric = std::all_of(p.values.begin(), p.values.end(),
                                     [](const Value& v) { return v.kind != Value::Kind::text; });
    search::SearchParam sp{p.name, {}};
    std::vector<std::string> texts;
    for (std::size_t i = 0; i < p.values.size(); ++i) {
      sp.values.push_back(numeric ? p.values[i].number : static_cast<double>(i));
      texts.push_back(p.values[i].text);
    }
    search_params.push_back(std::move(sp));
    out.value_text.push_back(std::move(texts));
  }
  std::vector<std::vector<std::uint32_t>> indices;
  indices.reserve(rows.size());
  out.time_ms.reserve(rows.size());
  out.cost_ms.reserve(rows.size());
  for (auto& row : rows) {
    indices.push_back(std::move(row.indices));
    out.time_ms.push_back(row.time_ms);
    if (row.cost_ms) {
      out.cost_ms.push_back(*row.cost_ms);
    } else if (out.cost_missing.empty()) {
      out.cost_missing = row.cost_missing;
    }
  }
  if (!out.cost_missing.empty()) out.cost_ms.clear();
  auto space = search::SearchSpace::create(std::move(search_params), indices);
  if (!space) return record_error(label, space.error().message);
  out.space = std::move(space).value();

  bool any = false;
  for (std::size_t id = 0; id < out.time_ms.size(); ++id) {
    if (!out.time_ms[id]) {
      ++out.failed;
      continue;
    }
    ++out.measured;
    if (!any || *out.time_ms[id] < out.optimum_ms) {
      out.optimum_ms = *out.time_ms[id];
      out.optimum_config = id;
      any = true;
    }
  }
  if (!any) {
    return record_error(label, "expected at least one configuration with a measured time, found only " +
                                   std::to_string(out.failed) + " failed ones");
  }
  return out;
}

const std::string* string_field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return nullptr;
  return &it->get_ref<const std::string&>();
}

// A cache's objective: absent or "time" (a "score" is maximised and may be negative).
Result<void> check_objective(const json& root, std::string_view label) {
  const auto it = root.find("objective");
  if (it == root.end()) return {};
  if (!it->is_string()) return record_error(label, "objective: expected a string, found " + type_name(*it));
  if (*it != "time") {
    return make_error(ErrorCode::unsupported_objective,
                      std::string(label) + ": objective \"" + it->get<std::string>() +
                          "\" is not supported: replay compares run times (objective \"time\", "
                          "minimised); a \"score\" (hyper-parameter sweeps) is maximised and may be negative");
  }
  return {};
}

// The parameters' names: tune_params_keys (each once), else tune_params' keys.
Result<std::vector<std::string>> param_names(const json& root, const json& tune_params, std::string_view label) {
  std::vector<std::string> names;
  if (const auto keys = root.find("tune_params_keys"); keys != root.end()) {
    if (!keys->is_array()) return record_error(label, "tune_params_keys: expected an array of names, found " + type_name(*keys));
    for (std::size_t i = 0; i < keys->size(); ++i) {
      const json& k = (*keys)[i];
      if (!k.is_string()) {
        return record_error(label, "tune_params_keys[" + std::to_string(i) + "]: expected a string, found " + excerpt(k));
      }
      if (std::find(names.begin(), names.end(), k.get<std::string>()) != names.end()) {
        return record_error(label, "tune_params_keys[" + std::to_string(i) + "]: '" + k.get<std::string>() +
                                       "' is listed twice");
      }
      names.push_back(k.get<std::string>());
    }
  } else {
    for (const auto& [name, values] : tune_params.items()) names.push_back(name);
  }
  if (names.empty()) return record_error(label, "tune_params_keys: expected at least one parameter, found none");
  return names;
}

// Each named parameter's values from tune_params: a non-empty list of distinct numbers, booleans
// or strings.
Result<std::vector<ParamValues>> read_params(const json& tune_params, const std::vector<std::string>& names,
                                             std::string_view label) {
  std::vector<ParamValues> params;
  for (const auto& name : names) {
    const auto values = tune_params.find(name);
    if (values == tune_params.end()) return record_error(label, "tune_params: parameter '" + name + "' of tune_params_keys is missing");
    if (!values->is_array() || values->empty()) {
      return record_error(label, "tune_params." + name + ": expected a non-empty array of values, found " + excerpt(*values));
    }
    ParamValues pv{name, {}};
    for (std::size_t i = 0; i < values->size(); ++i) {
      const auto v = to_value((*values)[i]);
      if (!v) {
        return record_error(label, "tune_params." + name + "[" + std::to_string(i) +
                                       "]: expected a number, boolean or string, found " + excerpt((*values)[i]));
      }
      if (pv.index_of(*v)) {
        return record_error(label, "tune_params." + name + "[" + std::to_string(i) + "]: value " + v->text + " is listed twice");
      }
      pv.values.push_back(*v);
    }
    params.push_back(std::move(pv));
  }
  return params;
}

// "v1,v2,..." split at its commas.
std::vector<std::string> key_values(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = key.find(',', start);
    parts.push_back(key.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

// One cache entry: each parameter's value index from the entry's fields, or from its key
// ("v1,v2,...") where a field is missing; its time and recorded costs.
Result<Row> read_cache_entry(const std::string& key, const json& entry, const std::vector<ParamValues>& params,
                             std::string_view label) {
  Row row;
  row.where = "cache entry '" + key + "'";
  if (!entry.is_object()) return record_error(label, row.where + ": expected an object, found " + type_name(entry));
  std::vector<std::string> key_parts;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const auto field = entry.find(params[p].name);
    std::optional<std::uint32_t> index;
    if (field != entry.end()) {
      const auto v = to_value(*field);
      if (v) index = params[p].index_of(*v);
      if (!index) {
        return record_error(label, row.where + ": " + params[p].name + " = " + excerpt(*field) +
                                       " is not one of tune_params." + params[p].name);
      }
    } else {
      if (key_parts.empty()) key_parts = key_values(key);
      if (key_parts.size() != params.size()) {
        return record_error(label, row.where + ": has no field '" + params[p].name + "' and its key has " +
                                       std::to_string(key_parts.size()) + " values, expected " +
                                       std::to_string(params.size()));
      }
      index = params[p].index_of_text(key_parts[p]);
      if (!index) {
        return record_error(label, row.where + ": " + params[p].name + " = " + key_parts[p] +
                                       " (from the key) is not one of tune_params." + params[p].name);
      }
    }
    row.indices.push_back(*index);
  }
  if (auto timed = read_entry_time(entry, label, row); !timed) return timed.error();
  return row;
}

Result<RecordedSpace> parse_kerneltuner_cache(const json& root, std::string_view label, bool unterminated) {
  if (auto objective = check_objective(root, label); !objective) return objective.error();
  const auto tp = root.find("tune_params");
  if (tp == root.end() || !tp->is_object()) {
    return record_error(label, "tune_params: expected an object of parameter value lists, found " +
                                   (tp == root.end() ? std::string("nothing") : type_name(*tp)));
  }
  auto names = param_names(root, *tp, label);
  if (!names) return names.error();
  auto params = read_params(*tp, *names, label);
  if (!params) return params.error();

  const auto cache = root.find("cache");
  if (cache == root.end() || !cache->is_object()) {
    return record_error(label, "cache: expected an object of configurations, found " +
                                   (cache == root.end() ? std::string("nothing") : type_name(*cache)));
  }
  std::vector<Row> rows;
  rows.reserve(cache->size());
  for (const auto& [key, entry] : cache->items()) {
    auto row = read_cache_entry(key, entry, *params, label);
    if (!row) return row.error();
    rows.push_back(std::move(*row));
  }
  auto out = build(label, RecordFormat::kerneltuner_cache, *params, std::move(rows));
  if (!out) return out;
  if (const auto* s = string_field(root, "kernel_name")) out->kernel_name = *s;
  if (const auto* s = string_field(root, "device_name")) out->device_name = *s;
  out->was_unterminated = unterminated;
  return out;
}

Result<RecordedSpace> parse_t4(const json& root, std::string_view label, const std::vector<std::string>& order) {
  const json& results = root.at("results");
  if (!results.is_array()) return record_error(label, "results: expected an array, found " + type_name(results));
  std::vector<std::string> names;
  std::vector<Row> rows;
  std::vector<std::vector<Value>> raw_rows;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const json& result = results[i];
    Row row;
    row.where = "results[" + std::to_string(i) + "]";
    if (!result.is_object()) return record_error(label, row.where + ": expected an object, found " + type_name(result));
    const auto config = result.find("configuration");
    if (config == result.end() || !config->is_object()) {
      return record_error(label, row.where + ".configuration: expected an object, found " +
                                     (config == result.end() ? std::string("nothing") : type_name(*config)));
    }
    std::vector<std::string> these;
    for (const auto& [name, value] : config->items()) these.push_back(name);
    if (i == 0) {
      if (these.empty()) return record_error(label, row.where + ".configuration: expected at least one parameter, found none");
      names = ordered_names(these, order);
    } else {
      std::sort(these.begin(), these.end());
      std::vector<std::string> expected = names;
      std::sort(expected.begin(), expected.end());
      if (these != expected) {
        return record_error(label, row.where + ".configuration: expected the parameters of results[0], found a different set");
      }
    }
    std::vector<Value> raw;
    for (const auto& name : names) {
      const json& v = config->at(name);
      const auto value = to_value(v);
      if (!value) {
        return record_error(label, row.where + ".configuration." + name + ": expected a number, boolean or string, found " +
                                       excerpt(v));
      }
      raw.push_back(*value);
    }

    bool correct = true;
    if (const auto inv = result.find("invalidity"); inv != result.end()) {
      if (!inv->is_string()) return record_error(label, row.where + ".invalidity: expected a string, found " + type_name(*inv));
      correct = *inv == "correct";
    }
    std::optional<double> time;
    bool have_time = false;
    if (const auto ms = result.find("measurements"); ms != result.end() && ms->is_array()) {
      for (const json& m : *ms) {
        const std::string* name = m.is_object() ? string_field(m, "name") : nullptr;
        if (name == nullptr || *name != "time") continue;
        const auto value = m.find("value");
        if (value == m.end()) return record_error(label, row.where + ".measurements: the 'time' measurement has no value");
        auto t = read_time(*value, label, row.where + ".measurements");
        if (!t) return t.error();
        time = *t;
        have_time = true;
        break;
      }
    }
    if (correct && !have_time) {
      return record_error(label, row.where + ": expected a measurement named \"time\" for a correct result, found none");
    }
    row.time_ms = correct ? time : std::nullopt;
    read_t4_cost(result, row);
    rows.push_back(std::move(row));
    raw_rows.push_back(std::move(raw));
  }
  auto params = collect_values(names, raw_rows);
  auto indexed = index_rows(params, std::move(raw_rows), std::move(rows));
  if (!indexed) return indexed.error();
  return build(label, RecordFormat::t4, params, std::move(indexed).value());
}

bool is_bookkeeping_key(const std::string& key) {
  static const char* const k_keys[] = {"time",           "times",          "compile_time", "verification_time",
                                       "benchmark_time", "strategy_time",  "framework_time", "timestamp",
                                       "score",          "scores"};
  for (const char* k : k_keys) {
    if (key == k) return true;
  }
  return key.find('/') != std::string::npos; // user metrics such as "GFLOP/s", "GB/s"
}

Result<RecordedSpace> parse_results_list(const json& root, std::string_view label, const std::vector<std::string>& order) {
  const json* results = &root;
  const json* env = nullptr;
  std::string prefix;
  if (!root.empty() && root[0].is_array()) {
    results = &root[0];
    prefix = "[0]";
    if (root.size() > 1 && root[1].is_object()) env = &root[1];
  }
  std::vector<std::string> names;
  std::vector<Row> rows;
  std::vector<std::vector<Value>> raw_rows;
  for (std::size_t i = 0; i < results->size(); ++i) {
    const json& entry = (*results)[i];
    Row row;
    row.where = "results" + prefix + "[" + std::to_string(i) + "]";
    if (!entry.is_object()) return record_error(label, row.where + ": expected an object, found " + type_name(entry));
    std::vector<std::string> these;
    for (const auto& [name, value] : entry.items()) {
      if (!is_bookkeeping_key(name) && !value.is_structured()) these.push_back(name);
    }
    if (i == 0) {
      if (these.empty()) return record_error(label, row.where + ": expected at least one parameter, found none");
      names = ordered_names(these, order);
    } else {
      std::sort(these.begin(), these.end());
      std::vector<std::string> expected = names;
      std::sort(expected.begin(), expected.end());
      if (these != expected) {
        return record_error(label, row.where + ": expected the parameters of the first result, found a different set");
      }
    }
    std::vector<Value> raw;
    for (const auto& name : names) {
      const json& v = entry.at(name);
      const auto value = to_value(v);
      if (!value) return record_error(label, row.where + "." + name + ": expected a number, boolean or string, found " + excerpt(v));
      raw.push_back(*value);
    }
    if (auto timed = read_entry_time(entry, label, row); !timed) return timed.error();
    rows.push_back(std::move(row));
    raw_rows.push_back(std::move(raw));
  }
  auto params = collect_values(names, raw_rows);
  auto indexed = index_rows(params, std::move(raw_rows), std::move(rows));
  if (!indexed) return indexed.error();
  auto out = build(label, RecordFormat::results_list, params, std::move(indexed).value());
  if (!out) return out;
  if (env != nullptr) {
    if (const auto* s = string_field(*env, "device_name")) out->device_name = *s;
  }
  return out;
}

// Recorded files nest at most 5 levels (T4: results, entry, times, runtimes). Deeper values are
// refused before anything walks them: dumping a JSON value for a message recurses once per level.
constexpr std::size_t k_max_nesting = 32;


struct Parsed {
  json root;
  bool repaired = false;
  std::vector<std::string> config_order;
  std::vector<std::string> list_order;
};

bool parse_json(std::string_view text, Parsed& out) {
  out.root = json::parse(text.begin(), text.end(), nullptr, false);
  if (out.root.is_discarded()) return false;
  if (out.root.is_object() && out.root.contains("cache")) return true; // key order comes from the file
  KeyOrderSax order;
  (void)json::sax_parse(text.begin(), text.end(), &order);
  out.config_order = order.config_order();
  out.list_order = order.list_order();
  return true;
}

// Kernel Tuner appends one `"key": {...},` line per config and writes the closing `}\n}` only
// when tuning ends: an interrupted run leaves a file ending in ',' (or in a torn last line).
bool repair_unterminated(std::string_view text, Parsed& out) {
  if (text.find("\"cache\"") == std::string_view::npos) return false;
  std::string_view body = text;
  while (!body.empty() && (std::isspace(static_cast<unsigned char>(body.back())) != 0)) body.remove_suffix(1);
  if (!body.empty() && body.back() == ',') {
    body.remove_suffix(1);
    if (parse_json(std::string(body) + "\n}\n}\n", out)) return true;
  }
  if (!body.empty() && body.back() == '{') {
    if (parse_json(std::string(body) + "\n}\n}\n", out)) return true;
  }
  // A torn last line: cut after the last complete entry.
  const std::size_t last = body.rfind("},\n");
  if (last == std::string_view::npos) return false;
  return parse_json(std::string(body.substr(0, last + 1)) + "\n}\n}\n", out);
}

} // namespace

std::string_view to_string(RecordFormat format) {
  switch (format) {
    case RecordFormat::kerneltuner_cache: return "kerneltuner-cache";
    case RecordFormat::t4: return "t4";
    case RecordFormat::results_list: return "results-list";
  }
  return "unknown";
}

std::string RecordedSpace::config_text(std::size_t config) const {
  std::string out;
  const auto idx = space.indices(config);
  for (std::size_t p = 0; p < space.param_count(); ++p) {
    if (p > 0) out += ',';
    out += space.params()[p].name;
    out += '=';
    out += value_text[p][idx[p]];
  }
  return out;
}

Result<RecordedSpace> parse_recorded_space(std::string_view text, std::string_view label) {
  try {
    if (const std::size_t depth = json_nesting_depth(text); depth > k_max_nesting) {
      return record_error(label, "expected at most " + std::to_string(k_max_nesting) +
                                     " levels of nested arrays and objects, found " + std::to_string(depth));
    }
    Parsed parsed;
    if (!parse_json(text, parsed)) {
      if (!repair_unterminated(text, parsed)) {
        return record_error(label, "expected JSON (a Kernel Tuner cache, a T4 results file or a results list), "
                                   "found text that does not parse as JSON");
      }
      parsed.repaired = true;
    }
    const json& root = parsed.root;
    if (root.is_object() && root.contains("cache")) return parse_kerneltuner_cache(root, label, parsed.repaired);
    if (root.is_object() && root.contains("results")) return parse_t4(root, label, parsed.config_order);
    if (root.is_array()) return parse_results_list(root, label, parsed.list_order);
    return record_error(label, "expected a Kernel Tuner cache (an object with \"cache\"), a T4 results file (an "
                               "object with \"results\") or a results list (an array), found " +
                                   type_name(root) + (root.is_object() ? " without either key" : ""));
  } catch (const std::exception& e) {
    // Only resource exhaustion (or a type check missed above) can land here.
    return record_error(label, std::string("unexpected content: ") + e.what());
  }
}

} // namespace ktune::replay
