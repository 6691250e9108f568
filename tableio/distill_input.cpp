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

namespace {

// The winners of the key's (kernel, source, dtype, device).
Result<std::vector<WinnerRecord>> tuned_winners(const Store& store, const DistillKey& key) {
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
  return tuned;
}

// Builds one LoadedDistillInput: its axes (from the stored spec, else from the first winner),
// a row of cells per tuned shape, a column per config met, and what the spec admits.
class DistillLoader {
public:
  DistillLoader(const Store& store, const DistillKey& key) : m_store(store), m_key(key) {}

  Result<void> read_spec() {
    auto spec_text = m_store.kernel_spec(m_key.kernel, m_key.source_hash);
    if (!spec_text) return spec_text.error();
    if (*spec_text) {
      m_loaded.spec_text = **spec_text;
      if (auto parsed = parse_kernel_spec(m_loaded.spec_text, "stored spec of " + m_key.kernel)) {
        m_spec = std::move(*parsed);
      }
    }
    return {};
  }

  // The dims and params: the spec's, or the first winner's shape and config.
  Result<void> name_axes(const WinnerRecord& first) {
    DistillInput& in = m_loaded.input;
    if (m_spec) {
      in.dims = m_spec->shape_dims;
      for (const auto& p : m_spec->params) in.params.push_back(p.name);
      return {};
    }
    auto first_config = nlohmann::ordered_json::parse(first.config, nullptr, false);
    if (!first_config.is_object()) return invalid("winner config " + first.config + " is not a JSON object");
    for (auto it = first_config.begin(); it != first_config.end(); ++it) in.params.push_back(it.key());
    auto shape = Shape::parse(first.shape);
    if (!shape) return invalid("shape '" + first.shape + "': " + shape.error().message);
    for (const auto& [name, value] : shape->dims) in.dims.push_back(name);
    return {};
  }

  // A row for the winner's shape: every stored result of the key there (the newest row of a
  // config stays), the winner's own time where no row measured it.
  Result<void> add_shape(const WinnerRecord& w) {
    DistillInput& in = m_loaded.input;
    auto parsed = Shape::parse(w.shape);
    if (!parsed) return invalid("shape '" + w.shape + "': " + parsed.error().message);
    auto conformed = conform_shape(*parsed, in.dims, m_key.kernel);
    if (!conformed) return invalid("shape '" + w.shape + "': " + conformed.error().message);
    DistillShape shape;
    shape.text = w.shape;
    for (const auto& [name, value] : conformed->dims) shape.values.push_back(value);
    in.cells.emplace_back(in.configs.size());
    const std::size_t s = in.shapes.size();
    auto rows = m_store.results_for_key(m_key.kernel, m_key.source_hash, w.shape, m_key.dtype, m_key.fingerprint);
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
    m_shapes.push_back(std::move(*conformed));
    return {};
  }

  // With the spec: its [default] as a config, and whether the spec admits a (shape, config).
  void add_spec_facts() {
    if (!m_spec) return;
    DistillInput& in = m_loaded.input;
    if (!m_spec->default_config.empty()) {
      nlohmann::ordered_json text = nlohmann::ordered_json::object();
      for (const auto& [name, value] : m_spec->default_config) text[name] = value;
      auto c = config_index(text.dump());
      if (c) in.default_config = *c;
    }
    auto spaces = std::make_shared<std::vector<std::optional<ParamSpace>>>();
    for (const Shape& shape : m_shapes) {
      auto space = ParamSpace::create(*m_spec, shape);
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

  LoadedDistillInput take() { return std::move(m_loaded); }

private:
  [[nodiscard]] Error invalid(const std::string& what) const {
    return make_error(ErrorCode::invalid_table, "distill " + m_key.kernel + " " + m_key.dtype + " on " +
                                                    short_fp(m_key.fingerprint) + ": " + what);
  }

  // The column of a config's text (a new column, every row's cell unknown, when first met).
  Result<std::size_t> config_index(const std::string& text) {
    DistillInput& in = m_loaded.input;
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
    auto [it, added] = m_index.emplace(values, in.configs.size());
    if (added) {
      in.configs.push_back(values);
      for (auto& row : in.cells) row.emplace_back();
    }
    return it->second;
  }

  const Store& m_store;
  const DistillKey& m_key;
  LoadedDistillInput m_loaded;
  std::optional<KernelSpec> m_spec;
  std::map<std::vector<std::int64_t>, std::size_t> m_index;
  std::vector<Shape> m_shapes;
};

} // namespace

Result<LoadedDistillInput> load_distill_input(const Store& store, const DistillKey& key) {
  auto tuned = tuned_winners(store, key);
  if (!tuned) return tuned.error();
  DistillLoader loader(store, key);
  if (auto read = loader.read_spec(); !read) return read.error();
  if (auto named = loader.name_axes(tuned->front()); !named) return named.error();
  for (const WinnerRecord& w : *tuned) {
    if (auto added = loader.add_shape(w); !added) return added.error();
  }
  loader.add_spec_facts();
  return loader.take();
}

} // namespace ktune::tableio
