#include "jobs/bench_job.hpp"

#include "jobs/dtype.hpp"
#include "jobs/typed_entry.hpp"
#include "core/expr.hpp"

#include <cmath>
#include <limits>
#include <optional>

namespace ktune {

namespace {

using nlohmann::json;

std::string type_of(const json& value) { return value.type_name(); }

Error field_error(std::string_view what, const std::string& field, std::string_view expected,
                  const json& found) {
  return make_error(ErrorCode::bad_request, std::string(what) + ": field '" + field + "': expected " +
                                       std::string(expected) + ", found " + type_of(found) + " " +
                                       found.dump());
}

Error missing_field(std::string_view what, const std::string& field, std::string_view expected) {
  return make_error(ErrorCode::bad_request, std::string(what) + ": field '" + field + "' (" +
                                       std::string(expected) + ") is missing");
}

// Field readers: absent keys leave `out` untouched unless the field is required.
enum class Presence { required, optional };

Result<void> read_string(const json& j, const char* key, std::string_view what, std::string& out,
                         Presence presence, const std::string& prefix = {}) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (presence == Presence::required) return missing_field(what, prefix + key, "a string");
    return {};
  }
  if (!it->is_string()) return field_error(what, prefix + key, "a string", *it);
  out = it->get<std::string>();
  return {};
}

Result<void> read_double(const json& j, const char* key, std::string_view what, double& out,
                         const std::string& prefix = {}) {
  const auto it = j.find(key);
  if (it == j.end()) return {};
  if (!it->is_number()) return field_error(what, prefix + key, "a number", *it);
  out = it->get<double>();
  return {};
}

Result<void> read_int64(const json& j, const char* key, std::string_view what, std::int64_t& out,
                        const std::string& prefix = {}) {
  const auto it = j.find(key);
  if (it == j.end()) return {};
  if (it->is_number_unsigned()) {
    const auto value = it->get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return field_error(what, prefix + key, "a 64-bit signed integer", *it);
    }
    out = static_cast<std::int64_t>(value);
    return {};
  }
  if (!it->is_number_integer()) return field_error(what, prefix + key, "an integer", *it);
  out = it->get<std::int64_t>();
  return {};
}

Result<void> read_int(const json& j, const char* key, std::string_view what, int& out) {
  std::int64_t value = out;
  if (auto r = read_int64(j, key, what, value); !r) return r;
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return field_error(what, key, "a 32-bit integer", j.at(key));
  }
  out = static_cast<int>(value);
  return {};
}

Result<void> read_bool(const json& j, const char* key, std::string_view what, bool& out) {
  const auto it = j.find(key);
  if (it == j.end()) return {};
  if (!it->is_boolean()) return field_error(what, key, "a boolean", *it);
  out = it->get<bool>();
  return {};
}

bool is_arg_kind(std::string_view kind) {
  return kind == "in" || kind == "out" || kind == "inout" || kind == "scalar";
}

Error with_context(const Error& error, const std::string& context) {
  return make_error(error.code, context + ": " + error.message);
}

} // namespace

json stats_to_json(const SampleStats& s) {
  return json{{"n", s.n},           {"min_ms", s.min_ms},       {"max_ms", s.max_ms},
              {"median_ms", s.median_ms}, {"mean_ms", s.mean_ms}, {"stddev_ms", s.stddev_ms},
              {"q1_ms", s.q1_ms},   {"q3_ms", s.q3_ms}};
}

Result<SampleStats> stats_from_json(const json& j, std::string_view what) {
  if (!j.is_object()) return field_error(what, "stats", "an object", j);
  SampleStats s;
  std::int64_t n = 0;
  if (auto r = read_int64(j, "n", what, n, "stats."); !r) return r.error();
  if (n < 0) return field_error(what, "stats.n", "a count >= 0", j.at("n"));
  s.n = static_cast<std::size_t>(n);
  const std::pair<const char*, double*> fields[] = {
      {"min_ms", &s.min_ms},       {"max_ms", &s.max_ms},       {"median_ms", &s.median_ms},
      {"mean_ms", &s.mean_ms},     {"stddev_ms", &s.stddev_ms}, {"q1_ms", &s.q1_ms},
      {"q3_ms", &s.q3_ms}};
  for (const auto& [key, out] : fields) {
    if (auto r = read_double(j, key, what, *out, "stats."); !r) return r.error();
  }
  return s;
}

// --- MeasureSettings ---------------------------------------------------------------------------

nlohmann::json MeasureSettings::to_json() const {
  return json{{"min_samples", min_samples}, {"max_samples", max_samples},
              {"target_rsd", target_rsd},   {"target_error", target_error},
              {"min_time_s", min_time_s},
              {"max_time_s", max_time_s},   {"warmup_ms", warmup_ms},
              {"flush_cache", flush_cache}, {"seed", seed},
              {"prune_after", prune_after}, {"prune_factor", prune_factor},
              {"race_margin", race_margin},
              {"finalists", finalists},     {"final_margin", final_margin},
              {"final_rounds", final_rounds}, {"tie_margin", tie_margin}};
}

Result<MeasureSettings> MeasureSettings::parse(const nlohmann::json& j) {
  constexpr std::string_view what = "measure settings";
  MeasureSettings s;
  if (j.is_null()) return s;
  if (!j.is_object()) return field_error(what, "settings", "an object", j);
  if (auto r = read_int(j, "min_samples", what, s.min_samples); !r) return r.error();
  if (auto r = read_int(j, "max_samples", what, s.max_samples); !r) return r.error();
  if (auto r = read_double(j, "target_rsd", what, s.target_rsd); !r) return r.error();
  if (auto r = read_double(j, "target_error", what, s.target_error); !r) return r.error();
  if (auto r = read_double(j, "min_time_s", what, s.min_time_s); !r) return r.error();
  if (auto r = read_double(j, "max_time_s", what, s.max_time_s); !r) return r.error();
  if (auto r = read_double(j, "warmup_ms", what, s.warmup_ms); !r) return r.error();
  if (auto r = read_bool(j, "flush_cache", what, s.flush_cache); !r) return r.error();
  if (auto r = read_int(j, "prune_after", what, s.prune_after); !r) return r.error();
  if (auto r = read_double(j, "prune_factor", what, s.prune_factor); !r) return r.error();
  if (auto r = read_double(j, "race_margin", what, s.race_margin); !r) return r.error();
  if (auto r = read_int(j, "finalists", what, s.finalists); !r) return r.error();
  if (auto r = read_double(j, "final_margin", what, s.final_margin); !r) return r.error();
  if (auto r = read_int(j, "final_rounds", what, s.final_rounds); !r) return r.error();
  if (auto r = read_double(j, "tie_margin", what, s.tie_margin); !r) return r.error();
  if (const auto it = j.find("seed"); it != j.end()) {
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0)) {
      return field_error(what, "seed", "an unsigned integer", *it);
    }
    s.seed = it->get<std::uint64_t>();
  }
  return s;
}

MeasureSettings MeasureSettings::from_json(const nlohmann::json& j) {
  MeasureSettings defaults;
  if (!j.is_object()) return defaults;
  // Field by field, so one bad field falls back to its default and leaves the others alone.
  for (const auto& [key, value] : j.items()) {
    auto parsed = parse(json{{key, value}});
    if (!parsed) continue;
    const MeasureSettings& p = parsed.value();
    if (key == "min_samples") defaults.min_samples = p.min_samples;
    else if (key == "max_samples") defaults.max_samples = p.max_samples;
    else if (key == "target_rsd") defaults.target_rsd = p.target_rsd;
    else if (key == "target_error") defaults.target_error = p.target_error;
    else if (key == "min_time_s") defaults.min_time_s = p.min_time_s;
    else if (key == "max_time_s") defaults.max_time_s = p.max_time_s;
    else if (key == "warmup_ms") defaults.warmup_ms = p.warmup_ms;
    else if (key == "flush_cache") defaults.flush_cache = p.flush_cache;
    else if (key == "seed") defaults.seed = p.seed;
    else if (key == "prune_after") defaults.prune_after = p.prune_after;
    else if (key == "prune_factor") defaults.prune_factor = p.prune_factor;
    else if (key == "race_margin") defaults.race_margin = p.race_margin;
    else if (key == "finalists") defaults.finalists = p.finalists;
    else if (key == "final_margin") defaults.final_margin = p.final_margin;
    else if (key == "final_rounds") defaults.final_rounds = p.final_rounds;
    else if (key == "tie_margin") defaults.tie_margin = p.tie_margin;
  }
  return defaults;
}

// --- BenchArg / BenchJob -----------------------------------------------------------------------

nlohmann::json BenchArg::to_json() const {
  json out{{"name", name},   {"kind", kind}, {"dtype", dtype},
           {"count", count}, {"init", init}, {"value", value}};
  if (rtol >= 0) out["rtol"] = rtol;
  if (seed >= 0) out["seed"] = seed;
  if (!expected.empty()) out["expected"] = expected;
  if (atol >= 0) out["atol"] = atol;
  return out;
}

Result<BenchArg> BenchArg::from_json(const nlohmann::json& j, const std::string& field) {
  constexpr std::string_view what = "bench job";
  const std::string prefix = field + ".";
  if (!j.is_object()) return field_error(what, field, "an object", j);
  BenchArg a;
  if (auto r = read_string(j, "name", what, a.name, Presence::required, prefix); !r) return r.error();
  if (auto r = read_string(j, "kind", what, a.kind, Presence::required, prefix); !r) return r.error();
  if (auto r = read_string(j, "dtype", what, a.dtype, Presence::required, prefix); !r) return r.error();
  if (auto r = read_int64(j, "count", what, a.count, prefix); !r) return r.error();
  if (auto r = read_string(j, "init", what, a.init, Presence::optional, prefix); !r) return r.error();
  if (auto r = read_double(j, "value", what, a.value, prefix); !r) return r.error();
  if (auto r = read_double(j, "rtol", what, a.rtol, prefix); !r) return r.error();
  if (auto r = read_double(j, "atol", what, a.atol, prefix); !r) return r.error();
  if (auto r = read_int64(j, "seed", what, a.seed, prefix); !r) return r.error();
  if (auto r = read_string(j, "expected", what, a.expected, Presence::optional, prefix); !r) {
    return r.error();
  }
  if (!is_arg_kind(a.kind)) {
    return field_error(what, prefix + "kind", "in, out, inout or scalar", j.at("kind"));
  }
  if (!parse_dtype(a.dtype)) {
    return field_error(what, prefix + "dtype", "f32, f64, f16, i32 or i64", j.at("dtype"));
  }
  if (a.kind != "scalar") {
    if (a.count < 1) return field_error(what, prefix + "count", "a count >= 1", j.value("count", json(0)));
    if (!parse_buffer_init(a.init)) {
      return field_error(what, prefix + "init",
                         "uniform, normal, uniform(lo, hi), normal(mean, std), zero, ones, index "
                         "or file:PATH",
                         j.at("init"));
    }
  }
  return a;
}

nlohmann::json BenchJob::to_json() const {
  json args_json = json::array();
  for (const auto& arg : args) args_json.push_back(arg.to_json());
  json out{{"kernel", kernel},
              {"entry", entry},
              {"artifact_path", artifact_path},
              {"reference_path", reference_path},
              {"reference_entry", reference_entry},
              {"shape", shape},
              {"args", std::move(args_json)},
              {"flops", flops},
              {"bytes", bytes},
              {"rtol", rtol},
              {"atol", atol},
              {"inplace", inplace},
              {"buffer_alignment", buffer_alignment},
              {"buffer_offset", buffer_offset},
              {"settings", settings.to_json()},
              {"prune_above_ms", prune_above_ms},
              {"race_above_ms", race_above_ms},
              {"finalist_below_ms", finalist_below_ms}};
  if (launch) out["launch"] = launch->to_json();
  if (reference_launch) out["reference_launch"] = reference_launch->to_json();
  if (launch) out["cuda_device"] = cuda_device;
  if (threads != 1) out["threads"] = threads;
  if (!cpus.empty()) out["cpus"] = cpus;
  if (oversubscribed) out["oversubscribed"] = true;
  if (retire) out["retire"] = true;
  return out;
}

Result<BenchJob> BenchJob::from_json(const nlohmann::json& j) {
  constexpr std::string_view what = "bench job";
  if (!j.is_object()) return field_error(what, "(root)", "an object", j);
  BenchJob job;
  if (auto r = read_string(j, "kernel", what, job.kernel, Presence::required); !r) return r.error();
  if (auto r = read_string(j, "entry", what, job.entry, Presence::required); !r) return r.error();
  if (auto r = read_string(j, "artifact_path", what, job.artifact_path, Presence::required); !r) {
    return r.error();
  }
  if (auto r = read_string(j, "reference_path", what, job.reference_path, Presence::optional); !r) {
    return r.error();
  }
  if (auto r = read_string(j, "reference_entry", what, job.reference_entry, Presence::optional); !r) {
    return r.error();
  }
  if (auto r = read_string(j, "shape", what, job.shape, Presence::optional); !r) return r.error();
  const auto args = j.find("args");
  if (args == j.end()) return missing_field(what, "args", "an array");
  if (!args->is_array()) return field_error(what, "args", "an array", *args);
  for (std::size_t i = 0; i < args->size(); ++i) {
    auto arg = BenchArg::from_json((*args)[i], "args[" + std::to_string(i) + "]");
    if (!arg) return arg.error();
    job.args.push_back(std::move(arg).value());
  }
  if (auto r = read_double(j, "flops", what, job.flops); !r) return r.error();
  if (auto r = read_double(j, "bytes", what, job.bytes); !r) return r.error();
  if (auto r = read_double(j, "rtol", what, job.rtol); !r) return r.error();
  if (auto r = read_double(j, "atol", what, job.atol); !r) return r.error();
  if (auto r = read_bool(j, "inplace", what, job.inplace); !r) return r.error();
  if (auto r = read_int64(j, "buffer_alignment", what, job.buffer_alignment); !r) return r.error();
  if (auto r = read_int64(j, "buffer_offset", what, job.buffer_offset); !r) return r.error();
  if (auto r = read_int(j, "threads", what, job.threads); !r) return r.error();
  if (job.threads < 0) return field_error(what, "threads", "a thread count >= 0 (0: every CPU)", j.at("threads"));
  if (const auto cpus = j.find("cpus"); cpus != j.end()) {
    if (!cpus->is_array()) return field_error(what, "cpus", "an array of CPU indices", *cpus);
    for (const auto& cpu : *cpus) {
      if (!cpu.is_number_integer() || cpu.get<std::int64_t>() < 0 || cpu.get<std::int64_t>() >= 1024) {
        return field_error(what, "cpus", "an array of CPU indices", *cpus);
      }
      job.cpus.push_back(cpu.get<int>());
    }
  }
  if (auto r = read_bool(j, "oversubscribed", what, job.oversubscribed); !r) return r.error();
  if (auto r = read_bool(j, "retire", what, job.retire); !r) return r.error();
  if (job.buffer_alignment < 1 || job.buffer_offset < 0 || job.buffer_offset >= job.buffer_alignment) {
    return field_error(what, "buffer_offset", "an offset in [0, buffer_alignment)", j.value("buffer_offset", json(0)));
  }
  if (auto r = read_double(j, "prune_above_ms", what, job.prune_above_ms); !r) return r.error();
  if (auto r = read_double(j, "race_above_ms", what, job.race_above_ms); !r) return r.error();
  if (auto r = read_double(j, "finalist_below_ms", what, job.finalist_below_ms); !r) return r.error();
  if (const auto it = j.find("settings"); it != j.end()) {
    auto settings = MeasureSettings::parse(*it);
    if (!settings) return settings.error();
    job.settings = settings.value();
  }
  if (auto r = read_int(j, "cuda_device", what, job.cuda_device); !r) return r.error();
  if (job.cuda_device < 0) return field_error(what, "cuda_device", "an ordinal >= 0", j.at("cuda_device"));
  for (const char* key : {"launch", "reference_launch"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    auto launch = CudaLaunch::from_json(*it, key);
    if (!launch) return launch.error();
    (std::string_view(key) == "launch" ? job.launch : job.reference_launch) = launch.value();
  }
  return job;
}

// --- BenchOutcome ------------------------------------------------------------------------------

nlohmann::json BenchOutcome::to_json() const {
  json out{{"status", std::string(to_string(status))},
              {"reason", reason},
              {"stats", stats_to_json(stats)},
              {"gflops", gflops},
              {"gbps", gbps},
              {"registers", registers},
              {"spills", spills},
              {"shared_bytes", shared_bytes},
              {"pruned", pruned},
              {"stop", stop},
              {"samples_ms", samples_ms},
              {"retaken", retaken},
              {"conditions", conditions},
              {"infra", infra},
              {"infra_artifact", infra_artifact}};
  if (!unlocked.empty()) out["unlocked"] = unlocked;
  return out;
}

Result<BenchOutcome> BenchOutcome::from_json(const nlohmann::json& j) {
  constexpr std::string_view what = "bench outcome";
  if (!j.is_object()) return field_error(what, "(root)", "an object", j);
  BenchOutcome o;
  std::string status;
  if (auto r = read_string(j, "status", what, status, Presence::required); !r) return r.error();
  const auto parsed = parse_candidate_status(status);
  if (!parsed) return field_error(what, "status", "a candidate status", j.at("status"));
  o.status = *parsed;
  if (auto r = read_string(j, "reason", what, o.reason, Presence::optional); !r) return r.error();
  if (const auto it = j.find("stats"); it != j.end()) {
    auto stats = stats_from_json(*it, what);
    if (!stats) return stats.error();
    o.stats = stats.value();
  }
  if (auto r = read_double(j, "gflops", what, o.gflops); !r) return r.error();
  if (auto r = read_double(j, "gbps", what, o.gbps); !r) return r.error();
  if (auto r = read_int(j, "registers", what, o.registers); !r) return r.error();
  if (auto r = read_int(j, "spills", what, o.spills); !r) return r.error();
  if (auto r = read_int(j, "shared_bytes", what, o.shared_bytes); !r) return r.error();
  if (auto r = read_bool(j, "pruned", what, o.pruned); !r) return r.error();
  if (auto r = read_string(j, "stop", what, o.stop, Presence::optional); !r) return r.error();
  if (const auto it = j.find("samples_ms"); it != j.end()) {
    if (!it->is_array()) return field_error(what, "samples_ms", "an array of times in ms", *it);
    o.samples_ms.reserve(it->size());
    for (const auto& sample : *it) {
      if (!sample.is_number()) {
        return field_error(what, "samples_ms", "an array of times in ms", sample);
      }
      o.samples_ms.push_back(sample.get<float>());
    }
  }
  if (auto r = read_int64(j, "retaken", what, o.retaken); !r) return r.error();
  if (const auto it = j.find("conditions"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return field_error(what, "conditions", "an object", *it);
    o.conditions = *it;
  }
  if (auto r = read_string(j, "unlocked", what, o.unlocked, Presence::optional); !r) return r.error();
  if (auto r = read_string(j, "infra", what, o.infra, Presence::optional); !r) return r.error();
  if (auto r = read_string(j, "infra_artifact", what, o.infra_artifact, Presence::optional); !r) {
    return r.error();
  }
  return o;
}

// --- make_bench_job ----------------------------------------------------------------------------

namespace {

// The spec's expressions at one (shape, config): integers and reals over the dims and params,
// metrics also over `elem_bytes`; an error names `where` and the expression's context.
class SpecEvaluator {
public:
  SpecEvaluator(const KernelSpec& spec, const Shape& shape, const Config& config,
                const std::string& dtype, std::string where)
      : m_where(std::move(where)) {
    m_variables = spec.shape_dims;
    for (const auto& param : spec.params) m_variables.push_back(param.name);
    m_bindings = bind(shape, config);
    m_metric_variables = m_variables;
    m_metric_variables.emplace_back(k_elem_bytes);
    m_metric_bindings = m_bindings;
    m_metric_bindings.emplace_back(std::string(k_elem_bytes),
                                   static_cast<std::int64_t>(dtype_size(dtype).value()));
  }

  [[nodiscard]] const std::string& where() const { return m_where; }

  [[nodiscard]] Result<std::int64_t> integer(const std::string& text, const std::string& context) const {
    auto expr = compile(text, m_variables, context);
    if (!expr) return expr.error();
    auto value = expr->eval_int(m_bindings);
    if (!value) return with_context(value.error(), m_where + ": " + context);
    return value.value();
  }

  [[nodiscard]] Result<double> real(const std::string& text, const std::string& context) const {
    return evaluate(text, m_variables, m_bindings, context);
  }

  [[nodiscard]] Result<double> metric(const std::string& text, const std::string& context) const {
    return evaluate(text, m_metric_variables, m_metric_bindings, context);
  }

private:
  [[nodiscard]] Result<Expr> compile(const std::string& text, const std::vector<std::string>& variables,
                                     const std::string& context) const {
    auto expr = Expr::compile(text, variables);
    if (!expr) return with_context(expr.error(), m_where + ": " + context);
    return expr;
  }

  [[nodiscard]] Result<double> evaluate(const std::string& text, const std::vector<std::string>& variables,
                                        const NamedValues& bindings, const std::string& context) const {
    auto expr = compile(text, variables, context);
    if (!expr) return expr.error();
    auto value = expr->eval(bindings);
    if (!value) return with_context(value.error(), m_where + ": " + context);
    return value.value();
  }

  std::string m_where;
  std::vector<std::string> m_variables, m_metric_variables;
  NamedValues m_bindings, m_metric_bindings;
};

// A scalar arg's value, evaluated in its dtype (an i32 must fit).
Result<void> set_scalar_value(BenchArg& arg, DType arg_dtype, const ArgSpec& spec_arg,
                              const std::string& label, const SpecEvaluator& eval) {
  const std::string& where = eval.where();
  if (spec_arg.value.empty()) {
    return make_error(ErrorCode::bad_expression,
                      where + ": " + label + ".value: a scalar arg needs a value expression");
  }
  if (!is_integral(arg_dtype)) {
    auto value = eval.real(spec_arg.value, label + ".value");
    if (!value) return value.error();
    arg.value = value.value();
    return {};
  }
  auto value = eval.integer(spec_arg.value, label + ".value");
  if (!value) return value.error();
  if (arg_dtype == DType::i32 && (value.value() < std::numeric_limits<std::int32_t>::min() ||
                                  value.value() > std::numeric_limits<std::int32_t>::max())) {
    return make_error(ErrorCode::bad_shape, where + ": " + label + ".value '" + spec_arg.value +
                                                "' = " + std::to_string(value.value()) +
                                                ": expected a value that fits i32");
  }
  arg.value = static_cast<double>(value.value());
  return {};
}

// A buffer arg's element count, init, seed and expected file ("{shape}" in a file name becomes
// the shape).
Result<void> set_buffer(BenchArg& arg, const ArgSpec& spec_arg, const std::string& label,
                        const Shape& shape, const SpecEvaluator& eval) {
  const std::string& where = eval.where();
  if (spec_arg.count.empty()) {
    return make_error(ErrorCode::bad_expression,
                      where + ": " + label + ".count: a buffer arg needs a count expression");
  }
  auto count = eval.integer(spec_arg.count, label + ".count");
  if (!count) return count.error();
  if (count.value() < 1) {
    return make_error(ErrorCode::bad_shape, where + ": " + label + ".count '" + spec_arg.count +
                                                "' = " + std::to_string(count.value()) +
                                                ": expected at least 1 element");
  }
  arg.count = count.value();
  arg.init = spec_arg.init.empty() ? std::string("uniform") : spec_arg.init;
  if (!parse_buffer_init(arg.init)) {
    return make_error(ErrorCode::spec_error, where + ": " + label + ".init '" + arg.init +
                                                 "': expected uniform, normal, uniform(lo, hi), "
                                                 "normal(mean, std), zero, ones, index or file:PATH");
  }
  arg.seed = spec_arg.seed;
  arg.expected = spec_arg.expected;
  for (std::string* file : {&arg.expected, &arg.init}) {
    if (const auto at = file->find("{shape}"); at != std::string::npos) {
      file->replace(at, 7, shape.to_string());
    }
  }
  return {};
}

// args[i] of the spec as the worker gets it.
Result<BenchArg> make_bench_arg(const KernelSpec& spec, std::size_t i, const Shape& shape,
                                const std::string& dtype, const SpecEvaluator& eval) {
  const ArgSpec& spec_arg = spec.args[i];
  const std::string label = "args[" + std::to_string(i) + "] '" + spec_arg.name + "'";
  BenchArg arg;
  arg.name = spec_arg.name;
  arg.kind = std::string(to_string(spec_arg.kind));
  arg.rtol = spec_arg.rtol;
  arg.atol = spec_arg.atol;
  const bool scalar = spec_arg.kind == ArgKind::scalar;
  arg.dtype = !spec_arg.dtype.empty() ? spec_arg.dtype : (scalar ? "i64" : dtype);
  const auto arg_dtype = parse_dtype(arg.dtype);
  if (!arg_dtype) {
    return make_error(ErrorCode::bad_dtype, eval.where() + ": " + label + ": dtype '" + arg.dtype +
                                                "': expected one of f32, f64, f16, i32, i64");
  }
  auto set = scalar ? set_scalar_value(arg, *arg_dtype, spec_arg, label, eval)
                    : set_buffer(arg, spec_arg, label, shape, eval);
  if (!set) return set.error();
  return arg;
}

// The job's fields that come straight from the spec and the caller.
BenchJob job_from_spec(const KernelSpec& spec, const Shape& shape, const std::string& artifact_path,
                       const std::string& reference_path, const MeasureSettings& settings) {
  BenchJob job;
  job.kernel = spec.name;
  const bool shim = spec.language == Language::cpp && spec.signature.has_value();
  job.entry = shim ? host_shim_symbol(spec.entry) : spec.entry;
  job.artifact_path = artifact_path;
  job.reference_path = reference_path;
  if (spec.check.reference == ReferenceKind::function) {
    job.reference_entry = host_shim_symbol(spec.check.function);
  }
  job.shape = shape.to_string();
  job.rtol = spec.check.rtol;
  job.atol = spec.check.atol;
  job.inplace = spec.inplace;
  job.buffer_alignment = spec.buffer_alignment;
  job.buffer_offset = spec.buffer_offset;
  job.settings = settings;
  return job;
}

// [metrics] flops and bytes; a CUDA family's launch geometry for the config and the reference.
Result<void> add_metrics_and_launch(BenchJob& job, const KernelSpec& spec, const Shape& shape,
                                    const Config& config, const SpecEvaluator& eval) {
  if (!spec.flops.empty()) {
    auto flops = eval.metric(spec.flops, "[metrics].flops");
    if (!flops) return flops.error();
    job.flops = flops.value();
  }
  if (!spec.bytes.empty()) {
    auto bytes = eval.metric(spec.bytes, "[metrics].bytes");
    if (!bytes) return bytes.error();
    job.bytes = bytes.value();
  }
  if (!spec.threads.empty() && spec.threads != k_all_threads) {
    auto threads = eval.integer(spec.threads, "[kernel].threads");
    if (!threads) return threads.error();
    if (threads.value() < 1 || threads.value() > 4096) {
      return make_error(ErrorCode::bad_shape, eval.where() + ": [kernel].threads '" + spec.threads +
                                                  "' is " + std::to_string(threads.value()) +
                                                  ": expected 1 to 4096");
    }
    job.threads = static_cast<int>(threads.value());
  } else if (spec.threads == k_all_threads) {
    job.threads = 0;
  }
  if (spec.language == Language::cuda) {
    auto launch = make_cuda_launch(spec, shape, config);
    if (!launch) return launch.error();
    job.launch = launch.value();
    auto reference = make_cuda_launch(spec, shape, spec.default_config);
    if (!reference) return reference.error();
    job.reference_launch = reference.value();
  }
  return {};
}

} // namespace

Result<BenchJob> make_bench_job(const KernelSpec& spec, const Shape& shape, const Config& config,
                                const std::string& dtype, const std::string& artifact_path,
                                const std::string& reference_path,
                                const MeasureSettings& settings) {
  const std::string where = "kernel " + spec.name + " at " + shape.to_string();
  if (!parse_dtype(dtype)) {
    return make_error(ErrorCode::bad_dtype, where + ": dtype '" + dtype +
                                       "': expected one of f32, f64, f16, i32, i64");
  }
  const SpecEvaluator eval(spec, shape, config, dtype, where);
  BenchJob job = job_from_spec(spec, shape, artifact_path, reference_path, settings);
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    auto arg = make_bench_arg(spec, i, shape, dtype, eval);
    if (!arg) return arg.error();
    job.args.push_back(std::move(*arg));
  }
  if (auto added = add_metrics_and_launch(job, spec, shape, config, eval); !added) return added.error();
  return job;
}

void use_compiled_entries(BenchJob& job, const std::string& entry_symbol,
                          const std::string& reference_symbol) {
  if (!reference_symbol.empty()) {
    job.reference_entry = reference_symbol;
  } else if (job.reference_entry.empty() && !job.reference_path.empty()) {
    job.reference_entry = job.entry;  // a default-config reference, under the plain name
  }
  if (!entry_symbol.empty()) job.entry = entry_symbol;
}

} // namespace ktune
