#pragma once
// Table: the winners of a ktune store as one exportable table (docs/export-format.md).
//
// One row per winner key (kernel, shape, dtype, device fingerprint, source hash), holding the
// winning config, its measurement and where it came from. Rows are kept sorted by key, so two
// tables with the same winners compare equal row by row.
#include "core/result.hpp"
#include "core/stats.hpp"
#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::tableio {

// Version of the JSON export schema (docs/export-format.md). A reader accepts exactly this one.
inline constexpr int k_table_schema_version = 1;

struct RowKey {
  std::string kernel, shape, dtype, fingerprint, source_hash;

  friend auto operator<=>(const RowKey&, const RowKey&) = default;
  friend bool operator==(const RowKey&, const RowKey&) = default;
};

// "gemm M=256,N=256,K=256 f32 <fingerprint 12 chars> <source hash 12 chars>", for messages.
[[nodiscard]] std::string to_string(const RowKey& key);

struct TableRow {
  std::string kernel, shape, dtype, fingerprint, source_hash;
  // The winning config, parameters in spec order where the exporter knew it.
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  double median_ms = 0;
  // Every statistic of the winning measurement; n == 0 means they are unknown (only median_ms).
  SampleStats stats;
  // The raw samples of the winning measurement, in the order taken; empty when unknown (a table
  // from before samples were kept, a T4 import).
  std::vector<float> samples_ms;
  double gflops = 0, gbps = 0;     // 0 = unknown
  double compile_ms = 0;           // 0 = unknown
  // Provenance.
  std::string device_name;         // "cpu", "cuda:0"; the name stored with the device
  nlohmann::json device = nlohmann::json::object(); // the device's details (model, flags, ...)
  std::string toolchain;           // host compiler version line (CPU) or nvrtc version (CUDA)
  std::int64_t time_ms = 0;        // unix ms when the winning result was measured
  std::string host;                // hostname of the machine that exported (or first exported) it

  [[nodiscard]] RowKey key() const { return {kernel, shape, dtype, fingerprint, source_hash}; }
  // The config as canonical text ({"BM":64,"BN":32}: no spaces, keys in the row's order).
  [[nodiscard]] std::string config_text() const { return config.dump(); }
};

// The spec text of a kernel source, carried along so that an importing store can record it.
struct KernelSource {
  std::string name, source_hash, spec_text;
};

struct Table {
  std::vector<TableRow> rows;         // sorted by key(), keys unique
  std::vector<KernelSource> kernels;  // sorted by (name, source_hash)
  std::string host;                   // the exporting machine
  std::int64_t exported_at_ms = 0;
  // Where and how the table was made, free-form ({"shard":"2/4","node":...,"slurm":{...}} for a
  // fleet shard, the shards for a fleet merge); an empty object when nothing is recorded.
  nlohmann::ordered_json provenance = nlohmann::ordered_json::object();

  // Sorts rows and kernels; returns an "invalid_table" error naming the first duplicate key.
  [[nodiscard]] Result<void> normalize();
  // The row with `key`, or nullptr.
  [[nodiscard]] const TableRow* find(const RowKey& key) const;
};

struct TableFilter {
  std::string kernel;  // "" = every kernel
  // "" = every device; otherwise the device name ("cpu", "cuda:0") or a fingerprint prefix.
  std::string device;
};

// The winners of `store` matching `filter`, each with the statistics of its winning result (when
// the result row is still there), the device's name and details and the toolchain taken from
// them (details "compiler", else "nvrtc_version"), the time the result was measured (else the
// winner's update time) and `host` (default: this machine's hostname). Configs are put in the
// params order of the stored kernel spec (the order ktuned writes them in), else kept as stored.
// Kernel spec texts of the exported sources are included. Reads only; a read-only store is enough. Errors are the store's ("db_error").
[[nodiscard]] Result<Table> load_table(const Store& store, const TableFilter& filter);
[[nodiscard]] Result<Table> load_table(const Store& store, const TableFilter& filter,
                                       const std::string& host);

// This machine's hostname ("unknown" when gethostname fails).
[[nodiscard]] std::string local_host_name();

// Reorders the keys of `config` to follow `order`; keys not in `order` follow, as they were.
[[nodiscard]] nlohmann::ordered_json reorder_config(const nlohmann::ordered_json& config,
                                                    const std::vector<std::string>& order);
// The params order of a kernel.toml text; empty when the text does not parse.
[[nodiscard]] std::vector<std::string> spec_param_order(std::string_view spec_text);

// Whether two configs hold the same parameters and values, in any order.
[[nodiscard]] bool same_config(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

// The toolchain recorded in device details: "compiler", else "nvrtc_version", else "".
[[nodiscard]] std::string toolchain_of(const nlohmann::json& details);

} // namespace ktune::tableio
