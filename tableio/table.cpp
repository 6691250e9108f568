#include "tableio/table.hpp"

#include "core/kernel_spec.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <utility>

namespace ktune::tableio {

namespace {

bool device_matches(const std::string& wanted, const std::string& fingerprint,
                    const std::string& name) {
  if (wanted.empty()) return true;
  if (wanted == name) return true;
  return fingerprint.compare(0, wanted.size(), wanted) == 0;
}

} // namespace

std::string to_string(const RowKey& key) {
  return key.kernel + " " + key.shape + " " + key.dtype + " device " +
         key.fingerprint.substr(0, 12) + " source " +
         (key.source_hash.empty() ? std::string("(unknown)") : key.source_hash.substr(0, 12));
}

Result<void> Table::normalize() {
  std::sort(rows.begin(), rows.end(),
            [](const TableRow& a, const TableRow& b) { return a.key() < b.key(); });
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].key() == rows[i - 1].key()) {
      return make_error(ErrorCode::invalid_table, "two rows have the same key " +
                                             to_string(rows[i].key()) +
                                             "; expected one winner per key");
    }
  }
  std::sort(kernels.begin(), kernels.end(), [](const KernelSource& a, const KernelSource& b) {
    return std::tie(a.name, a.source_hash) < std::tie(b.name, b.source_hash);
  });
  kernels.erase(std::unique(kernels.begin(), kernels.end(),
                            [](const KernelSource& a, const KernelSource& b) {
                              return a.name == b.name && a.source_hash == b.source_hash;
                            }),
                kernels.end());
  return {};
}

const TableRow* Table::find(const RowKey& key) const {
  auto it = std::lower_bound(rows.begin(), rows.end(), key,
                             [](const TableRow& row, const RowKey& k) { return row.key() < k; });
  return it != rows.end() && it->key() == key ? &*it : nullptr;
}

std::string local_host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

bool same_config(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
  return nlohmann::json(a) == nlohmann::json(b);
}

std::string toolchain_of(const nlohmann::json& details) {
  if (!details.is_object()) return {};
  for (const char* field : {"compiler", "nvrtc_version"}) {
    auto it = details.find(field);
    if (it != details.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

nlohmann::ordered_json reorder_config(const nlohmann::ordered_json& config,
                                      const std::vector<std::string>& order) {
  if (!config.is_object() || order.empty()) return config;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& name : order) {
    auto it = config.find(name);
    if (it != config.end()) out[name] = *it;
  }
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!out.contains(it.key())) out[it.key()] = it.value();
  }
  return out;
}

std::vector<std::string> spec_param_order(std::string_view spec_text) {
  std::vector<std::string> order;
  if (spec_text.empty()) return order;
  auto spec = parse_kernel_spec(spec_text, "stored kernel spec");
  if (!spec) return order;
  for (const auto& param : spec->params) order.push_back(param.name);
  return order;
}

Result<Table> load_table(const Store& store, const TableFilter& filter) {
  return load_table(store, filter, local_host_name());
}

Result<Table> load_table(const Store& store, const TableFilter& filter, const std::string& host) {
  auto winners = store.all_winners();
  if (!winners) return winners.error();

  Table table;
  table.host = host;
  std::map<std::string, std::optional<DeviceInfo>> devices;
  std::map<std::pair<std::string, std::string>, std::optional<std::string>> specs;
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> orders;

  for (const WinnerRecord& winner : *winners) {
    if (!filter.kernel.empty() && winner.kernel != filter.kernel) continue;

    auto device_it = devices.find(winner.fingerprint);
    if (device_it == devices.end()) {
      auto device = store.get_device(winner.fingerprint);
      if (!device) return device.error();
      device_it = devices.emplace(winner.fingerprint, std::move(device).value()).first;
    }
    const std::optional<DeviceInfo>& device = device_it->second;
    if (!device_matches(filter.device, winner.fingerprint, device ? device->name : std::string()))
      continue;

    TableRow row;
    row.kernel = winner.kernel;
    row.shape = winner.shape;
    row.dtype = winner.dtype;
    row.fingerprint = winner.fingerprint;
    row.source_hash = winner.source_hash;
    row.config = nlohmann::ordered_json::parse(winner.config, nullptr, false);
    if (row.config.is_discarded() || !row.config.is_object()) {
      return make_error(ErrorCode::db_error, "load_table on " + store.path() + ": winners.config of " +
                                        to_string(row.key()) + " is not a JSON object: " +
                                        winner.config);
    }
    row.median_ms = winner.median_ms;
    row.gflops = winner.gflops;
    row.time_ms = winner.updated_at;
    row.host = host;
    if (device) {
      row.device_name = device->name;
      row.device = device->details.is_object() ? device->details : nlohmann::json::object();
      row.toolchain = toolchain_of(device->details);
    }

    if (winner.result_id != 0) {
      auto results = store.results_for_key(winner.kernel, winner.source_hash, winner.shape,
                                           winner.dtype, winner.fingerprint);
      if (!results) return results.error();
      for (const ResultRecord& result : *results) {
        if (result.id != winner.result_id) continue;
        row.stats = result.stats;
        row.samples_ms = result.samples_ms;
        row.gbps = result.gbps;
        row.compile_ms = result.compile_ms;
        if (result.gflops != 0) row.gflops = result.gflops;
        if (result.created_at != 0) row.time_ms = result.created_at;
        break;
      }
    }

    const auto spec_key = std::make_pair(winner.kernel, winner.source_hash);
    auto spec_it = specs.find(spec_key);
    if (spec_it == specs.end()) {
      auto spec = store.kernel_spec(winner.kernel, winner.source_hash);
      if (!spec) return spec.error();
      spec_it = specs.emplace(spec_key, std::move(spec).value()).first;
      orders[spec_key] = spec_it->second ? spec_param_order(*spec_it->second)
                                         : std::vector<std::string>{};
    }
    row.config = reorder_config(row.config, orders[spec_key]);
    table.rows.push_back(std::move(row));
  }
  for (auto& [key, spec] : specs) {
    if (spec) table.kernels.push_back({key.first, key.second, *spec});
  }
  if (auto normalized = table.normalize(); !normalized) return normalized.error();
  return table;
}

} // namespace ktune::tableio
