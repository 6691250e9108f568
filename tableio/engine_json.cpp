#include "tableio/engine_json.hpp"

#include "core/kernel_spec.hpp"
#include "core/param_space.hpp"
#include "core/shape.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace ktune::tableio {

namespace {

using nlohmann::ordered_json;

std::string sanitize(std::string_view text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? "unknown" : out;
}

struct Entry {
  std::int64_t value = 0;  // of the `by` dim
  const TableRow* row = nullptr;
};

struct Group {
  std::string kernel, dtype, fingerprint, source_hash;
  std::vector<std::string> dims;           // the kernel's order
  NamedValues fixed;                       // every dim but `by`, in order
  std::vector<Entry> entries;
};

struct Bucket {
  std::int64_t from = 1;
  std::optional<std::int64_t> below;       // nullopt: no end
  std::vector<std::size_t> ranking;        // the rule's leaf ranking
};

// The leaves of `rule` along dim `by` with the other dims fixed: intervals [from, below).
void walk(const Rule& rule, std::size_t index, std::size_t by, const std::vector<std::int64_t>& values,
          std::int64_t from, std::optional<std::int64_t> below, std::vector<Bucket>& out) {
  const RuleNode& node = rule.nodes[index];
  if (node.dim < 0) {
    out.push_back({from, below, node.ranking});
    return;
  }
  const auto d = static_cast<std::size_t>(node.dim);
  if (d != by) {
    walk(rule, values[d] < node.below ? node.left : node.right, by, values, from, below, out);
    return;
  }
  if (node.below > from) {
    walk(rule, node.left, by, values, from, below ? std::min(*below, node.below) : node.below, out);
  }
  if (!below || node.below < *below) {
    walk(rule, node.right, by, values, std::max(from, node.below), below, out);
  }
}

ordered_json config_of(const Rule& rule, std::size_t c) {
  ordered_json out = ordered_json::object();
  for (std::size_t p = 0; p < rule.params.size(); ++p) out[rule.params[p]] = rule.configs[c][p];
  return out;
}

// The buckets of a group as the file states them: each its config, adjacent buckets with the
// same config merged. A bucket's config is the first of its ranking the kernel admits at every
// key of the group inside it and at its ends (the open end: twice the largest key), else the
// first it admits at those keys, else the ranking's first.
ordered_json buckets_json(const Group& group, const RuleDocument& doc, std::size_t by,
                          const std::optional<KernelSpec>& spec) {
  std::vector<std::int64_t> values(doc.rule.dims.size(), 1);
  for (std::size_t d = 0; d < doc.rule.dims.size(); ++d) {
    for (const auto& [name, value] : group.fixed) {
      if (name == doc.rule.dims[d]) values[d] = value;
    }
  }
  std::vector<Bucket> buckets;
  walk(doc.rule, 0, by, values, 1, std::nullopt, buckets);
  const std::int64_t largest = group.entries.back().value;
  auto admitted_at = [&](std::size_t c, std::int64_t at) {
    if (!spec) return true;
    Shape shape;
    for (const auto& dim : group.dims) {
      if (dim == doc.rule.dims[by]) {
        shape.dims.emplace_back(dim, at);
        continue;
      }
      for (const auto& [name, value] : group.fixed) {
        if (name == dim) shape.dims.emplace_back(dim, value);
      }
    }
    auto space = ParamSpace::create(*spec, shape);
    if (!space) return true;
    Config config;
    for (std::size_t p = 0; p < doc.rule.params.size(); ++p) config.emplace_back(doc.rule.params[p], doc.rule.configs[c][p]);
    auto ok = space->admits(config);
    return ok && *ok;
  };
  ordered_json out = ordered_json::array();
  for (const Bucket& b : buckets) {
    std::vector<std::int64_t> keys, points;
    for (const Entry& e : group.entries) {
      if (e.value >= b.from && (!b.below || e.value < *b.below)) keys.push_back(e.value);
    }
    points = keys;
    points.push_back(b.from);
    points.push_back(std::max(b.from, b.below ? *b.below - 1 : 2 * largest));
    auto first_admitted = [&](const std::vector<std::int64_t>& at) -> std::optional<std::size_t> {
      for (std::size_t c : b.ranking) {
        if (std::all_of(at.begin(), at.end(), [&](std::int64_t v) { return admitted_at(c, v); })) return c;
      }
      return std::nullopt;
    };
    std::size_t chosen = b.ranking.front();
    if (auto c = first_admitted(points)) {
      chosen = *c;
    } else if (auto k = first_admitted(keys)) {
      chosen = *k;
    }
    ordered_json config = config_of(doc.rule, chosen);
    if (!out.empty() && out.back()["config"] == config) {
      out.back()["below"] = b.below ? ordered_json(*b.below) : ordered_json(nullptr);
      continue;
    }
    out.push_back(ordered_json{{"from", b.from},
                               {"below", b.below ? ordered_json(*b.below) : ordered_json(nullptr)},
                               {"config", config}});
  }
  return out;
}

Error invalid(std::string_view where, const std::string& what) {
  return make_error(ErrorCode::invalid_table, std::string(where) + ": " + what);
}

} // namespace

std::string engine_device_name(const TableRow& row) {
  for (const char* field : {"name", "model"}) {
    auto it = row.device.find(field);
    if (row.device.is_object() && it != row.device.end() && it->is_string() && !it->get<std::string>().empty()) {
      return sanitize(it->get<std::string>());
    }
  }
  return sanitize(row.device_name.empty() ? row.fingerprint.substr(0, 12) : row.device_name);
}

namespace {

using GroupKey = std::tuple<std::string, std::string, std::string, std::string, std::string>;

// The rows by (kernel, dtype, device, source, every dim but `by`), each row an entry at its
// `by` value.
Result<std::map<GroupKey, Group>> group_rows(const Table& table, const std::string& by) {
  std::map<GroupKey, Group> groups;
  for (const TableRow& row : table.rows) {
    auto shape = Shape::parse(row.shape);
    if (!shape) return invalid(to_string(row.key()), "shape: " + shape.error().message);
    Group probe{row.kernel, row.dtype, row.fingerprint, row.source_hash, {}, {}, {}};
    std::optional<std::int64_t> by_value;
    for (const auto& [name, value] : shape->dims) {
      probe.dims.push_back(name);
      if (name == by) {
        by_value = value;
      } else {
        probe.fixed.emplace_back(name, value);
      }
    }
    if (!by_value) {
      return invalid(to_string(row.key()), "kernel " + row.kernel + " has no dim " + by +
                                               " (its shape is " + row.shape + ")");
    }
    std::string fixed_text;
    for (const auto& [name, value] : probe.fixed) fixed_text += name + "=" + std::to_string(value) + ",";
    auto [it, added] = groups.try_emplace({row.kernel, row.dtype, row.fingerprint, row.source_hash, fixed_text},
                                          std::move(probe));
    it->second.entries.push_back({*by_value, &row});
  }
  return groups;
}

// How a value between the keys is answered: the nearest key, or the buckets of the group's
// distilled rule when `rules` has one that splits on `by`.
ordered_json lookup_json(const Table& table, const Group& group, const std::vector<RuleDocument>& rules,
                         const std::string& by_dim) {
  const RuleDocument* rule = nullptr;
  for (const RuleDocument& r : rules) {
    if (r.key.kernel == group.kernel && r.key.dtype == group.dtype &&
        r.key.fingerprint == group.fingerprint && r.key.source_hash == group.source_hash) {
      rule = &r;
    }
  }
  const auto by = rule ? std::find(rule->rule.dims.begin(), rule->rule.dims.end(), by_dim)
                       : std::vector<std::string>::const_iterator();
  if (!rule || by == rule->rule.dims.end() || rule->rule.nodes.empty()) {
    return ordered_json{{"between_keys", "nearest"},
                        {"rule", "the key nearest in log space (|ln v - ln key| least; ties: the "
                                 "smaller key), as ktuned's nearest rung"}};
  }
  std::optional<KernelSpec> spec;
  for (const KernelSource& source : table.kernels) {
    if (source.name == group.kernel && source.source_hash == group.source_hash) {
      if (auto parsed = parse_kernel_spec(source.spec_text, "stored spec of " + group.kernel)) spec = std::move(*parsed);
    }
  }
  return ordered_json{
      {"between_keys", "buckets"},
      {"rule", "a value that is a key takes its entry; any other takes the config of the bucket "
               "it falls in (from <= value < below; below null: no end), from ktune's distilled "
               "rule"},
      {"buckets", buckets_json(group, *rule, static_cast<std::size_t>(by - rule->rule.dims.begin()), spec)},
      {"rule_regret", ordered_json{{"leave_one_shape_out_geomean", rule->loso.regret.geomean},
                                   {"leave_one_shape_out_p95", rule->loso.regret.p95},
                                   {"shapes", rule->loso.regret.shapes}}}};
}

// One group's file: a config per key, then "metadata" (what, where, how to look up, each
// entry's times).
ordered_json group_document(const Table& table, const Group& group, const std::vector<RuleDocument>& rules,
                            const EngineExportOptions& options) {
  const TableRow& first = *group.entries.front().row;
  ordered_json doc = ordered_json::object();
  ordered_json entries = ordered_json::object();
  for (const Entry& e : group.entries) {
    doc[std::to_string(e.value)] = e.row->config;
    entries[std::to_string(e.value)] = ordered_json{{"median_ms", e.row->median_ms},
                                                    {"gflops", e.row->gflops},
                                                    {"time_ms", e.row->time_ms}};
  }
  ordered_json fixed = ordered_json::object();
  for (const auto& [dim, value] : group.fixed) fixed[dim] = value;
  const nlohmann::json& details = first.device;
  auto detail = [&](const char* field) -> ordered_json {
    auto it = details.is_object() ? details.find(field) : details.end();
    return details.is_object() && it != details.end() ? ordered_json(*it) : ordered_json(nullptr);
  };
  doc["metadata"] = ordered_json{
      {"format", k_engine_format},
      {"schema_version", k_engine_schema_version},
      {"kernel", group.kernel},
      {"dtype", group.dtype},
      {"by", options.by},
      {"dims", group.dims},
      {"fixed", fixed},
      {"device_name", engine_device_name(first)},
      {"device", first.device_name},
      {"fingerprint", group.fingerprint},
      {"source_hash", group.source_hash},
      {"ktune_version", options.ktune_version},
      {"toolchain", first.toolchain},
      {"driver", detail("driver_version")},
      {"device_details", details.is_object() ? ordered_json(details) : ordered_json::object()},
      {"host", first.host},
      {"exported_at_ms", table.exported_at_ms},
      {"lookup", lookup_json(table, group, rules, options.by)},
      {"entries", entries},
  };
  return doc;
}

} // namespace

Result<std::vector<EngineFile>> write_engine_json(const Table& table, const std::vector<RuleDocument>& rules,
                                                  const EngineExportOptions& options) {
  auto groups = group_rows(table, options.by);
  if (!groups) return groups.error();
  std::map<std::string, std::string> taken;  // file name -> fingerprint
  std::vector<EngineFile> files;
  for (auto& [key, group] : *groups) {
    std::sort(group.entries.begin(), group.entries.end(),
              [](const Entry& a, const Entry& b) { return a.value < b.value; });
    const TableRow& first = *group.entries.front().row;
    std::string name = group.kernel;
    for (const auto& [dim, value] : group.fixed) name += "," + dim + "=" + std::to_string(value);
    name += ",dtype=" + sanitize(group.dtype) + ",device_name=" + engine_device_name(first);
    const std::string file_name = name + ".json";
    if (auto [it, added] = taken.emplace(file_name, group.fingerprint + group.source_hash); !added) {
      return make_error(ErrorCode::invalid_table,
                        "two tables would be written as " + file_name + " (devices " +
                            it->second.substr(0, 12) + "... and " + group.fingerprint.substr(0, 12) +
                            "..., or two sources of the kernel): export one device with --device "
                            "FINGERPRINT, or one source");
    }
    files.push_back({file_name, group_document(table, group, rules, options).dump(2) + "\n"});
  }
  std::sort(files.begin(), files.end(), [](const EngineFile& a, const EngineFile& b) { return a.name < b.name; });
  return files;
}

bool is_engine_json(const ordered_json& document) {
  if (!document.is_object()) return false;
  const auto metadata = document.find("metadata");
  return metadata != document.end() && metadata->is_object() &&
         metadata->value("format", std::string()) == k_engine_format;
}

Result<Table> read_engine_json(const ordered_json& document, std::string_view where) {
  if (!is_engine_json(document)) return invalid(where, "not an engine-json file (metadata.format)");
  const ordered_json& meta = document["metadata"];
  if (meta.value("schema_version", 0) != k_engine_schema_version) {
    return invalid(where, "metadata.schema_version: expected " + std::to_string(k_engine_schema_version));
  }
  auto text = [&](const char* field) -> Result<std::string> {
    const auto it = meta.find(field);
    if (it == meta.end() || !it->is_string() || (it->get<std::string>().empty() && std::string_view(field) != "source_hash")) {
      return invalid(where, std::string("metadata.") + field + ": expected a non-empty string");
    }
    return it->get<std::string>();
  };
  Table table;
  TableRow base;
  for (auto [field, out] : {std::pair{"kernel", &base.kernel}, std::pair{"dtype", &base.dtype},
                            std::pair{"fingerprint", &base.fingerprint}, std::pair{"source_hash", &base.source_hash},
                            std::pair{"by", static_cast<std::string*>(nullptr)}}) {
    auto value = text(field);
    if (!value) return value.error();
    if (out) *out = *value;
  }
  const std::string by = meta["by"].get<std::string>();
  base.device_name = meta.value("device", std::string());
  base.device = meta.contains("device_details") && meta["device_details"].is_object()
                    ? nlohmann::json(meta["device_details"])
                    : nlohmann::json::object();
  base.toolchain = meta.value("toolchain", std::string());
  base.host = meta.value("host", std::string());
  const auto dims = meta.find("dims");
  const auto fixed = meta.find("fixed");
  if (dims == meta.end() || !dims->is_array() || fixed == meta.end() || !fixed->is_object()) {
    return invalid(where, "metadata.dims (an array) and metadata.fixed (an object) are required");
  }
  const ordered_json entries = meta.value("entries", ordered_json::object());
  for (auto it = document.begin(); it != document.end(); ++it) {
    if (it.key() == "metadata") continue;
    const std::string at = "\"" + it.key() + "\"";
    std::int64_t value = 0;
    try {
      std::size_t used = 0;
      value = std::stoll(it.key(), &used);
      if (used != it.key().size() || value <= 0) throw std::invalid_argument("key");
    } catch (const std::exception&) {
      return invalid(where, at + ": expected a positive integer key (a value of " + by + ") or \"metadata\"");
    }
    if (!it->is_object() || it->empty()) return invalid(where, at + ": expected a config object");
    TableRow row = base;
    std::string shape;
    for (const auto& dim : *dims) {
      if (!dim.is_string()) return invalid(where, "metadata.dims: expected names");
      const std::string name = dim.get<std::string>();
      std::int64_t v = value;
      if (name != by) {
        const auto f = fixed->find(name);
        if (f == fixed->end() || !f->is_number_integer()) return invalid(where, "metadata.fixed." + name + ": expected an integer");
        v = f->get<std::int64_t>();
      }
      shape += (shape.empty() ? "" : ",") + name + "=" + std::to_string(v);
    }
    row.shape = shape;
    row.config = *it;
    const auto entry = entries.find(it.key());
    if (entry == entries.end() || !entry->is_object() || !entry->contains("median_ms") || !(*entry)["median_ms"].is_number()) {
      return invalid(where, "metadata.entries." + it.key() + ".median_ms: expected a number");
    }
    row.median_ms = (*entry)["median_ms"].get<double>();
    row.gflops = entry->value("gflops", 0.0);
    row.time_ms = entry->value("time_ms", std::int64_t{0});
    table.rows.push_back(std::move(row));
  }
  if (table.rows.empty()) return invalid(where, "no entries");
  table.host = base.host;
  if (auto normalized = table.normalize(); !normalized) return normalized.error();
  return table;
}

} // namespace ktune::tableio
