#pragma once
// Engine-style tables (docs/export-format.md § engine-json): the convention inference engines
// (vLLM, SGLang) ship tuned configs in -- one JSON file per (kernel, fixed dims, device), its
// keys the values of one dim (the batch dim M), each entry a config -- with a `metadata` block
// (ktune version, source hash, toolchain, driver, fingerprint) and the lookup rule for values
// between keys: the distilled rule's buckets along that dim when a rule of the kernel is stored,
// else the nearest key (in log space, as ktuned's nearest rung). Pure: the caller reads the
// store and the rules and writes the files.
#include "core/result.hpp"
#include "tableio/rule_formats.hpp"
#include "tableio/table.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace ktune::tableio {

inline constexpr std::string_view k_engine_format = "ktune-engine-json";
inline constexpr int k_engine_schema_version = 1;

struct EngineExportOptions {
  std::string by;              // the dim whose values key each file ("M")
  std::string ktune_version;
};

struct EngineFile {
  std::string name;            // "gemm,N=128,K=80,dtype=f32,device_name=AMD_EPYC_7B13.json"
  std::string text;
};

// One file per (kernel, dtype, device fingerprint, source hash, values of the dims but `by`) of
// `table`; `rules` are the stored rules (a group uses the one of its kernel, dtype, fingerprint
// and source hash). Files are sorted by name. Errors: "invalid_table" when a row's kernel has no
// dim `by`, or two groups would write the same file name (two fingerprints of one device model:
// export one with --device).
[[nodiscard]] Result<std::vector<EngineFile>> write_engine_json(const Table& table,
                                                                const std::vector<RuleDocument>& rules,
                                                                const EngineExportOptions& options);

// Whether `document` is an engine-json file (an object whose metadata.format is
// k_engine_format).
[[nodiscard]] bool is_engine_json(const nlohmann::ordered_json& document);
// The rows of an engine-json file, one per key, as ktune's table holds them (for `ktune import`).
// Errors: "invalid_table" naming `where` and the field.
[[nodiscard]] Result<Table> read_engine_json(const nlohmann::ordered_json& document,
                                             std::string_view where);

// The device name of a file name: the device's model (CPU "model", CUDA "name" detail), else its
// stored name, with every character but letters, digits, '_', '-' and '.' as '_'.
[[nodiscard]] std::string engine_device_name(const TableRow& row);

} // namespace ktune::tableio
