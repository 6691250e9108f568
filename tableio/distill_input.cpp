#include "tableio/distill_input.hpp"

#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/shape.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

namespace ktune::tableio {

namespace {

std::string short_fp(const std::string& fingerprint) { return fingerprint.substr(0, 12); }

} // namespace

std::string LoadedDistillInput::config_text(std::size_t config) const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (std::size_t p = 0; p < input.params.size(); ++p) out[input.params[p]] = input.configs[config][p];
  return out.dump();
}

Result<DistillKey> resolve_distill_key(const Store& store, const std::string& kernel,
                                       const std::string& dtype, const std::string& device) {
  auto winners = store.all_winners();
  if (!winners) return winners.error();
  std::set<std::string> dtypes;
  std::map<std::string, std::string> names;  // fingerprint -> device name
  std::optional<DistillKey> newest;
  std::int64_t newest_at = -1;
  std::set<std::string> tuned_on;             // "name (fingerprint)" of the kernel's devices
  for (const WinnerRecord& w : *winners) {
    if (w.kernel != kernel) continue;
    dtypes.insert(w.dtype);
    auto name = names.find(w.fingerprint);
    if (name == names.end()) {
      auto stored = store.get_device(w.fingerprint);
      if (!stored) return stored.error();
      name = names.emplace(w.fingerprint, *stored ? (*stored)->name : std::string()).first;
    }
    if (w.dtype != dtype) continue;
    tuned_on.insert((name->second.empty() ? "?" : name->second) + " (" + short_fp(w.fingerprint) + ")");
    const bool match = !device.empty() && (device == name->second ||
                                           w.fingerprint.compare(0, device.size(), device) == 0);
    if (!match || w.updated_at < newest_at) continue;
    newest_at = w.updated_at;
    newest = DistillKey{kernel, dtype, w.fingerprint, w.source_hash, name->second};
  }
  if (dtypes.empty()) {
    return make_error(ErrorCode::not_found, "the store " + store.path() + " holds no winner of kernel '" +
                                       kernel + "': tune it at a few shapes first");
  }
  if (!dtypes.count(dtype)) {
    std::string list;
    for (const auto& d : dtypes) list += (list.empty() ? "" : ", ") + d;
    return make_error(ErrorCode::not_found, "kernel '" + kernel + "' is tuned in " + list + " only, not in " +
                                       dtype + " (store " + store.path() + ")");
  }
  if (!newest) {
    std::string list;
    for (const auto& d : tuned_on) list += (list.empty() ? "" : ", ") + d;
    return make_error(ErrorCode::not_found, "no winner of " + kernel + " " + dtype + " on device '" + device +
                                       "' in " + store.path() + "; it is tuned on " + list);
  }
  return *newest;
}

Result<LoadedDistillInput> load_distill_input(const Store& store, const DistillKey& key) {
  auto winners = store.all_winners();
  if (!winners) return winners.error();
  std::vector<WinnerRecord> tuned;
  for (auto& w : *winners) {
    if (w.kernel == key.kernel && w.source_hash == key.source_hash && w.dtype == key.dtype &&
        w.fingerprint == key.fingerprint) {
      tuned.push_back(std::move(w));
    }
  }
  if (tuned.empty()) {
    return make_error(ErrorCode::not_found, "no winner of " + key.kernel + " " + key.dtype + " on " +
                                       short_fp(key.fingerprint) + " (source " +
                                       short_fp(key.source_hash) + ") in " + store.path());
  }

  LoadedDistillInput loaded;
  DistillInput& in = loaded.input;
  std::optional<KernelSpec> spec;
  auto spec_text = store.kernel_spec(key.kernel, key.source_hash);
  if (!spec_text) return spec_text.error();
  if (*spec_text) {
    loaded.spec_text = **spec_text;
    if (auto parsed = parse_kernel_spec(loaded.spec_text, "stored spec of " + key.kernel)) {
      spec = std::move(*parsed);
    }
  }
  auto invalid = [&](const std::string& what) {
    return make_error(ErrorCode::invalid_table, "distill " + key.kernel + " " + key.dtype + " on " +
                                           short_fp(key.fingerprint) + ": " + what);
  };
  auto first_config = nlohmann::ordered_json::parse(tuned.front().config, nullptr, false);
  if (spec) {
    in.dims = spec->shape_dims;
    for (const auto& p : spec->params) in.params.push_back(p.name);
  } else {
    if (!first_config.is_object()) return invalid("winner config " + tuned.front().config + " is not a JSON object");
    for (auto it = first_config.begin(); it != first_config.end(); ++it) in.params.push_back(it.key());
    auto shape = Shape::parse(tuned.front().shape);
    if (!shape) return invalid("shape '" + tuned.front().shape + "': " + shape.error().message);
    for (const auto& [name, value] : shape->dims) in.dims.push_back(name);
  }

  std::map<std::vector<std::int64_t>, std::size_t> index;
  auto config_index = [&](const std::string& text) -> Result<std::size_t> {
    const auto object = nlohmann::json::parse(text, nullptr, false);
    if (!object.is_object()) return invalid("config " + text + " is not a JSON object");
    std::vector<std::int64_t> values;
    for (const auto& name : in.params) {
      const auto it = object.find(name);
      if (it == object.end() || !it->is_number_integer()) {
        return invalid("config " + text + " has no integer '" + name + "'");
      }
      values.push_back(it->get<std::int64_t>());
    }
    if (object.size() != in.params.size()) return invalid("config " + text + " has params the kernel does not declare");
    auto [it, added] = index.emplace(values, in.configs.size());
    if (added) {
      in.configs.push_back(values);
      for (auto& row : in.cells) row.emplace_back();
    }
    return it->second;
  };

  std::vector<Shape> shapes;
  for (const WinnerRecord& w : tuned) {
    auto parsed = Shape::parse(w.shape);
    if (!parsed) return invalid("shape '" + w.shape + "': " + parsed.error().message);
    auto conformed = conform_shape(*parsed, in.dims, key.kernel);
    if (!conformed) return invalid("shape '" + w.shape + "': " + conformed.error().message);
    DistillShape shape;
    shape.text = w.shape;
    for (const auto& [name, value] : conformed->dims) shape.values.push_back(value);
    in.cells.emplace_back(in.configs.size());
    const std::size_t s = in.shapes.size();
    auto rows = store.results_for_key(key.kernel, key.source_hash, w.shape, key.dtype, key.fingerprint);
    if (!rows) return rows.error();
    for (const ResultRecord& row : *rows) {  // oldest first: the newest row of a config stays
      auto c = config_index(row.config);
      if (!c) return c.error();
      Cell& cell = in.cells[s][*c];
      if (row.status == CandidateStatus::ok && row.stats.median_ms > 0) {
        cell = {CellState::measured, row.stats.median_ms};
      } else {
        cell = {CellState::failed, 0};
      }
    }
    auto winner = config_index(w.config);
    if (!winner) return winner.error();
    shape.winner = *winner;
    if (in.cells[s][*winner].state != CellState::measured && w.median_ms > 0) {
      in.cells[s][*winner] = {CellState::measured, w.median_ms};
    }
    in.shapes.push_back(std::move(shape));
    shapes.push_back(std::move(*conformed));
  }

  if (spec) {
    if (!spec->default_config.empty()) {
      nlohmann::ordered_json text = nlohmann::ordered_json::object();
      for (const auto& [name, value] : spec->default_config) text[name] = value;
      auto c = config_index(text.dump());
      if (c) in.default_config = *c;
    }
    auto spaces = std::make_shared<std::vector<std::optional<ParamSpace>>>();
    for (const Shape& shape : shapes) {
      auto space = ParamSpace::create(*spec, shape);
      spaces->push_back(space ? std::optional<ParamSpace>(std::move(*space)) : std::nullopt);
    }
    auto params = in.params;
    auto configs = std::make_shared<std::vector<std::vector<std::int64_t>>>(in.configs);
    in.admits = [spaces, configs, params](std::size_t s, std::size_t c) {
      const auto& space = (*spaces)[s];
      if (!space) return true;
      Config config;
      for (std::size_t p = 0; p < params.size(); ++p) config.emplace_back(params[p], (*configs)[c][p]);
      auto admitted = space->admits(config);
      return admitted && *admitted;
    };
  }
  return loaded;
}

} // namespace ktune::tableio
