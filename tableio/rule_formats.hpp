#pragma once
// A distilled rule as a document (docs/export-format.md § Distilled rules): the rule, the key it
// was distilled for, the shapes it was built from and its measured regret; written as JSON (the
// stored form, read back by read_rule_json), a C++ header (a constexpr function) and a Python
// module. Writers are pure; reader errors have code "invalid_rule" and name the file and field.
#include "core/result.hpp"
#include "tableio/distill.hpp"
#include "tableio/distill_input.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::tableio {

// Version of the rule document. A reader accepts exactly this one.
inline constexpr int k_rule_schema_version = 1;

// How one method did at one tuned shape.
struct ShapeVerdict {
  nlohmann::ordered_json config;     // null when the method had no config there
  std::optional<double> regret;      // null when not known
};

struct RuleShape {
  std::string shape;
  nlohmann::ordered_json winner;     // the shape's stored winner
  ShapeVerdict rule;                 // the rule built from every shape (in-sample)
  ShapeVerdict loso;                 // the rule built without this shape
  ShapeVerdict nearest;              // the nearest other shape's winner
};

struct MethodSummary {
  RegretSummary regret;
  std::size_t substituted = 0;       // MethodRegret::substituted
};

struct RuleDocument {
  DistillKey key;
  Rule rule;
  std::size_t max_configs = 0;
  std::optional<double> max_regret;
  bool regret_met = true;
  MethodSummary in_sample, loso, nearest;
  std::vector<RuleShape> shapes;     // the tuned shapes it was built from, in store order
  std::int64_t made_at_ms = 0;
  std::string host;

  // The leaf ranking of a shape given as "M=..,N=..": the configs as JSON objects, best first.
  // Errors: "bad_shape" naming a missing dim.
  [[nodiscard]] Result<std::vector<nlohmann::ordered_json>> ranking(std::string_view shape) const;
};

// The document of a distill() result over `loaded`.
[[nodiscard]] RuleDocument make_rule_document(const LoadedDistillInput& loaded,
                                              const Distilled& distilled,
                                              const DistillOptions& options);

[[nodiscard]] nlohmann::ordered_json rule_to_json(const RuleDocument& doc);
[[nodiscard]] std::string write_rule_json(const RuleDocument& doc);  // indented, ends with '\n'
[[nodiscard]] Result<RuleDocument> read_rule_json(std::string_view text, std::string_view where);

// A self-contained C++17 header: namespace `name_space` (default ktune_rule_<kernel>_<dtype>,
// non-identifier characters as '_') with struct Config (one std::int64_t field per param),
// k_configs, and constexpr rank(dims...) (the leaf's configs, best first) and choose(dims...)
// (its first). Errors: "invalid_rule" when a param or dim name is a C++ keyword.
[[nodiscard]] Result<std::string> write_rule_cpp_header(const RuleDocument& doc,
                                                        std::string name_space = {});
// A Python module: DIMS, PARAMS, CONFIGS, rank(dims...) and choose(dims...). Errors:
// "invalid_rule" when a dim name is a Python keyword.
[[nodiscard]] Result<std::string> write_rule_python(const RuleDocument& doc);

// Where a store keeps its rules: the directory `<database file name>-rules` beside it, one file
// per (kernel, dtype, device fingerprint): "<kernel>.<dtype>.<fingerprint>.json". Errors:
// "invalid_rule" for a kernel or dtype that is no safe file name part.
[[nodiscard]] std::string rules_dir_name(std::string_view database_file_name);
[[nodiscard]] Result<std::string> rule_file_name(const DistillKey& key);

} // namespace ktune::tableio
