#include "core/protocol.hpp"

#include "core/json_depth.hpp"

#include <algorithm>
#include <limits>

namespace ktune::protocol {
namespace {

using nlohmann::json;

// Dumps without throwing on invalid UTF-8 (compile logs and kernel output may carry any bytes):
// such bytes are replaced by U+FFFD.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_id_scalar(const json& id) { return id.is_null() || id.is_number() || id.is_string(); }

std::string json_type(const json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "float";
  return value.type_name();
}

Error field_error(std::string_view op, std::string_view field, const std::string& reason) {
  return make_error(ErrorCode::bad_request, std::string(op) + ": field '" + std::string(field) + "' " + reason);
}

// Reads an optional field: absent or null leaves `target` untouched.
class FieldReader {
public:
  FieldReader(std::string_view op, const json& body) : m_op(op), m_body(body) {}

  [[nodiscard]] std::optional<Error> require_object() const {
    if (m_body.is_object()) return std::nullopt;
    return make_error(ErrorCode::bad_request,
                      std::string(m_op) + ": expected a JSON object, found " + json_type(m_body));
  }

  [[nodiscard]] const json* find(std::string_view field) const {
    const auto it = m_body.find(field);
    if (it == m_body.end() || it->is_null()) return nullptr;
    return &*it;
  }

  [[nodiscard]] std::optional<Error> string(std::string_view field, std::string& target, bool required) const {
    const json* value = find(field);
    if (value == nullptr) {
      if (required) return field_error(m_op, field, "is required (a string)");
      return std::nullopt;
    }
    if (!value->is_string()) return field_error(m_op, field, "must be a string, found " + json_type(*value));
    target = value->get<std::string>();
    return std::nullopt;
  }

  [[nodiscard]] std::optional<Error> integer(std::string_view field, std::optional<std::int64_t>& target,
                                             std::int64_t min, std::int64_t max) const {
    const json* value = find(field);
    if (value == nullptr) return std::nullopt;
    const std::string range = "an integer in " + std::to_string(min) + ".." + std::to_string(max);
    if (!value->is_number_integer()) return field_error(m_op, field, "must be " + range + ", found " + json_type(*value));
    if (value->is_number_unsigned() &&
        value->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return field_error(m_op, field, "must be " + range + ", found " + dump(*value));
    }
    const auto v = value->get<std::int64_t>();
    if (v < min || v > max) return field_error(m_op, field, "must be " + range + ", found " + std::to_string(v));
    target = v;
    return std::nullopt;
  }

  // A number in (min, max] (exclusive below, inclusive above).
  [[nodiscard]] std::optional<Error> number(std::string_view field, std::optional<double>& target,
                                            double min, double max) const {
    const json* value = find(field);
    if (value == nullptr) return std::nullopt;
    const std::string range = "a number in (" + dump(json(min)) + ", " + dump(json(max)) + "]";
    if (!value->is_number()) return field_error(m_op, field, "must be " + range + ", found " + json_type(*value));
    const auto v = value->get<double>();
    if (!(v > min && v <= max)) return field_error(m_op, field, "must be " + range + ", found " + dump(*value));
    target = v;
    return std::nullopt;
  }

  [[nodiscard]] std::optional<Error> boolean(std::string_view field, bool& target) const {
    const json* value = find(field);
    if (value == nullptr) return std::nullopt;
    if (!value->is_boolean()) return field_error(m_op, field, "must be a boolean, found " + json_type(*value));
    target = value->get<bool>();
    return std::nullopt;
  }

private:
  std::string_view m_op;
  const json& m_body;
};

constexpr std::int64_t k_int64_max = std::numeric_limits<std::int64_t>::max();
constexpr double k_max_budget_s = 365.0 * 24 * 3600; // a year

// Requests are flat objects. Deeper values are refused before anything walks them: copying or
// dumping a JSON value recurses once per level, and a 1 MiB line can nest 500,000 levels.
constexpr std::size_t k_max_nesting = 64;


} // namespace

Result<Request> decode_request(std::string_view line) {
  // Measured before the parse: building and freeing a tree 500,000 levels deep costs hundreds
  // of ms, the scan a linear pass.
  if (const std::size_t depth = json_nesting_depth(line); depth > k_max_nesting) {
    return make_error(ErrorCode::bad_request, "the request nests arrays and objects " + std::to_string(depth) +
                                             " levels deep (at most " + std::to_string(k_max_nesting) + ")");
  }
  json body = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return make_error(ErrorCode::bad_json, "the request line is not valid JSON");
  if (!body.is_object()) {
    return make_error(ErrorCode::bad_request, "expected a JSON object as the request, found " + json_type(body));
  }
  Request request;
  if (const auto id = body.find("id"); id != body.end()) {
    if (!is_id_scalar(*id)) {
      return make_error(ErrorCode::bad_request, "field 'id' must be a number, a string or null, found " + json_type(*id));
    }
    request.id = *id;
  }
  if (const auto v = body.find("v"); v != body.end()) {
    if (!v->is_number_integer() || *v != k_version) {
      return make_error(ErrorCode::unsupported_version,
                        "protocol version " + dump(*v) + " is not supported (expected " + std::to_string(k_version) + ")");
    }
  }
  const auto op = body.find("op");
  if (op == body.end()) return make_error(ErrorCode::bad_request, "field 'op' is required (a string)");
  if (!op->is_string()) return make_error(ErrorCode::bad_request, "field 'op' must be a string, found " + json_type(*op));
  request.op = op->get<std::string>();
  request.body = std::move(body);
  return request;
}

namespace {

// Finds the top-level "id" without building a tree: nlohmann's SAX parser keeps its nesting on an
// explicit stack, so a line of any depth costs one linear pass and no allocation per value.
class IdFinder final : public json::json_sax_t {
public:
  [[nodiscard]] const json& id() const { return m_id; }

  bool null() override { return scalar(nullptr); }
  bool boolean(bool) override { return scalar(json::value_t::discarded); }
  bool number_integer(number_integer_t v) override { return scalar(v); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(v); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(v); }
  bool string(string_t& v) override { return scalar(std::move(v)); }
  bool binary(binary_t&) override { return scalar(json::value_t::discarded); }
  bool start_object(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    m_at_id = m_depth == 1 && k == "id";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception&) override {
    m_id = nullptr;
    return false;
  }

private:
  bool scalar(json value) {
    if (m_depth == 0) return true;  // a bare scalar is no request: no id
    if (m_at_id) m_id = value.is_discarded() ? json(nullptr) : std::move(value);
    m_at_id = false;
    return true;
  }
  bool open(bool object) {
    if (m_depth == 0 && !object) m_top_is_array = true;
    if (m_depth == 1 && m_at_id) m_id = nullptr;  // an object or array is no id
    m_at_id = false;
    ++m_depth;
    return true;
  }
  bool close() {
    --m_depth;
    if (m_top_is_array) m_id = nullptr;
    return true;
  }

  json m_id = nullptr;
  std::size_t m_depth = 0;
  bool m_at_id = false;
  bool m_top_is_array = false;
};

} // namespace

json decode_id(std::string_view line) {
  IdFinder finder;
  if (!json::sax_parse(line.begin(), line.end(), &finder)) return nullptr;
  return finder.id();
}

std::string encode_ok(const json& id, const json& result) {
  return "{\"v\":" + std::to_string(k_version) + ",\"id\":" + dump(id) + ",\"ok\":true,\"result\":" + dump(result) + "}";
}

std::string encode_error(const json& id, ErrorCode code, std::string_view message) {
  const json error = {{"code", std::string(to_string(code))}, {"message", std::string(message)}};
  return "{\"v\":" + std::to_string(k_version) + ",\"id\":" + dump(id) + ",\"ok\":false,\"error\":" + dump(error) + "}";
}

std::string encode_error(const json& id, const Error& error) {
  return encode_error(id, error.code, error.message);
}

std::string encode_event(const json& id, std::string_view event, const json& data) {
  return "{\"v\":" + std::to_string(k_version) + ",\"id\":" + dump(id) + ",\"event\":" + dump(json(std::string(event))) +
         ",\"data\":" + dump(data) + "}";
}

// --- typed requests --------------------------------------------------------------------------

namespace {

// "configs": an array of 1..k_max_tune_configs objects whose values are integers.
std::optional<Error> read_configs(const json& body, std::vector<json>& target) {
  const auto it = body.find("configs");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array() || it->empty() || it->size() > k_max_tune_configs) {
    return make_error(ErrorCode::bad_request, "tune: field 'configs' must be an array of 1.." +
                                             std::to_string(k_max_tune_configs) + " config objects, found " +
                                             (it->is_array() ? std::to_string(it->size()) + " of them" : json_type(*it)));
  }
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& config = (*it)[i];
    const std::string at = "tune: configs[" + std::to_string(i) + "]";
    if (!config.is_object() || config.empty()) {
      return make_error(ErrorCode::bad_request, at + " must be an object of params, found " + json_type(config));
    }
    for (auto p = config.begin(); p != config.end(); ++p) {
      if (!p->is_number_integer() || (p->is_number_unsigned() &&
                                      p->get<std::uint64_t>() > static_cast<std::uint64_t>(k_int64_max))) {
        return make_error(ErrorCode::bad_request, at + "." + p.key() + " must be an integer, found " + dump(*p));
      }
    }
    target.push_back(config);
  }
  return std::nullopt;
}

} // namespace

Result<TuneRequest> TuneRequest::from_json(const json& body) {
  const FieldReader r("tune", body);
  TuneRequest request;
  std::optional<Error> error = r.require_object();
  if (!error) error = r.string("kernel", request.kernel, true);
  if (!error) error = r.string("shape", request.shape, true);
  if (!error) error = r.string("dtype", request.dtype, false);
  if (!error) error = r.string("device", request.device, false);
  if (!error) error = r.string("strategy", request.strategy, false);
  if (!error) error = r.integer("budget", request.budget, 1, k_int64_max);
  if (!error) error = r.number("budget_fraction", request.budget_fraction, 0.0, 1.0);
  if (!error) error = r.number("budget_s", request.budget_s, 0.0, k_max_budget_s);
  if (!error) error = r.integer("seed", request.seed, 0, k_int64_max);
  if (!error) error = r.boolean("remeasure", request.remeasure);
  if (!error) error = r.boolean("cold", request.cold);
  std::optional<std::int64_t> priority;
  if (!error) error = r.integer("priority", priority, -100, 100);
  if (priority) request.priority = *priority;
  if (!error) error = r.boolean("wait", request.wait);
  if (!error) error = read_configs(body, request.configs);
  if (!error && request.budget && request.budget_fraction) {
    error = make_error(ErrorCode::bad_request, "tune: give 'budget' or 'budget_fraction', not both");
  }
  if (error) return *error;
  return request;
}

json TuneRequest::to_json() const {
  json out = {{"v", k_version}, {"op", "tune"},       {"kernel", kernel},     {"shape", shape},
              {"dtype", dtype}, {"device", device}, {"strategy", strategy}, {"wait", wait}};
  if (budget) out["budget"] = *budget;
  if (budget_fraction) out["budget_fraction"] = *budget_fraction;
  if (budget_s) out["budget_s"] = *budget_s;
  if (seed) out["seed"] = *seed;
  if (remeasure) out["remeasure"] = true;
  if (cold) out["cold"] = true;
  if (priority != 0) out["priority"] = priority;
  if (!configs.empty()) out["configs"] = configs;
  return out;
}

Result<LookupRequest> LookupRequest::from_json(const json& body) {
  const FieldReader r("lookup", body);
  LookupRequest request;
  std::optional<Error> error = r.require_object();
  if (!error) error = r.string("kernel", request.kernel, true);
  if (!error) error = r.string("shape", request.shape, true);
  if (!error) error = r.string("dtype", request.dtype, false);
  if (!error) error = r.string("device", request.device, false);
  if (error) return *error;
  return request;
}

json LookupRequest::to_json() const {
  return {{"v", k_version}, {"op", "lookup"}, {"kernel", kernel}, {"shape", shape}, {"dtype", dtype}, {"device", device}};
}

Result<JobRequest> JobRequest::from_json(const json& body) {
  const FieldReader r("job", body);
  std::optional<std::int64_t> job;
  std::optional<Error> error = r.require_object();
  if (!error) error = r.integer("job", job, 1, k_int64_max);
  if (!error && !job) error = field_error("job", "job", "is required (an integer job id)");
  if (error) return *error;
  return JobRequest{*job};
}

json JobRequest::to_json() const { return {{"v", k_version}, {"op", "job"}, {"job", job}}; }

Result<JobsRequest> JobsRequest::from_json(const json& body) {
  const FieldReader r("jobs", body);
  std::optional<std::int64_t> limit;
  std::optional<Error> error = r.require_object();
  if (!error) error = r.integer("limit", limit, 1, 10000);
  if (error) return *error;
  JobsRequest request;
  if (limit) request.limit = *limit;
  return request;
}

json JobsRequest::to_json() const { return {{"v", k_version}, {"op", "jobs"}, {"limit", limit}}; }

} // namespace ktune::protocol
