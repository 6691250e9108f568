#include "jobs/compile_job.hpp"

#include "core/protocol.hpp"

#include <string_view>
#include <utility>

namespace ktune {
namespace {

using nlohmann::json;

Error field_error(std::string_view what, std::string_view field, std::string_view expected,
                  const json& object) {
  std::string message(what);
  message += ": field '";
  message += field;
  if (!object.contains(field)) {
    message += "' is missing (expected ";
    message += expected;
    message += ")";
  } else {
    message += "' must be ";
    message += expected;
    message += ", found ";
    message += object.at(std::string(field)).type_name();
  }
  return make_error(ErrorCode::bad_request, std::move(message));
}

// Reads a required string field.
Result<std::string> get_string(std::string_view what, const json& object, std::string_view field) {
  auto it = object.find(field);
  if (it == object.end() || !it->is_string()) return field_error(what, field, "a string", object);
  return it->get<std::string>();
}

// Reads an optional string field (absent = empty).
Result<std::string> get_optional_string(std::string_view what, const json& object,
                                        std::string_view field) {
  if (!object.contains(field)) return std::string();
  return get_string(what, object, field);
}

Result<std::vector<std::string>> get_string_list(std::string_view what, const json& object,
                                                 std::string_view field) {
  std::vector<std::string> out;
  auto it = object.find(field);
  if (it == object.end()) return out;
  if (!it->is_array()) return field_error(what, field, "an array of strings", object);
  for (const auto& item : *it) {
    if (!item.is_string()) return field_error(what, field, "an array of strings", object);
    out.push_back(item.get<std::string>());
  }
  return out;
}

Result<bool> get_optional_bool(std::string_view what, const json& object, std::string_view field) {
  auto it = object.find(field);
  if (it == object.end()) return false;
  if (!it->is_boolean()) return field_error(what, field, "a boolean", object);
  return it->get<bool>();
}

Result<double> get_optional_number(std::string_view what, const json& object,
                                   std::string_view field) {
  auto it = object.find(field);
  if (it == object.end()) return 0.0;
  if (!it->is_number()) return field_error(what, field, "a number", object);
  return it->get<double>();
}

constexpr std::string_view k_job = "compile job";
constexpr std::string_view k_outcome = "compile outcome";

} // namespace

json CompileJob::to_json() const {
  json defines_json = json::object();
  for (const auto& [name, value] : defines) defines_json[name] = value;
  return json{{"kernel", kernel},           {"language", language},
              {"source_path", source_path}, {"include_dirs", include_dirs},
              {"defines", defines_json},    {"dtype", dtype},
              {"extra_flags", extra_flags}, {"removed_flags", removed_flags},
              {"shim", shim},               {"entry", entry},
              {"source_hash", source_hash},
              {"cache_dir", cache_dir},     {"arch", arch}};
}

Result<CompileJob> CompileJob::from_json(const json& j) {
  if (!j.is_object()) {
    return make_error(ErrorCode::bad_request,
                      std::string(k_job) + ": expected a JSON object, found " + j.type_name());
  }
  CompileJob job;
  auto kernel = get_string(k_job, j, "kernel");
  if (!kernel) return kernel.error();
  job.kernel = std::move(*kernel);
  auto language = get_string(k_job, j, "language");
  if (!language) return language.error();
  job.language = std::move(*language);
  auto source_path = get_string(k_job, j, "source_path");
  if (!source_path) return source_path.error();
  job.source_path = std::move(*source_path);
  auto dtype = get_string(k_job, j, "dtype");
  if (!dtype) return dtype.error();
  job.dtype = std::move(*dtype);
  auto cache_dir = get_string(k_job, j, "cache_dir");
  if (!cache_dir) return cache_dir.error();
  job.cache_dir = std::move(*cache_dir);
  auto source_hash = get_optional_string(k_job, j, "source_hash");
  if (!source_hash) return source_hash.error();
  job.source_hash = std::move(*source_hash);
  auto arch = get_optional_string(k_job, j, "arch");
  if (!arch) return arch.error();
  job.arch = std::move(*arch);
  auto include_dirs = get_string_list(k_job, j, "include_dirs");
  if (!include_dirs) return include_dirs.error();
  job.include_dirs = std::move(*include_dirs);
  auto extra_flags = get_string_list(k_job, j, "extra_flags");
  if (!extra_flags) return extra_flags.error();
  job.extra_flags = std::move(*extra_flags);
  auto removed_flags = get_string_list(k_job, j, "removed_flags");
  if (!removed_flags) return removed_flags.error();
  job.removed_flags = std::move(*removed_flags);
  auto shim = get_optional_string(k_job, j, "shim");
  if (!shim) return shim.error();
  job.shim = std::move(*shim);
  auto entry = get_optional_string(k_job, j, "entry");
  if (!entry) return entry.error();
  job.entry = std::move(*entry);

  if (auto it = j.find("defines"); it != j.end()) {
    if (!it->is_object()) {
      return field_error(k_job, "defines", "an object of integer values", j);
    }
    for (const auto& [name, value] : it->items()) {
      if (!value.is_number_integer()) {
        return make_error(ErrorCode::bad_request,
                          std::string(k_job) + ": field 'defines." + name +
                              "' must be an integer, found " + value.type_name());
      }
      job.defines.emplace_back(name, value.get<std::int64_t>());
    }
  }
  return job;
}

json CompileOutcome::to_json() const {
  return json{{"status", std::string(to_string(status))},
              {"artifact_path", artifact_path},
              {"cache_key", cache_key},
              {"cached", cached},
              {"compile_ms", compile_ms},
              {"log", log},
              {"registers", registers},
              {"spills", spills},
              {"shared_bytes", shared_bytes},
              {"infra", infra},
              {"entry_symbol", entry_symbol},
              {"batch_size", batch_size},
              {"batch_error", batch_error},
              {"repaired", repaired}};
}

Result<CompileOutcome> CompileOutcome::from_json(const json& j) {
  if (!j.is_object()) {
    return make_error(ErrorCode::bad_request,
                      std::string(k_outcome) + ": expected a JSON object, found " + j.type_name());
  }
  CompileOutcome outcome;
  auto status_text = get_string(k_outcome, j, "status");
  if (!status_text) return status_text.error();
  auto status = parse_candidate_status(*status_text);
  if (!status) {
    return make_error(ErrorCode::bad_request,
                      std::string(k_outcome) + ": field 'status' is not a candidate status: '" +
                          *status_text + "'");
  }
  outcome.status = *status;
  auto artifact_path = get_optional_string(k_outcome, j, "artifact_path");
  if (!artifact_path) return artifact_path.error();
  outcome.artifact_path = std::move(*artifact_path);
  auto cache_key = get_optional_string(k_outcome, j, "cache_key");
  if (!cache_key) return cache_key.error();
  outcome.cache_key = std::move(*cache_key);
  auto cached = get_optional_bool(k_outcome, j, "cached");
  if (!cached) return cached.error();
  outcome.cached = *cached;
  auto compile_ms = get_optional_number(k_outcome, j, "compile_ms");
  if (!compile_ms) return compile_ms.error();
  outcome.compile_ms = *compile_ms;
  auto log = get_optional_string(k_outcome, j, "log");
  if (!log) return log.error();
  outcome.log = std::move(*log);
  auto infra = get_optional_string(k_outcome, j, "infra");
  if (!infra) return infra.error();
  outcome.infra = std::move(*infra);
  auto entry_symbol = get_optional_string(k_outcome, j, "entry_symbol");
  if (!entry_symbol) return entry_symbol.error();
  outcome.entry_symbol = std::move(*entry_symbol);
  auto batch_error = get_optional_string(k_outcome, j, "batch_error");
  if (!batch_error) return batch_error.error();
  outcome.batch_error = std::move(*batch_error);
  auto repaired = get_optional_string(k_outcome, j, "repaired");
  if (!repaired) return repaired.error();
  outcome.repaired = std::move(*repaired);
  outcome.batch_size = 1;
  for (auto [key, field] : {std::pair{"registers", &outcome.registers},
                            std::pair{"spills", &outcome.spills},
                            std::pair{"shared_bytes", &outcome.shared_bytes},
                            std::pair{"batch_size", &outcome.batch_size}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer()) {
      return make_error(ErrorCode::bad_request, std::string(k_outcome) + ": field '" + key +
                                                         "' must be an integer, found " +
                                                         it->type_name());
    }
    *field = it->get<int>();
  }
  if (outcome.status == CandidateStatus::ok && outcome.artifact_path.empty()) {
    return make_error(
        ErrorCode::bad_request,
        std::string(k_outcome) +
            ": field 'artifact_path' is missing (expected a string when status is ok)");
  }
  return outcome;
}

} // namespace ktune
