#include "core/kernel_spec.hpp"

#include "core/buffer_init.hpp"
#include "core/expr.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <unordered_set>
#include <array>
#include <cmath>
#include <initializer_list>
#include <set>
#include <utility>

namespace ktune {

std::string_view to_string(Language language) {
  switch (language) {
  case Language::cpp: return "cpp";
  case Language::cuda: return "cuda";
  }
  return "unknown";
}

std::string_view to_string(ArgKind kind) {
  switch (kind) {
  case ArgKind::in: return "in";
  case ArgKind::out: return "out";
  case ArgKind::inout: return "inout";
  case ArgKind::scalar: return "scalar";
  }
  return "unknown";
}

const ParamSpec* KernelSpec::find_param(std::string_view name) const {
  for (const auto& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace {

constexpr std::array<std::string_view, 5> k_dtypes{"f32", "f64", "f16", "i32", "i64"};

// Raised inside parse_kernel_spec only and turned into its Error before it returns.
struct SpecFailure {
  std::string message;
  ErrorCode code = ErrorCode::spec_error;
};

// `text` cut to SpecLimits::max_message_bytes, saying how long it was.
std::string clipped(std::string text) {
  if (text.size() <= SpecLimits::max_message_bytes) return text;
  const std::size_t size = text.size();
  text.resize(SpecLimits::max_message_bytes);
  return text + "... (" + std::to_string(size) + " bytes)";
}

std::string too_large(std::size_t found, std::size_t limit, const char* what, const char* name) {
  return std::to_string(found) + " " + what + ", more than the " + std::to_string(limit) +
         " a kernel family may have (limit " + name + "; fix: split the family or narrow it)";
}

bool is_identifier(std::string_view name) {
  if (name.empty()) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name.front())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

bool is_kernel_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

template <std::size_t N>
bool one_of(std::string_view value, const std::array<std::string_view, N>& choices) {
  return std::find(choices.begin(), choices.end(), value) != choices.end();
}

template <std::size_t N>
std::string list(const std::array<std::string_view, N>& choices) {
  std::string out;
  for (auto c : choices) out += (out.empty() ? "" : ", ") + std::string(c);
  return out;
}

std::string type_name(const toml::node& node) {
  switch (node.type()) {
  case toml::node_type::table: return "a table";
  case toml::node_type::array: return "an array";
  case toml::node_type::string: return "a string";
  case toml::node_type::integer: return "an integer";
  case toml::node_type::floating_point: return "a float";
  case toml::node_type::boolean: return "a boolean";
  case toml::node_type::date: return "a date";
  case toml::node_type::time: return "a time";
  case toml::node_type::date_time: return "a date-time";
  case toml::node_type::none: break;
  }
  return "nothing";
}

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// Table keys in the order they appear in the file (toml++ keeps tables sorted by name).
std::vector<std::pair<std::string, const toml::node*>> in_file_order(const toml::table& table) {
  std::vector<std::pair<std::string, const toml::node*>> entries;
  for (const auto& [key, node] : table) entries.emplace_back(std::string(key.str()), &node);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.second->source().begin;
    const auto& pb = b.second->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return entries;
}

class SpecReader {
public:
  explicit SpecReader(std::string_view label) : m_label(label) {}

  [[noreturn]] void fail(const std::string& key, const std::string& reason) const {
    throw SpecFailure{clipped(m_label + ": " + key + ": " + reason)};
  }

  // A limit of SpecLimits passed: spec_too_large.
  [[noreturn]] void too_large(const std::string& key, const std::string& reason) const {
    throw SpecFailure{clipped(m_label + ": " + key + ": " + reason), ErrorCode::spec_too_large};
  }

  // As fail(), with the line of `node` after the file name.
  [[noreturn]] void fail_at(const toml::node& node, const std::string& key,
                            const std::string& reason) const {
    throw SpecFailure{clipped(m_label + ":" + std::to_string(node.source().begin.line) + ": " +
                              key + ": " + reason)};
  }

  void only_keys(const toml::table& table, const std::string& where,
                 std::initializer_list<std::string_view> allowed) const {
    for (const auto& [key, node] : in_file_order(table)) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string expected;
        for (auto a : allowed) expected += (expected.empty() ? "" : ", ") + std::string(a);
        if (where.empty()) {
          fail_at(*node, "[" + key + "]", "unknown table (expected one of: " + expected +
                                              "; fix: rename it to one of these or remove it)");
        }
        fail_at(*node, where + "." + key, "unknown key (expected one of: " + expected +
                                              "; fix: rename it to one of these or remove it)");
      }
    }
  }

  const toml::table& table(const toml::table& parent, std::string_view key, const std::string& where) const {
    const toml::node* node = parent.get(key);
    if (node == nullptr) fail(where, "missing table");
    if (!node->is_table()) fail(where, "expected a table, found " + type_name(*node));
    return *node->as_table();
  }

  const toml::table* optional_table(const toml::table& parent, std::string_view key,
                                    const std::string& where) const {
    const toml::node* node = parent.get(key);
    if (node == nullptr) return nullptr;
    if (!node->is_table()) fail(where, "expected a table, found " + type_name(*node));
    return node->as_table();
  }

  std::string string(const toml::node& node, const std::string& key) const {
    if (!node.is_string()) fail(key, "expected a string, found " + type_name(node));
    return node.as_string()->get();
  }

  std::string required_string(const toml::table& t, std::string_view name, const std::string& key) const {
    const toml::node* node = t.get(name);
    if (node == nullptr) fail(key, "missing required key");
    return string(*node, key);
  }

  std::optional<std::string> optional_string(const toml::table& t, std::string_view name,
                                             const std::string& key) const {
    const toml::node* node = t.get(name);
    if (node == nullptr) return std::nullopt;
    return string(*node, key);
  }

  // An expression given as a string, or as an integer literal for convenience.
  std::string expression_text(const toml::node& node, const std::string& key) const {
    if (node.is_integer()) return std::to_string(node.as_integer()->get());
    if (!node.is_string()) fail(key, "expected an expression string, found " + type_name(node));
    std::string text = node.as_string()->get();
    if (text.find_first_not_of(" \t") == std::string::npos) fail(key, "empty expression");
    if (text.size() > SpecLimits::max_expression_bytes) {
      too_large(key, ::ktune::too_large(text.size(), SpecLimits::max_expression_bytes,
                                        "bytes in one expression", "max_expression_bytes"));
    }
    return text;
  }

  const toml::array& array(const toml::node& node, const std::string& key) const {
    if (!node.is_array()) fail(key, "expected an array, found " + type_name(node));
    return *node.as_array();
  }

  std::vector<std::string> string_array(const toml::node& node, const std::string& key) const {
    std::vector<std::string> out;
    const toml::array& items = array(node, key);
    for (std::size_t i = 0; i < items.size(); ++i) {
      out.push_back(string(*items.get(i), key + "[" + std::to_string(i) + "]"));
    }
    return out;
  }

  double number(const toml::node& node, const std::string& key) const {
    if (node.is_floating_point()) return node.as_floating_point()->get();
    if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
    fail(key, "expected a number, found " + type_name(node));
  }

  const std::string& label() const { return m_label; }

private:
  std::string m_label;
};

void read_dtypes(const SpecReader& r, const toml::node& dtypes, KernelSpec& spec);

void read_kernel(const SpecReader& r, const toml::table& root, KernelSpec& spec) {
  const toml::table& kernel = r.table(root, "kernel", "[kernel]");
  r.only_keys(kernel, "[kernel]",
              {"name", "language", "source", "entry", "signature", "shape", "dtypes", "flags",
               "flags_remove", "inplace", "threads"});

  spec.name = r.required_string(kernel, "name", "[kernel].name");
  if (!is_kernel_name(spec.name)) {
    r.fail("[kernel].name", "expected letters, digits, '_', '-' or '.', found " + quote(spec.name));
  }

  const std::string language = r.required_string(kernel, "language", "[kernel].language");
  if (language == "cpp") spec.language = Language::cpp;
  else if (language == "cuda") spec.language = Language::cuda;
  else r.fail("[kernel].language", "expected \"cpp\" or \"cuda\", found " + quote(language));

  spec.source = r.required_string(kernel, "source", "[kernel].source");
  if (spec.source.empty()) r.fail("[kernel].source", "expected a file name, found an empty string");
  if (spec.source.front() == '/') {
    r.fail("[kernel].source", "expected a path relative to the spec's directory, found " + quote(spec.source));
  }

  spec.entry = r.required_string(kernel, "entry", "[kernel].entry");
  if (!is_identifier(spec.entry)) r.fail("[kernel].entry", "expected a C identifier, found " + quote(spec.entry));
  if (const toml::node* signature = kernel.get("signature")) {
    spec.signature_text = r.string(*signature, "[kernel].signature");
    spec.signature_line = static_cast<int>(signature->source().begin.line);
    if (spec.signature_text.empty()) {
      r.fail_at(*signature, "[kernel].signature",
                "expected a declaration such as \"void " + spec.entry +
                    "(const float* A, int n)\" or \"source\" (read it from the source), found \"\"");
    }
  }

  const toml::node* shape = kernel.get("shape");
  if (shape == nullptr) r.fail("[kernel].shape", "missing required key");
  spec.shape_dims = r.string_array(*shape, "[kernel].shape");
  if (spec.shape_dims.empty()) r.fail("[kernel].shape", "expected at least one dimension name");
  for (std::size_t i = 0; i < spec.shape_dims.size(); ++i) {
    const std::string key = "[kernel].shape[" + std::to_string(i) + "]";
    const std::string& dim = spec.shape_dims[i];
    if (!is_identifier(dim)) r.fail(key, "expected an identifier, found " + quote(dim));
    if (std::find(spec.shape_dims.begin(), spec.shape_dims.begin() + static_cast<std::ptrdiff_t>(i), dim) !=
        spec.shape_dims.begin() + static_cast<std::ptrdiff_t>(i)) {
      r.fail(key, "duplicate dimension " + quote(dim));
    }
  }

  const toml::node* dtypes = kernel.get("dtypes");
  if (dtypes == nullptr) {
    spec.dtype_axis = false;
  } else {
    read_dtypes(r, *dtypes, spec);
  }

  if (const toml::node* flags = kernel.get("flags")) spec.flags = r.string_array(*flags, "[kernel].flags");
  if (const toml::node* flags = kernel.get("flags_remove")) {
    spec.flags_remove = r.string_array(*flags, "[kernel].flags_remove");
    if (spec.language != Language::cpp && !spec.flags_remove.empty()) {
      r.fail_at(*flags, "[kernel].flags_remove", "removes the host compiler's fixed flags; nvrtc's "
                                                 "are not removable (fix: leave it out)");
    }
    for (std::size_t i = 0; i < spec.flags_remove.size(); ++i) {
      const std::string& flag = spec.flags_remove[i];
      if (flag != "-std=c++17" && flag != "-O3" && flag != "-march=native") {
        r.fail_at(*flags, "[kernel].flags_remove[" + std::to_string(i) + "]",
                  "expected one of the fixed flags -std=c++17, -O3, -march=native, found " + quote(flag));
      }
    }
  }

  if (const toml::node* inplace = kernel.get("inplace")) {
    if (!inplace->is_boolean()) r.fail("[kernel].inplace", "expected a boolean, found " + type_name(*inplace));
    spec.inplace = inplace->as_boolean()->get();
  }
  if (const toml::node* threads = kernel.get("threads")) {
    spec.threads = r.expression_text(*threads, "[kernel].threads");
    if (spec.language != Language::cpp) {
      r.fail_at(*threads, "[kernel].threads", "is for cpp families (a CUDA kernel's threads are its "
                                              "launch geometry; fix: leave it out)");
    }
  }
}

void read_dtypes(const SpecReader& r, const toml::node& dtypes, KernelSpec& spec) {
  spec.dtypes = r.string_array(dtypes, "[kernel].dtypes");
  if (spec.dtypes.empty()) r.fail("[kernel].dtypes", "expected at least one of " + list(k_dtypes));
  for (std::size_t i = 0; i < spec.dtypes.size(); ++i) {
    const std::string key = "[kernel].dtypes[" + std::to_string(i) + "]";
    if (!one_of(spec.dtypes[i], k_dtypes)) {
      r.fail(key, "expected one of " + list(k_dtypes) + ", found " + quote(spec.dtypes[i]));
    }
    if (std::count(spec.dtypes.begin(), spec.dtypes.end(), spec.dtypes[i]) > 1) {
      r.fail(key, "duplicate dtype " + quote(spec.dtypes[i]));
    }
  }
}

void read_params(const SpecReader& r, const toml::table& root, KernelSpec& spec) {
  const toml::table* params = r.optional_table(root, "params", "[params]");
  if (params == nullptr) return;
  if (params->size() > SpecLimits::max_params) {
    r.too_large("[params]", too_large(params->size(), SpecLimits::max_params, "params", "max_params"));
  }
  for (const auto& [name, node] : in_file_order(*params)) {
    const std::string key = "[params]." + name;
    if (!is_identifier(name)) r.fail(key, "expected an identifier as the param name");
    if (std::find(spec.shape_dims.begin(), spec.shape_dims.end(), name) != spec.shape_dims.end()) {
      r.fail(key, "param name clashes with the shape dimension of the same name");
    }
    const toml::array& values = r.array(*node, key);
    if (values.empty()) r.fail(key, "expected a non-empty array of integers");
    if (values.size() > SpecLimits::max_param_values) {
      r.too_large(key, too_large(values.size(), SpecLimits::max_param_values, "values",
                                 "max_param_values"));
    }
    ParamSpec param{name, {}};
    std::unordered_set<std::int64_t> seen;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const toml::node& v = *values.get(i);
      const std::string item_key = key + "[" + std::to_string(i) + "]";
      if (!v.is_integer()) r.fail(item_key, "expected an integer, found " + type_name(v));
      const std::int64_t value = v.as_integer()->get();
      if (!seen.insert(value).second) r.fail(item_key, "duplicate value " + std::to_string(value));
      param.values.push_back(value);
    }
    spec.params.push_back(std::move(param));
  }
}

class ExpressionChecker {
public:
  ExpressionChecker(const SpecReader& reader, const KernelSpec& spec) : m_reader(reader) {
    m_variables = spec.shape_dims;
    for (const auto& p : spec.params) m_variables.push_back(p.name);
  }

  void check(const std::string& text, const std::string& key) const {
    Result<Expr> compiled = Expr::compile(text, m_variables);
    if (!compiled) m_reader.fail(key, compiled.error().message);
  }

  // Metrics may also use elem_bytes.
  void check_metric(const std::string& text, const std::string& key) const {
    std::vector<std::string> variables = m_variables;
    variables.emplace_back(k_elem_bytes);
    Result<Expr> compiled = Expr::compile(text, variables);
    if (!compiled) m_reader.fail(key, compiled.error().message);
  }

private:
  const SpecReader& m_reader;
  std::vector<std::string> m_variables;
};

void read_space(const SpecReader& r, const ExpressionChecker& checker, const toml::table& root,
                KernelSpec& spec) {
  const toml::table* space = r.optional_table(root, "space", "[space]");
  if (space == nullptr) return;
  r.only_keys(*space, "[space]", {"constraints"});
  const toml::node* constraints = space->get("constraints");
  if (constraints == nullptr) return;
  const toml::array& items = r.array(*constraints, "[space].constraints");
  if (items.size() > SpecLimits::max_constraints) {
    r.too_large("[space].constraints", too_large(items.size(), SpecLimits::max_constraints,
                                                 "constraints", "max_constraints"));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string key = "[space].constraints[" + std::to_string(i) + "]";
    const toml::node& item = *items.get(i);
    if (!item.is_string()) r.fail(key, "expected an expression string, found " + type_name(item));
    std::string text = r.expression_text(item, key);
    checker.check(text, key);
    spec.constraints.push_back(std::move(text));
  }
}

void read_launch(const SpecReader& r, const ExpressionChecker& checker, const toml::table& root,
                 KernelSpec& spec) {
  const toml::table* launch = r.optional_table(root, "launch", "[launch]");
  if (launch == nullptr) {
    if (spec.language == Language::cuda) r.fail("[launch]", "missing table (required for language \"cuda\")");
    return;
  }
  r.only_keys(*launch, "[launch]", {"grid", "block", "shared_bytes"});
  LaunchSpec out;
  auto read_dim3 = [&](std::string_view name, std::string (&target)[3]) {
    const std::string key = "[launch]." + std::string(name);
    const toml::node* node = launch->get(name);
    if (node == nullptr) {
      if (spec.language == Language::cuda) r.fail(key, "missing required key");
      return;
    }
    const toml::array& items = r.array(*node, key);
    if (items.size() != 3) {
      r.fail(key, "expected 3 expressions (x, y, z), found " + std::to_string(items.size()));
    }
    for (std::size_t i = 0; i < 3; ++i) {
      const std::string item_key = key + "[" + std::to_string(i) + "]";
      target[i] = r.expression_text(*items.get(i), item_key);
      checker.check(target[i], item_key);
    }
  };
  read_dim3("grid", out.grid);
  read_dim3("block", out.block);
  if (const toml::node* shared = launch->get("shared_bytes")) {
    out.shared_bytes = r.expression_text(*shared, "[launch].shared_bytes");
    checker.check(out.shared_bytes, "[launch].shared_bytes");
  }
  spec.launch = std::move(out);
}

ArgKind read_arg_kind(const SpecReader& r, const toml::table& t, const std::string& where) {
  const std::string kind = r.required_string(t, "kind", where + ".kind");
  if (kind == "in") return ArgKind::in;
  if (kind == "out") return ArgKind::out;
  if (kind == "inout") return ArgKind::inout;
  if (kind != "scalar") r.fail(where + ".kind", "expected one of in, out, inout, scalar, found " + quote(kind));
  return ArgKind::scalar;
}

// A scalar arg's value expression (count and init are a buffer's).
void read_scalar_arg(const SpecReader& r, const ExpressionChecker& checker, const toml::table& t,
                     const std::string& where, ArgSpec& arg) {
  if (t.contains("count")) r.fail(where + ".count", "not allowed for a scalar argument (use 'value')");
  if (t.contains("init")) r.fail(where + ".init", "not allowed for a scalar argument");
  const toml::node* value = t.get("value");
  if (value == nullptr) r.fail(where + ".value", "missing required key for a scalar argument");
  arg.value = r.expression_text(*value, where + ".value");
  checker.check(arg.value, where + ".value");
}

// A buffer arg's init: a known form; a file relative to the spec, never for an out buffer.
void read_buffer_init(const SpecReader& r, const toml::table& t, const std::string& where, ArgSpec& arg) {
  auto init = r.optional_string(t, "init", where + ".init");
  if (!init) return;
  const auto parsed = parse_buffer_init(*init);
  if (!parsed) {
    r.fail_at(*t.get("init"), where + ".init",
              "expected uniform, normal, uniform(lo, hi) with lo < hi, normal(mean, std) "
              "with std >= 0, zero, ones, index or file:PATH, found " + quote(*init));
  }
  if (parsed->kind == InitKind::file) {
    if (parsed->path.front() == '/') {
      r.fail_at(*t.get("init"), where + ".init",
                "expected file:PATH with PATH relative to the spec's directory, found " + quote(*init));
    }
    if (arg.kind == ArgKind::out) {
      r.fail_at(*t.get("init"), where + ".init",
                "an out buffer is not filled (fix: make it inout, or drop init)");
    }
  }
  arg.init = *init;
}

// A buffer arg's count expression, init and seed (value is a scalar's).
void read_buffer_arg(const SpecReader& r, const ExpressionChecker& checker, const toml::table& t,
                     const std::string& where, ArgSpec& arg) {
  if (t.contains("value")) r.fail(where + ".value", "not allowed for a buffer argument (use 'count')");
  const toml::node* count = t.get("count");
  if (count == nullptr) r.fail(where + ".count", "missing required key for a buffer argument");
  arg.count = r.expression_text(*count, where + ".count");
  checker.check(arg.count, where + ".count");
  read_buffer_init(r, t, where, arg);
  if (const toml::node* seed = t.get("seed")) {
    if (!seed->is_integer() || seed->as_integer()->get() < 0) {
      r.fail_at(*seed, where + ".seed", "expected an integer >= 0, found " + type_name(*seed));
    }
    if (arg.kind == ArgKind::out) {
      r.fail_at(*seed, where + ".seed", "an out buffer is not filled (fix: move it to an input)");
    }
    arg.seed = seed->as_integer()->get();
  }
}

// An output's checks: its expected file (relative to the spec) and its tolerances.
void read_arg_checks(const SpecReader& r, const toml::table& t, const std::string& where, ArgSpec& arg) {
  const bool output = arg.kind == ArgKind::out || arg.kind == ArgKind::inout;
  if (const toml::node* expected = t.get("expected")) {
    arg.expected = r.string(*expected, where + ".expected");
    if (!output) {
      r.fail_at(*expected, where + ".expected", "only an out or inout argument has expected values");
    }
    if (arg.expected.empty() || arg.expected.front() == '/') {
      r.fail_at(*expected, where + ".expected",
                "expected a path relative to the spec's directory, found " + quote(arg.expected));
    }
  }
  for (auto [name, target] : {std::pair{"rtol", &arg.rtol}, std::pair{"atol", &arg.atol}}) {
    const toml::node* node = t.get(name);
    if (node == nullptr) continue;
    const std::string key = where + "." + name;
    if (!output) {
      r.fail_at(*node, key, "a tolerance applies to an out or inout argument; '" + arg.name +
                                "' is " + std::string(to_string(arg.kind)) +
                                " (fix: move it to an output or to [check])");
    }
    *target = r.number(*node, key);
    if (!std::isfinite(*target) || *target < 0) {
      r.fail_at(*node, key, "expected a finite number >= 0, found " + std::to_string(*target));
    }
  }
}

// args[i], its name new among `earlier`.
ArgSpec read_arg(const SpecReader& r, const ExpressionChecker& checker, const toml::array& items,
                 std::size_t i, const std::vector<ArgSpec>& earlier) {
  const std::string where = "args[" + std::to_string(i) + "]";
  const toml::table& t = *items.get(i)->as_table();
  r.only_keys(t, where, {"name", "kind", "count", "init", "value", "dtype", "rtol", "atol",
                         "seed", "expected"});
  ArgSpec arg;
  arg.line = static_cast<int>((t.contains("dtype") ? t.get("dtype") : items.get(i))->source().begin.line);
  arg.name = r.required_string(t, "name", where + ".name");
  if (!is_identifier(arg.name)) r.fail(where + ".name", "expected an identifier, found " + quote(arg.name));
  for (const auto& other : earlier) {
    if (other.name == arg.name) r.fail(where + ".name", "duplicate argument name " + quote(arg.name));
  }
  arg.kind = read_arg_kind(r, t, where);
  if (arg.kind == ArgKind::scalar) {
    read_scalar_arg(r, checker, t, where, arg);
  } else {
    read_buffer_arg(r, checker, t, where, arg);
  }
  if (auto dtype = r.optional_string(t, "dtype", where + ".dtype")) {
    if (!one_of(*dtype, k_dtypes)) {
      r.fail(where + ".dtype", "expected one of " + list(k_dtypes) + ", found " + quote(*dtype));
    }
    arg.dtype = *dtype;
  }
  read_arg_checks(r, t, where, arg);
  return arg;
}

void read_args(const SpecReader& r, const ExpressionChecker& checker, const toml::table& root,
               KernelSpec& spec) {
  const toml::node* args = root.get("args");
  if (args == nullptr) r.fail("[[args]]", "missing: a kernel needs at least one out or inout argument");
  if (!args->is_array_of_tables()) {
    r.fail("[[args]]", "expected an array of tables ([[args]]), found " + type_name(*args));
  }
  const toml::array& items = *args->as_array();
  if (items.size() > SpecLimits::max_args) {
    r.too_large("[[args]]", too_large(items.size(), SpecLimits::max_args, "args", "max_args"));
  }
  for (std::size_t i = 0; i < items.size(); ++i) spec.args.push_back(read_arg(r, checker, items, i, spec.args));
  const bool has_output = std::any_of(spec.args.begin(), spec.args.end(), [](const ArgSpec& a) {
    return a.kind == ArgKind::out || a.kind == ArgKind::inout;
  });
  if (!has_output) r.fail("[[args]]", "expected at least one argument of kind out or inout, found none");
}

void read_metrics(const SpecReader& r, const ExpressionChecker& checker, const toml::table& root,
                  KernelSpec& spec) {
  const toml::table* metrics = r.optional_table(root, "metrics", "[metrics]");
  if (metrics == nullptr) return;
  r.only_keys(*metrics, "[metrics]", {"flops", "bytes"});
  if (const toml::node* flops = metrics->get("flops")) {
    spec.flops = r.expression_text(*flops, "[metrics].flops");
    checker.check_metric(spec.flops, "[metrics].flops");
  }
  if (const toml::node* bytes = metrics->get("bytes")) {
    spec.bytes = r.expression_text(*bytes, "[metrics].bytes");
    checker.check_metric(spec.bytes, "[metrics].bytes");
  }
}

// [check].reference: its kind; with "files", every output must name its expected file.
void read_reference_kind(const SpecReader& r, const toml::node& reference, KernelSpec& spec) {
  const std::string kind = r.string(reference, "[check].reference");
  spec.check.line = static_cast<int>(reference.source().begin.line);
  if (kind == "default") spec.check.reference = ReferenceKind::default_config;
  else if (kind == "function") spec.check.reference = ReferenceKind::function;
  else if (kind == "none") spec.check.reference = ReferenceKind::none;
  else if (kind == "files") spec.check.reference = ReferenceKind::files;
  else {
    r.fail_at(reference, "[check].reference",
              "expected \"default\" (the [default] config), \"function\" (with source and "
              "function), \"files\" (an expected file per output) or \"none\", found " +
                  quote(kind));
  }
  if (spec.check.reference != ReferenceKind::files) return;
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    const ArgSpec& arg = spec.args[i];
    if ((arg.kind == ArgKind::out || arg.kind == ArgKind::inout) && arg.expected.empty()) {
      r.fail_at(reference, "args[" + std::to_string(i) + "].expected",
                "missing: reference = \"files\" needs each output's file (fix: add expected = "
                "\"expected/" + arg.name + "_{shape}.npy\" to '" + arg.name + "')");
    }
  }
}

// A reference function: its name and source (relative to the spec), for a cpp family with a
// typed signature. `at` is where a missing key is reported.
void read_reference_function(const SpecReader& r, const toml::node& at, const toml::node* source,
                             const toml::node* function, KernelSpec& spec) {
  if (function == nullptr) {
    r.fail_at(at, "[check].function",
              "missing: reference = \"function\" needs the reference's name (fix: add "
              "function = \"" + spec.entry + "_reference\" and source = \"reference.cpp\")");
  }
  if (source == nullptr) {
    r.fail_at(at, "[check].source",
              "missing: reference = \"function\" needs the source that defines it (fix: add "
              "source = \"reference.cpp\", relative to this file)");
  }
  spec.check.function = r.string(*function, "[check].function");
  spec.check.line = static_cast<int>(function->source().begin.line);
  if (!is_identifier(spec.check.function)) {
    r.fail_at(*function, "[check].function", "expected a C identifier, found " + quote(spec.check.function));
  }
  spec.check.source = r.string(*source, "[check].source");
  if (spec.check.source.empty() || spec.check.source.front() == '/') {
    r.fail_at(*source, "[check].source",
              "expected a path relative to the spec's directory, found " + quote(spec.check.source));
  }
  if (spec.language != Language::cpp) {
    r.fail_at(at, "[check].reference",
              "a reference function is supported for language \"cpp\" only (fix: use "
              "reference = \"default\")");
  }
  if (spec.signature_text.empty()) {
    r.fail_at(at, "[check].reference",
              "a reference function is called through the typed signature (fix: add [kernel] "
              "signature = \"source\" or the declaration)");
  }
}

void read_check(const SpecReader& r, const toml::table& root, KernelSpec& spec) {
  const toml::table* check = r.optional_table(root, "check", "[check]");
  if (check == nullptr) return;
  r.only_keys(*check, "[check]", {"reference", "source", "function", "rtol", "atol"});
  const toml::node* reference = check->get("reference");
  const toml::node* source = check->get("source");
  const toml::node* function = check->get("function");
  if (reference != nullptr) {
    read_reference_kind(r, *reference, spec);
  } else if (function != nullptr) {
    spec.check.reference = ReferenceKind::function;
  }
  if (spec.check.reference == ReferenceKind::function) {
    read_reference_function(r, reference != nullptr ? *reference : *function, source, function, spec);
  } else {
    for (const toml::node* node : {source, function}) {
      if (node != nullptr) {
        r.fail_at(*node, node == source ? "[check].source" : "[check].function",
                  "only used with reference = \"function\"");
      }
    }
  }
  auto tolerance = [&](std::string_view name, double& target) {
    const toml::node* node = check->get(name);
    if (node == nullptr) return;
    const std::string key = "[check]." + std::string(name);
    const double value = r.number(*node, key);
    if (!std::isfinite(value) || value < 0) {
      r.fail(key, "expected a finite number >= 0, found " + std::to_string(value));
    }
    target = value;
  };
  tolerance("rtol", spec.check.rtol);
  tolerance("atol", spec.check.atol);
}

void read_default(const SpecReader& r, const toml::table& root, KernelSpec& spec) {
  const toml::table* defaults = r.optional_table(root, "default", "[default]");
  if (defaults == nullptr) {
    if (!spec.params.empty()) r.fail("[default]", "missing table (a value for every param is required)");
    return;
  }
  std::unordered_set<std::string_view> declared_names;
  for (const auto& param : spec.params) declared_names.insert(param.name);
  for (const auto& [name, node] : in_file_order(*defaults)) {
    if (declared_names.count(name) == 0) r.fail("[default]." + name, "unknown param (not declared in [params])");
  }
  for (const auto& param : spec.params) {
    const std::string key = "[default]." + param.name;
    const toml::node* node = defaults->get(param.name);
    if (node == nullptr) r.fail(key, "missing: every param needs a default value");
    if (!node->is_integer()) r.fail(key, "expected an integer, found " + type_name(*node));
    const std::int64_t value = node->as_integer()->get();
    if (std::find(param.values.begin(), param.values.end(), value) == param.values.end()) {
      std::string declared;
      for (auto v : param.values) {
        if (declared.size() > 200) {
          declared += ", ... (" + std::to_string(param.values.size()) + " values)";
          break;
        }
        declared += (declared.empty() ? "" : ", ") + std::to_string(v);
      }
      r.fail(key, "expected one of the declared values [" + declared + "], found " + std::to_string(value));
    }
    spec.default_config.emplace_back(param.name, value);
  }
}

void read_buffers(const SpecReader& r, const toml::table& root, KernelSpec& spec) {
  const toml::table* buffers = r.optional_table(root, "buffers", "[buffers]");
  if (buffers == nullptr) return;
  r.only_keys(*buffers, "[buffers]", {"alignment", "offset"});
  if (const toml::node* node = buffers->get("alignment")) {
    const std::int64_t value = node->is_integer() ? node->as_integer()->get() : 0;
    if (value < 1 || value > 4096 || (value & (value - 1)) != 0) {
      r.fail_at(*node, "[buffers].alignment", "expected a power of two from 1 to 4096 (bytes)");
    }
    spec.buffer_alignment = value;
  }
  if (const toml::node* node = buffers->get("offset")) {
    const std::int64_t value = node->is_integer() ? node->as_integer()->get() : -1;
    if (value < 0 || value >= spec.buffer_alignment) {
      r.fail_at(*node, "[buffers].offset", "expected bytes from 0 to alignment - 1 (" +
                                               std::to_string(spec.buffer_alignment - 1) + ")");
    }
    spec.buffer_offset = value;
  }
}

// A family without a dtype axis is keyed by the element type of its first output.
Result<void> settle_dtype_axis(const std::string& label, KernelSpec& spec) {
  if (spec.dtype_axis) return {};
  const auto output = std::find_if(spec.args.begin(), spec.args.end(), [](const ArgSpec& a) {
    return a.kind == ArgKind::out || a.kind == ArgKind::inout;
  });
  if (output == spec.args.end()) return {};  // read_args already failed
  if (output->dtype.empty()) {
    return make_error(ErrorCode::spec_error, label + ":" + std::to_string(output->line) + ": args[" +
                                        std::to_string(output - spec.args.begin()) + "].dtype: "
           "a family without [kernel].dtypes needs its buffers typed (fix: add dtype = \"f32\" "
           "to '" + output->name + "', declare [kernel].signature, or add [kernel].dtypes)");
  }
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    if (spec.args[i].kind != ArgKind::scalar && spec.args[i].dtype.empty()) {
      return make_error(ErrorCode::spec_error, label + ":" + std::to_string(spec.args[i].line) +
                                          ": args[" + std::to_string(i) + "].dtype: a family "
                                          "without [kernel].dtypes needs every buffer typed; '" +
                                          spec.args[i].name + "' has no dtype (fix: add a dtype "
                                          "key or [kernel].dtypes)");
    }
  }
  spec.dtypes = {output->dtype};
  return {};
}

// The kind an arg declares against its parameter: a buffer is a pointer, a scalar is not, and a
// written buffer is not const. `where` starts the message, `declares` quotes the declaration.
Result<void> check_param_kind(const ArgSpec& arg, const SignatureParam& param, const std::string& where,
                              const std::string& declares) {
  const bool buffer = arg.kind != ArgKind::scalar;
  if (buffer && !param.pointer) {
    return make_error(ErrorCode::spec_error, where + "kind = \"" + std::string(to_string(arg.kind)) +
                                                 "\" is a buffer but " + declares +
                                                 ", a scalar; fix: kind = \"scalar\" with a value");
  }
  if (!buffer && param.pointer) {
    return make_error(ErrorCode::spec_error, where + "kind = \"scalar\" but " + declares +
                                                 ", a buffer; fix: kind = \"in\", \"out\" or \"inout\" "
                                                 "with a count");
  }
  if (buffer && arg.kind != ArgKind::in && param.const_data) {
    return make_error(ErrorCode::spec_error, where + "kind = \"" + std::string(to_string(arg.kind)) +
                                                 "\" but " + declares +
                                                 ", which it cannot write; fix: kind = \"in\", or drop "
                                                 "the const");
  }
  return {};
}

// The arg's dtype against the parameter's type: an untyped parameter (KTUNE_DTYPE) takes the
// job's dtype; a typed one types an untyped arg of the kernel, and must agree with a typed one.
Result<void> check_param_dtype(ArgSpec& arg, const SignatureParam& param, const KernelSpec& spec,
                               SignatureUse use, const std::string& where, const std::string& declares) {
  if (param.dtype.empty()) {
    if (!arg.dtype.empty()) {
      return make_error(ErrorCode::spec_error, where + "dtype = \"" + arg.dtype + "\" but " + declares +
                                                   " (the job's dtype); fix: leave dtype out, or "
                                                   "declare the type");
    }
    if (!spec.dtype_axis) {
      return make_error(ErrorCode::spec_error, where + declares + " but the family has no [kernel].dtypes "
                                                   "to define KTUNE_DTYPE; fix: add dtypes = [\"f32\"]");
    }
    return {};
  }
  if (arg.dtype.empty()) {
    if (use == SignatureUse::kernel) {
      arg.dtype = param.dtype;
      return {};
    }
    return make_error(ErrorCode::spec_error, where + "the kernel takes the job's dtype but " + declares +
                                                 " (" + param.dtype + "); fix: declare it with KTUNE_DTYPE");
  }
  if (arg.dtype != param.dtype) {
    return make_error(ErrorCode::spec_error, where + "dtype = \"" + arg.dtype + "\" but " + declares +
                                                 " (" + param.dtype + "); fix: write dtype = \"" +
                                                 param.dtype + "\", or leave dtype out and the "
                                                 "declaration types it");
  }
  return {};
}

} // namespace

Result<void> apply_signature(KernelSpec& spec, const Signature& signature,
                             std::string_view file_label, std::string_view declared_at,
                             SignatureUse use) {
  const std::string label(file_label);
  const std::string decl = std::string(declared_at);
  const auto at_line = [&](int line) {
    return label + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": ";
  };
  const std::string function_key =
      use == SignatureUse::kernel ? "[kernel].signature" : "[check].function";
  if (signature.params.size() != spec.args.size()) {
    std::string names;
    for (const auto& p : signature.params) names += (names.empty() ? "" : ", ") + p.written();
    return make_error(ErrorCode::spec_error,
                      at_line(use == SignatureUse::kernel ? spec.signature_line : spec.check.line) +
                          function_key + ": the spec has " + std::to_string(spec.args.size()) +
                          " [[args]] but " + decl + " declares " +
                          std::to_string(signature.params.size()) + " parameters (" + names +
                          "); fix: one [[args]] entry per parameter, in the declaration's order");
  }
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    ArgSpec& arg = spec.args[i];
    const SignatureParam& param = signature.params[i];
    const std::string where =
        at_line(arg.line) + "args[" + std::to_string(i) + "] '" + arg.name + "': ";
    const std::string declares = decl + " declares '" + param.written() + "'";
    if (!param.name.empty() && param.name != arg.name) {
      return make_error(ErrorCode::spec_error, where + "parameter " + std::to_string(i + 1) + " of " +
                                          signature.name + " is named '" + param.name + "' (" +
                                          declares + "); fix: list [[args]] in the declaration's "
                                          "order, with its names");
    }
    if (auto kind = check_param_kind(arg, param, where, declares); !kind) return kind.error();
    if (auto dtype = check_param_dtype(arg, param, spec, use, where, declares); !dtype) return dtype.error();
  }
  if (use == SignatureUse::kernel) {
    spec.signature = signature;
    return settle_dtype_axis(label, spec);
  }
  return {};
}

Result<KernelSpec> parse_kernel_spec(std::string_view toml_text, std::string_view file_label) {
  const std::string label(file_label);
  if (toml_text.size() > SpecLimits::max_spec_bytes) {
    return make_error(ErrorCode::spec_too_large, label + ": " + too_large(toml_text.size(),
                                                                 SpecLimits::max_spec_bytes,
                                                                 "bytes", "max_spec_bytes"));
  }
  toml::table root;
  try {
    root = toml::parse(toml_text, label);
  } catch (const toml::parse_error& error) {
    const auto& at = error.source().begin;
    return make_error(ErrorCode::spec_error, clipped(label + ":" + std::to_string(at.line) + ":" +
                                            std::to_string(at.column) + ": " +
                                            std::string(error.description())));
  }

  const SpecReader reader(label);
  KernelSpec spec;
  try {
    reader.only_keys(root, "", {"kernel", "params", "space", "launch", "args", "metrics", "check",
                                "default", "buffers"});
    read_kernel(reader, root, spec);
    read_params(reader, root, spec);
    const ExpressionChecker checker(reader, spec);
    read_space(reader, checker, root, spec);
    read_launch(reader, checker, root, spec);
    read_args(reader, checker, root, spec);
    read_metrics(reader, checker, root, spec);
    if (!spec.threads.empty() && spec.threads != k_all_threads) checker.check(spec.threads, "[kernel].threads");
    read_check(reader, root, spec);
    for (std::size_t i = 0; i < spec.args.size(); ++i) {
      if (!spec.args[i].expected.empty() && spec.check.reference != ReferenceKind::files) {
        reader.fail("args[" + std::to_string(i) + "].expected",
                    "only used with [check] reference = \"files\" (fix: add it, or drop expected)");
      }
    }
    read_default(reader, root, spec);
    read_buffers(reader, root, spec);
    if (!spec.signature_text.empty() && spec.signature_text != "source") {
      auto signature = parse_signature(spec.signature_text);
      if (!signature) {
        return make_error(ErrorCode::spec_error, label + ":" + std::to_string(spec.signature_line) +
                                            ": [kernel].signature: " + signature.error().message);
      }
      if (signature->name != spec.entry) {
        reader.fail("[kernel].signature", "declares '" + signature->name + "' but entry is '" +
                                              spec.entry + "' (fix: make them the same)");
      }
      auto applied = apply_signature(spec, *signature, label, "[kernel].signature", SignatureUse::kernel);
      if (!applied) return applied.error();
    }
    if (spec.signature_text.empty()) {
      if (auto settled = settle_dtype_axis(label, spec); !settled) return settled.error();
    }
  } catch (const SpecFailure& failure) {
    return make_error(failure.code, failure.message);
  }
  return spec;
}

} // namespace ktune
