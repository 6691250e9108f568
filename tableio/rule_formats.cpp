#include "tableio/rule_formats.hpp"

#include "core/shape.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <sstream>

namespace ktune::tableio {

namespace {

using nlohmann::ordered_json;

ordered_json config_json(const std::vector<std::string>& params, const std::vector<std::int64_t>& values) {
  ordered_json out = ordered_json::object();
  for (std::size_t p = 0; p < params.size() && p < values.size(); ++p) out[params[p]] = values[p];
  return out;
}

ordered_json optional_number(const std::optional<double>& value) {
  return value ? ordered_json(*value) : ordered_json(nullptr);
}

ordered_json summary_json(const MethodSummary& m) {
  const RegretSummary& r = m.regret;
  auto number = [&](double v) { return r.shapes == 0 ? ordered_json(nullptr) : ordered_json(v); };
  return ordered_json{{"shapes", r.shapes},         {"geomean", number(r.geomean)},
                      {"p95", number(r.p95)},        {"worst", number(r.worst)},
                      {"failures", r.failures},      {"unknown", r.unknown},
                      {"no_choice", r.no_choice},    {"substituted", m.substituted}};
}

ordered_json verdict_json(const ShapeVerdict& v) {
  return ordered_json{{"config", v.config}, {"regret", optional_number(v.regret)}};
}

bool safe_name_part(std::string_view text) {
  if (text.empty() || text.front() == '.' || text.size() > 128) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::string identifier(std::string_view text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out += ok ? c : '_';
  }
  if (out.empty() || (out.front() >= '0' && out.front() <= '9')) out = "_" + out;
  return out;
}

// C++ keywords and the names the header itself declares.
bool cpp_reserved(std::string_view name) {
  static const std::set<std::string_view> words{
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
      "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
      "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
      "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
      "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
      "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
      "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
      "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
      "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
      "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
      "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "Config", "Ranking",
      "k_configs", "k_config_count", "rank", "choose", "std"};
  return words.count(name) > 0 || name.rfind("k_leaf_", 0) == 0;
}

bool python_reserved(std::string_view name) {
  static const std::set<std::string_view> words{
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
      "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
      "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
      "try", "while", "with", "yield", "DIMS", "PARAMS", "CONFIGS", "NODES", "rank", "choose"};
  return words.count(name) > 0;
}

std::string number_text(double value) {
  std::ostringstream out;
  out.precision(4);
  out << std::fixed << value;
  return out.str();
}

std::string regret_line(const RuleDocument& doc) {
  const RegretSummary& r = doc.loso.regret;
  if (r.shapes == 0) return "leave-one-shape-out regret: not known";
  return "leave-one-shape-out regret over " + std::to_string(r.shapes) + " shapes: geomean " +
         number_text(r.geomean) + ", p95 " + number_text(r.p95) + ", worst " + number_text(r.worst);
}

Error invalid(std::string_view where, const std::string& what) {
  return make_error(ErrorCode::invalid_rule, std::string(where) + ": " + what);
}

// Reads the regret summary object of a document (the figures it needs back: the counts and the
// three regrets).
MethodSummary read_summary(const ordered_json& j) {
  MethodSummary m;
  if (!j.is_object()) return m;
  auto number = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  auto count = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<std::size_t>() : std::size_t{0};
  };
  m.regret.shapes = count("shapes");
  m.regret.geomean = number("geomean");
  m.regret.p95 = number("p95");
  m.regret.worst = number("worst");
  m.regret.failures = count("failures");
  m.regret.unknown = count("unknown");
  m.regret.no_choice = count("no_choice");
  m.substituted = count("substituted");
  return m;
}

void write_cpp_node(const RuleDocument& doc, std::size_t index, int depth, std::ostringstream& out,
                    const std::vector<std::size_t>& leaf_ids) {
  const RuleNode& node = doc.rule.nodes[index];
  const std::string pad(static_cast<std::size_t>(2 * depth + 2), ' ');
  if (node.dim < 0) {
    out << pad << "return {k_leaf_" << leaf_ids[index] << ", " << node.ranking.size() << "};\n";
    return;
  }
  out << pad << "if (" << doc.rule.dims[static_cast<std::size_t>(node.dim)] << " < " << node.below
      << ") {\n";
  write_cpp_node(doc, node.left, depth + 1, out, leaf_ids);
  out << pad << "}\n";
  write_cpp_node(doc, node.right, depth, out, leaf_ids);
}

void write_python_node(const RuleDocument& doc, std::size_t index, int depth, std::ostringstream& out) {
  const RuleNode& node = doc.rule.nodes[index];
  const std::string pad(static_cast<std::size_t>(4 * depth + 4), ' ');
  if (node.dim < 0) {
    out << pad << "return [CONFIGS[i] for i in (";
    for (std::size_t i = 0; i < node.ranking.size(); ++i) out << (i ? ", " : "") << node.ranking[i];
    out << (node.ranking.size() == 1 ? ",)]\n" : ")]\n");
    return;
  }
  out << pad << "if " << doc.rule.dims[static_cast<std::size_t>(node.dim)] << " < " << node.below << ":\n";
  write_python_node(doc, node.left, depth + 1, out);
  write_python_node(doc, node.right, depth, out);
}

} // namespace

Result<std::vector<ordered_json>> RuleDocument::ranking(std::string_view shape) const {
  auto parsed = Shape::parse(shape);
  if (!parsed) return parsed.error();
  std::vector<std::int64_t> values;
  for (const auto& dim : rule.dims) {
    auto value = parsed->get(dim);
    if (!value) return make_error(ErrorCode::bad_shape, "shape '" + std::string(shape) + "' has no dim " + dim);
    values.push_back(*value);
  }
  std::vector<ordered_json> out;
  for (std::size_t c : rule.ranking(values)) out.push_back(config_json(rule.params, rule.configs[c]));
  return out;
}

RuleDocument make_rule_document(const LoadedDistillInput& loaded, const Distilled& distilled,
                                const DistillOptions& options) {
  const DistillInput& in = loaded.input;
  RuleDocument doc;
  doc.rule = distilled.rule;
  doc.max_configs = options.max_configs;
  doc.max_regret = options.max_regret;
  doc.regret_met = distilled.regret_met;
  doc.in_sample = {distilled.in_sample.summary, distilled.in_sample.substituted};
  doc.loso = {distilled.loso.summary, distilled.loso.substituted};
  doc.nearest = {distilled.nearest.summary, distilled.nearest.substituted};
  auto verdict = [&](const ShapeChoice& choice) {
    ShapeVerdict v;
    v.config = choice.config ? config_json(in.params, in.configs[*choice.config]) : ordered_json(nullptr);
    v.regret = choice.regret;
    return v;
  };
  for (std::size_t s = 0; s < in.shapes.size(); ++s) {
    RuleShape shape;
    shape.shape = in.shapes[s].text;
    shape.winner = config_json(in.params, in.configs[in.shapes[s].winner]);
    shape.rule = verdict(distilled.in_sample.shapes[s]);
    shape.loso = verdict(distilled.loso.shapes[s]);
    shape.nearest = verdict(distilled.nearest.shapes[s]);
    doc.shapes.push_back(std::move(shape));
  }
  return doc;
}

ordered_json rule_to_json(const RuleDocument& doc) {
  ordered_json configs = ordered_json::array();
  for (const auto& c : doc.rule.configs) configs.push_back(config_json(doc.rule.params, c));
  ordered_json nodes = ordered_json::array();
  for (const RuleNode& node : doc.rule.nodes) {
    if (node.dim < 0) {
      nodes.push_back(ordered_json{{"ranking", node.ranking}});
    } else {
      nodes.push_back(ordered_json{{"dim", doc.rule.dims[static_cast<std::size_t>(node.dim)]},
                                   {"below", node.below}, {"left", node.left}, {"right", node.right}});
    }
  }
  ordered_json shapes = ordered_json::array();
  for (const RuleShape& s : doc.shapes) {
    shapes.push_back(ordered_json{{"shape", s.shape}, {"winner", s.winner}, {"rule", verdict_json(s.rule)},
                                  {"leave_one_shape_out", verdict_json(s.loso)},
                                  {"nearest", verdict_json(s.nearest)}});
  }
  return ordered_json{
      {"format", "ktune-rule"},
      {"schema_version", k_rule_schema_version},
      {"kernel", doc.key.kernel},
      {"dtype", doc.key.dtype},
      {"fingerprint", doc.key.fingerprint},
      {"source_hash", doc.key.source_hash},
      {"device", doc.key.device_name},
      {"dims", doc.rule.dims},
      {"params", doc.rule.params},
      {"configs", configs},
      {"nodes", nodes},
      {"max_configs", doc.max_configs},
      {"max_regret", optional_number(doc.max_regret)},
      {"regret_met", doc.regret_met},
      {"regret", ordered_json{{"in_sample", summary_json(doc.in_sample)},
                              {"leave_one_shape_out", summary_json(doc.loso)},
                              {"nearest", summary_json(doc.nearest)}}},
      {"shapes", shapes},
      {"made_at_ms", doc.made_at_ms},
      {"host", doc.host},
  };
}

std::string write_rule_json(const RuleDocument& doc) { return rule_to_json(doc).dump(2) + "\n"; }

namespace {

// "configs": one integer per param, each config.
std::optional<Error> read_rule_configs(const ordered_json& j, std::string_view where, Rule& rule) {
  const auto configs = j.find("configs");
  if (configs == j.end() || !configs->is_array() || configs->empty()) {
    return invalid(where, "configs: expected a non-empty array");
  }
  for (std::size_t c = 0; c < configs->size(); ++c) {
    const auto& config = (*configs)[c];
    std::vector<std::int64_t> values;
    for (const auto& param : rule.params) {
      auto it = config.is_object() ? config.find(param) : config.end();
      if (!config.is_object() || it == config.end() || !it->is_number_integer()) {
        return invalid(where, "configs[" + std::to_string(c) + "]." + param + ": expected an integer");
      }
      values.push_back(it->get<std::int64_t>());
    }
    rule.configs.push_back(std::move(values));
  }
  return std::nullopt;
}

// nodes[i]: a leaf's ranking of configs, or a split on a dim whose children come later.
Result<RuleNode> read_rule_node(const ordered_json& nodes, std::size_t i, std::string_view where,
                                const Rule& rule) {
  const auto& n = nodes[i];
  const std::string at = "nodes[" + std::to_string(i) + "]";
  if (!n.is_object()) return invalid(where, at + ": expected an object");
  RuleNode node;
  if (auto ranking = n.find("ranking"); ranking != n.end()) {
    if (!ranking->is_array() || ranking->empty()) return invalid(where, at + ".ranking: expected a non-empty array");
    for (const auto& c : *ranking) {
      if (!c.is_number_unsigned() || c.get<std::size_t>() >= rule.configs.size()) {
        return invalid(where, at + ".ranking: expected indices into configs");
      }
      node.ranking.push_back(c.get<std::size_t>());
    }
    return node;
  }
  const auto dim = n.find("dim");
  const auto found = dim != n.end() && dim->is_string()
                         ? std::find(rule.dims.begin(), rule.dims.end(), dim->get<std::string>())
                         : rule.dims.end();
  if (found == rule.dims.end()) return invalid(where, at + ".dim: expected one of dims");
  node.dim = static_cast<int>(found - rule.dims.begin());
  const auto below = n.find("below");
  if (below == n.end() || !below->is_number_integer()) return invalid(where, at + ".below: expected an integer");
  node.below = below->get<std::int64_t>();
  for (auto [key, out] : {std::pair{"left", &node.left}, std::pair{"right", &node.right}}) {
    const auto child = n.find(key);
    // Children come after their parent, so following them always ends at a leaf.
    if (child == n.end() || !child->is_number_unsigned() || child->get<std::size_t>() <= i ||
        child->get<std::size_t>() >= nodes.size()) {
      return invalid(where, at + "." + key + ": expected the index of a later node");
    }
    *out = child->get<std::size_t>();
  }
  return node;
}

// "shapes": each tuned shape's winner and what the rule, leave-one-out and nearest gave there;
// entries without a shape are skipped.
std::vector<RuleShape> read_rule_shapes(const ordered_json& shapes) {
  std::vector<RuleShape> out;
  for (const auto& s : shapes) {
    if (!s.is_object() || !s.contains("shape") || !s["shape"].is_string()) continue;
    RuleShape shape;
    shape.shape = s["shape"].get<std::string>();
    shape.winner = s.value("winner", ordered_json(nullptr));
    auto read_verdict = [&](const char* key) {
      ShapeVerdict v;
      const auto it = s.find(key);
      if (it == s.end() || !it->is_object()) return v;
      v.config = it->value("config", ordered_json(nullptr));
      if (auto r = it->find("regret"); r != it->end() && r->is_number()) v.regret = r->get<double>();
      return v;
    };
    shape.rule = read_verdict("rule");
    shape.loso = read_verdict("leave_one_shape_out");
    shape.nearest = read_verdict("nearest");
    out.push_back(std::move(shape));
  }
  return out;
}

// The optional report fields: limits, regrets, shapes, when and where it was made.
void read_rule_report(const ordered_json& j, RuleDocument& doc) {
  if (auto it = j.find("max_configs"); it != j.end() && it->is_number_unsigned()) doc.max_configs = it->get<std::size_t>();
  if (auto it = j.find("max_regret"); it != j.end() && it->is_number()) doc.max_regret = it->get<double>();
  if (auto it = j.find("regret_met"); it != j.end() && it->is_boolean()) doc.regret_met = it->get<bool>();
  if (auto regret = j.find("regret"); regret != j.end() && regret->is_object()) {
    doc.in_sample = read_summary(regret->value("in_sample", ordered_json()));
    doc.loso = read_summary(regret->value("leave_one_shape_out", ordered_json()));
    doc.nearest = read_summary(regret->value("nearest", ordered_json()));
  }
  if (auto shapes = j.find("shapes"); shapes != j.end() && shapes->is_array()) doc.shapes = read_rule_shapes(*shapes);
  if (auto it = j.find("made_at_ms"); it != j.end() && it->is_number_integer()) doc.made_at_ms = it->get<std::int64_t>();
  if (auto it = j.find("host"); it != j.end() && it->is_string()) doc.host = it->get<std::string>();
}

} // namespace

Result<RuleDocument> read_rule_json(std::string_view text, std::string_view where) {
  // Parsed in document order: configs and winners keep their params' order.
  const auto j = ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid(where, "not a JSON object");
  auto string_field = [&](const char* key, std::string& out) -> std::optional<Error> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return invalid(where, std::string(key) + ": expected a string");
    out = it->get<std::string>();
    return std::nullopt;
  };
  std::string format;
  if (auto e = string_field("format", format)) return *e;
  if (format != "ktune-rule") return invalid(where, "format: expected \"ktune-rule\", found \"" + format + "\"");
  const auto version = j.find("schema_version");
  if (version == j.end() || !version->is_number_integer() || version->get<int>() != k_rule_schema_version) {
    return invalid(where, "schema_version: expected " + std::to_string(k_rule_schema_version));
  }
  RuleDocument doc;
  for (auto [key, out] : {std::pair{"kernel", &doc.key.kernel}, std::pair{"dtype", &doc.key.dtype},
                          std::pair{"fingerprint", &doc.key.fingerprint},
                          std::pair{"source_hash", &doc.key.source_hash},
                          std::pair{"device", &doc.key.device_name}}) {
    if (auto e = string_field(key, *out)) return *e;
  }
  auto names = [&](const char* key, std::vector<std::string>& out) -> std::optional<Error> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->empty()) return invalid(where, std::string(key) + ": expected a non-empty array of names");
    for (const auto& name : *it) {
      if (!name.is_string()) return invalid(where, std::string(key) + ": expected names");
      out.push_back(name.get<std::string>());
    }
    return std::nullopt;
  };
  if (auto e = names("dims", doc.rule.dims)) return *e;
  if (auto e = names("params", doc.rule.params)) return *e;
  if (auto e = read_rule_configs(j, where, doc.rule)) return *e;
  const auto nodes = j.find("nodes");
  if (nodes == j.end() || !nodes->is_array() || nodes->empty()) return invalid(where, "nodes: expected a non-empty array");
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    auto node = read_rule_node(*nodes, i, where, doc.rule);
    if (!node) return node.error();
    doc.rule.nodes.push_back(std::move(*node));
  }
  read_rule_report(j, doc);
  return doc;
}

Result<std::string> write_rule_cpp_header(const RuleDocument& doc, std::string name_space) {
  if (name_space.empty()) name_space = identifier("ktune_rule_" + doc.key.kernel + "_" + doc.key.dtype);
  for (const auto& name : doc.rule.params) {
    if (cpp_reserved(name)) return make_error(ErrorCode::invalid_rule, "param '" + name + "' of " + doc.key.kernel + " is a reserved name in C++ or in the header; it cannot be a field of Config");
  }
  for (const auto& name : doc.rule.dims) {
    if (cpp_reserved(name)) return make_error(ErrorCode::invalid_rule, "dim '" + name + "' of " + doc.key.kernel + " is a reserved name in C++ or in the header; it cannot name a parameter of rank()");
  }
  std::ostringstream out;
  out << "// ktune distilled rule: " << doc.key.kernel << ' ' << doc.key.dtype << " on "
      << doc.key.device_name << " (fingerprint " << doc.key.fingerprint << ", source "
      << doc.key.source_hash << ").\n// " << doc.rule.configs.size() << " configs, "
      << doc.rule.leaves() << " leaves, built from " << doc.shapes.size() << " tuned shapes; "
      << regret_line(doc) << ".\n"
      << "// rank() gives a leaf's configs, best first: use the first the kernel admits at the shape\n"
      << "// (its [space] constraints; ktuned's lookups do the same). choose() is the first.\n"
      << "#pragma once\n\n#include <cstddef>\n#include <cstdint>\n\n"
      << "namespace " << name_space << " {\n\nstruct Config {\n";
  for (const auto& name : doc.rule.params) out << "  std::int64_t " << name << ";\n";
  out << "};\n\ninline constexpr std::size_t k_config_count = " << doc.rule.configs.size() << ";\n"
      << "inline constexpr Config k_configs[k_config_count] = {\n";
  for (const auto& config : doc.rule.configs) {
    out << "    {";
    for (std::size_t p = 0; p < config.size(); ++p) out << (p ? ", " : "") << config[p];
    out << "},\n";
  }
  out << "};\n\nstruct Ranking {\n  const std::uint16_t* order;  // indices into k_configs, best first\n"
      << "  std::size_t count;\n"
      << "  constexpr const Config& operator[](std::size_t i) const { return k_configs[order[i]]; }\n"
      << "};\n\n";
  std::vector<std::size_t> leaf_ids(doc.rule.nodes.size(), 0);
  std::size_t leaves = 0;
  for (std::size_t i = 0; i < doc.rule.nodes.size(); ++i) {
    const RuleNode& node = doc.rule.nodes[i];
    if (node.dim >= 0) continue;
    leaf_ids[i] = leaves++;
    out << "inline constexpr std::uint16_t k_leaf_" << leaf_ids[i] << "[] = {";
    for (std::size_t r = 0; r < node.ranking.size(); ++r) out << (r ? ", " : "") << node.ranking[r];
    out << "};\n";
  }
  std::string params;
  std::string args;
  for (std::size_t d = 0; d < doc.rule.dims.size(); ++d) {
    // A dim no split tests is still a parameter (callers pass every dim), marked unused.
    const bool tested = std::any_of(doc.rule.nodes.begin(), doc.rule.nodes.end(), [&](const RuleNode& n) {
      return n.dim == static_cast<int>(d);
    });
    params += (params.empty() ? "" : ", ") + std::string(tested ? "" : "[[maybe_unused]] ") +
              "std::int64_t " + doc.rule.dims[d];
    args += (args.empty() ? "" : ", ") + doc.rule.dims[d];
  }
  out << "\nconstexpr Ranking rank(" << params << ") {\n";
  write_cpp_node(doc, 0, 0, out, leaf_ids);
  out << "}\n\nconstexpr const Config& choose(" << params << ") { return rank(" << args
      << ")[0]; }\n\n} // namespace " << name_space << "\n";
  return out.str();
}

Result<std::string> write_rule_python(const RuleDocument& doc) {
  for (const auto& name : doc.rule.dims) {
    if (python_reserved(name)) return make_error(ErrorCode::invalid_rule, "dim '" + name + "' of " + doc.key.kernel + " is a reserved name in Python; it cannot name a parameter of rank()");
  }
  std::ostringstream out;
  out << "\"\"\"ktune distilled rule: " << doc.key.kernel << ' ' << doc.key.dtype << " on "
      << doc.key.device_name << " (fingerprint " << doc.key.fingerprint << ", source "
      << doc.key.source_hash << ").\n\n" << doc.rule.configs.size() << " configs, "
      << doc.rule.leaves() << " leaves, built from " << doc.shapes.size() << " tuned shapes; "
      << regret_line(doc) << ".\n"
      << "rank() gives a leaf's configs, best first: use the first the kernel admits at the shape\n"
      << "(its [space] constraints; ktuned's lookups do the same). choose() is the first.\n\"\"\"\n\n";
  std::string dims;
  for (const auto& dim : doc.rule.dims) dims += (dims.empty() ? "" : ", ") + dim;
  out << "DIMS = (";
  for (const auto& dim : doc.rule.dims) out << nlohmann::json(dim).dump() << ", ";
  out << ")\nPARAMS = (";
  for (const auto& p : doc.rule.params) out << nlohmann::json(p).dump() << ", ";
  out << ")\nCONFIGS = (\n";
  for (const auto& config : doc.rule.configs) {
    out << "    {";
    for (std::size_t p = 0; p < config.size(); ++p) {
      out << (p ? ", " : "") << nlohmann::json(doc.rule.params[p]).dump() << ": " << config[p];
    }
    out << "},\n";
  }
  out << ")\n\n\ndef rank(" << dims << "):\n    \"\"\"The leaf's configs (dicts), best first.\"\"\"\n";
  write_python_node(doc, 0, 0, out);
  out << "\n\ndef choose(" << dims << "):\n    \"\"\"The leaf's first config.\"\"\"\n    return rank("
      << dims << ")[0]\n";
  return out.str();
}

std::string rules_dir_name(std::string_view database_file_name) {
  return std::string(database_file_name) + "-rules";
}

Result<std::string> rule_file_name(const DistillKey& key) {
  for (const std::string* part : {&key.kernel, &key.dtype, &key.fingerprint}) {
    if (!safe_name_part(*part)) {
      return make_error(ErrorCode::invalid_rule, "'" + *part + "' cannot be part of a rule's file name "
                                        "(letters, digits, '_', '-' and '.', not first)");
    }
  }
  return key.kernel + "." + key.dtype + "." + key.fingerprint + ".json";
}

} // namespace ktune::tableio
