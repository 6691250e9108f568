#include "sweep/sweep_file.hpp"
#include "core/file_io.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ktune::sweep {

namespace {

constexpr std::size_t k_max_jobs = 100'000;

class Reader {
public:
  explicit Reader(std::string where) : m_where(std::move(where)) {}

  [[nodiscard]] Error error(const std::string& key, const std::string& message) const {
    return make_error(ErrorCode::sweep_error, m_where + ": " + key + ": " + message);
  }
  [[nodiscard]] Error error_at(const toml::node& node, const std::string& key,
                               const std::string& message) const {
    const auto& at = node.source().begin;
    return make_error(ErrorCode::sweep_error, m_where + ":" + std::to_string(at.line) + ": " + key + ": " +
                                         message);
  }
  [[nodiscard]] const std::string& where() const { return m_where; }

  [[nodiscard]] Result<std::string> string(const toml::node& node, const std::string& key) const {
    if (const auto* v = node.as_string()) return std::string(v->get());
    return error_at(node, key, "expected a string");
  }

  [[nodiscard]] Result<std::vector<std::string>> strings(const toml::node& node,
                                                         const std::string& key) const {
    std::vector<std::string> out;
    if (const auto* v = node.as_string()) {
      out.emplace_back(v->get());
      return out;
    }
    const auto* array = node.as_array();
    if (array == nullptr) return error_at(node, key, "expected a string or a list of strings");
    for (const auto& item : *array) {
      const auto* v = item.as_string();
      if (v == nullptr) return error_at(item, key, "expected a list of strings");
      out.emplace_back(v->get());
    }
    if (out.empty()) return error_at(node, key, "the list is empty");
    return out;
  }

  [[nodiscard]] Result<std::int64_t> integer(const toml::node& node, const std::string& key,
                                             std::int64_t min, std::int64_t max) const {
    const auto* v = node.as_integer();
    if (v == nullptr) return error_at(node, key, "expected an integer");
    const std::int64_t value = v->get();
    if (value < min || value > max) {
      return error_at(node, key, "expected an integer in " + std::to_string(min) + ".." +
                                     std::to_string(max) + ", found " + std::to_string(value));
    }
    return value;
  }

  // A dimension's values: a list of positive integers or a range table.
  [[nodiscard]] Result<std::vector<std::int64_t>> dim_values(const toml::node& node,
                                                             const std::string& key) const {
    std::vector<std::int64_t> out;
    if (const auto* array = node.as_array()) {
      for (const auto& item : *array) {
        auto value = integer(item, key, 1, std::int64_t{1} << 40);
        if (!value) return value.error();
        out.push_back(*value);
      }
      if (out.empty()) return error_at(node, key, "the list is empty");
      return out;
    }
    if (const auto* v = node.as_integer()) {
      auto value = integer(*v, key, 1, std::int64_t{1} << 40);
      if (!value) return value.error();
      return std::vector<std::int64_t>{*value};
    }
    const auto* range = node.as_table();
    if (range == nullptr) {
      return error_at(node, key, "expected a list of sizes, a size, or a range "
                                 "{ from = A, to = B, step = S } / { from = A, to = B, times = F }");
    }
    std::int64_t from = 0, to = 0, step = 0, times = 0;
    for (const auto& [name, value] : *range) {
      const std::string field = key + "." + std::string(name.str());
      Result<std::int64_t> parsed = integer(value, field, 1, std::int64_t{1} << 40);
      if (!parsed) return parsed.error();
      if (name == "from") from = *parsed;
      else if (name == "to") to = *parsed;
      else if (name == "step") step = *parsed;
      else if (name == "times") times = *parsed;
      else return error_at(value, field, "unknown key (expected from, to, step or times)");
    }
    if (from == 0 || to == 0) return error_at(node, key, "a range needs from and to");
    if ((step > 0) == (times > 0)) return error_at(node, key, "a range needs step or times, not both");
    if (times == 1) return error_at(node, key, "times must be at least 2 (the range must advance)");
    if (to < from) return error_at(node, key, "to is below from");
    for (std::int64_t v = from; v <= to; v = step > 0 ? v + step : v * times) {
      out.push_back(v);
      if (out.size() > k_max_jobs) return error_at(node, key, "more than 100000 values");
    }
    return out;
  }

private:
  std::string m_where;
};

Result<void> parse_budget(const toml::node& node, const Reader& reader, SweepJob& job) {
  if (const auto* v = node.as_integer()) {
    auto value = reader.integer(*v, "budget", 1, std::numeric_limits<std::int64_t>::max());
    if (!value) return value.error();
    job.budget = *value;
    return {};
  }
  const auto* text = node.as_string();
  if (text == nullptr) return reader.error_at(node, "budget", "expected a count or a share like \"5%\"");
  const std::string s(text->get());
  if (!s.empty() && s.back() == '%') {
    double percent = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size() - 1, percent);
    if (ec == std::errc() && end == s.data() + s.size() - 1 && percent > 0 && percent <= 100) {
      job.budget_fraction = percent / 100.0;
      return {};
    }
  } else {
    std::int64_t count = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), count);
    if (ec == std::errc() && end == s.data() + s.size() && count >= 1) {
      job.budget = count;
      return {};
    }
  }
  return reader.error_at(node, "budget", "expected a count (e.g. 200) or a share in (0%, 100%], found '" + s + "'");
}

// One [[kernel]] table's keys: the job every entry starts from, its devices and dtypes, and
// its table of shapes.
struct KernelTable {
  SweepJob base;
  std::vector<std::string> devices{"cpu"}, dtypes{"f32"};
  const toml::table* shapes = nullptr;
};

Result<KernelTable> read_kernel_table(const toml::table& table, const std::string& prefix, const Reader& reader) {
  KernelTable out;
  out.base.strategy = "exhaustive";
  for (const auto& [name, node] : table) {
    const std::string key = prefix + "." + std::string(name.str());
    if (name == "name") {
      auto v = reader.string(node, key);
      if (!v) return v.error();
      out.base.kernel = *v;
    } else if (name == "devices") {
      auto v = reader.strings(node, key);
      if (!v) return v.error();
      out.devices = *v;
    } else if (name == "dtypes") {
      auto v = reader.strings(node, key);
      if (!v) return v.error();
      out.dtypes = *v;
    } else if (name == "strategy") {
      auto v = reader.string(node, key);
      if (!v) return v.error();
      out.base.strategy = *v;
    } else if (name == "budget") {
      if (auto r = parse_budget(node, reader, out.base); !r) return r.error();
    } else if (name == "shapes") {
      out.shapes = node.as_table();
      if (out.shapes == nullptr) return reader.error_at(node, key, "expected a table of dimensions");
    } else {
      return reader.error_at(node, key,
                             "unknown key (expected name, devices, dtypes, strategy, budget or shapes)");
    }
  }
  if (out.base.kernel.empty()) return reader.error(prefix, "name is required");
  if (out.shapes == nullptr || out.shapes->empty()) {
    return reader.error(prefix + " (" + out.base.kernel + ")", "shapes is required: [kernel.shapes] M = [...]");
  }
  return out;
}

// Every combination of the dims' values, dims in the order written, the last dim fastest:
// "M=1,N=2" texts.
Result<std::vector<std::string>> shape_grid(const toml::table& shapes, const std::string& prefix,
                                            const Reader& reader) {
  std::vector<std::pair<std::string, const toml::node*>> dims;
  for (const auto& [name, node] : shapes) dims.emplace_back(std::string(name.str()), &node);
  std::stable_sort(dims.begin(), dims.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.second->source().begin;
    const auto& pb = b.second->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  std::vector<std::vector<std::int64_t>> values;
  std::size_t combinations = 1;
  for (const auto& [name, node] : dims) {
    auto v = reader.dim_values(*node, prefix + ".shapes." + name);
    if (!v) return v.error();
    combinations *= v->size();
    if (combinations > k_max_jobs) return reader.error(prefix, "more than 100000 shapes");
    values.push_back(std::move(*v));
  }
  std::vector<std::string> shape_texts;
  std::vector<std::size_t> at(dims.size(), 0);
  for (std::size_t n = 0; n < combinations; ++n) {
    std::string text;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      text += (d == 0 ? "" : ",") + dims[d].first + "=" + std::to_string(values[d][at[d]]);
    }
    shape_texts.push_back(std::move(text));
    for (std::size_t d = dims.size(); d-- > 0;) { // odometer, last dim fastest
      if (++at[d] < values[d].size()) break;
      at[d] = 0;
    }
  }
  return shape_texts;
}

// Appends the jobs of one [[kernel]] table.
Result<void> expand_kernel(const toml::table& table, std::size_t position, const Reader& reader,
                           Sweep& sweep) {
  const std::string prefix = "[[kernel]] #" + std::to_string(position + 1);
  auto kernel = read_kernel_table(table, prefix, reader);
  if (!kernel) return kernel.error();
  auto shape_texts = shape_grid(*kernel->shapes, prefix, reader);
  if (!shape_texts) return shape_texts.error();
  for (const auto& device : kernel->devices) {
    for (const auto& dtype : kernel->dtypes) {
      for (const auto& shape : *shape_texts) {
        SweepJob job = kernel->base;
        job.device = device;
        job.dtype = dtype;
        job.shape = shape;
        job.number = sweep.jobs.size();
        sweep.jobs.push_back(std::move(job));
        if (sweep.jobs.size() > k_max_jobs) return reader.error(prefix, "the sweep has more than 100000 jobs");
      }
    }
  }
  return {};
}

} // namespace

Result<Shard> parse_shard(std::string_view text) {
  const auto bad = [&] {
    return make_error(ErrorCode::bad_shard, "expected a shard as i/N with 1 <= i <= N (e.g. 1/4), found '" +
                                       std::string(text) + "'");
  };
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) return bad();
  Shard shard;
  const auto [a_end, a_ec] = std::from_chars(text.data(), text.data() + slash, shard.index);
  const auto [b_end, b_ec] = std::from_chars(text.data() + slash + 1, text.data() + text.size(), shard.count);
  if (a_ec != std::errc() || b_ec != std::errc() || a_end != text.data() + slash ||
      b_end != text.data() + text.size() || shard.index < 1 || shard.index > shard.count) {
    return bad();
  }
  return shard;
}

Result<Sweep> parse_sweep(std::string_view text, const std::string& where) {
  const Reader reader(where);
  toml::table root;
  try {
    root = toml::parse(text, where);
  } catch (const toml::parse_error& error) {
    const auto& at = error.source().begin;
    return make_error(ErrorCode::sweep_error, where + ":" + std::to_string(at.line) + ":" +
                                         std::to_string(at.column) + ": " +
                                         std::string(error.description()));
  }
  Sweep sweep;
  sweep.name = std::filesystem::path(where).stem().string();
  for (const auto& [name, node] : root) {
    if (name == "sweep") {
      const auto* table = node.as_table();
      if (table == nullptr) return reader.error_at(node, "[sweep]", "expected a table");
      for (const auto& [key, value] : *table) {
        const std::string field = "[sweep]." + std::string(key.str());
        if (key == "name") {
          auto v = reader.string(value, field);
          if (!v) return v.error();
          sweep.name = *v;
        } else if (key == "priority") {
          auto v = reader.integer(value, field, -100, 100);
          if (!v) return v.error();
          sweep.priority = static_cast<int>(*v);
        } else {
          return reader.error_at(value, field, "unknown key (expected name or priority)");
        }
      }
    } else if (name == "kernel") {
      const auto* array = node.as_array();
      if (array == nullptr || !array->is_array_of_tables()) {
        return reader.error_at(node, "kernel", "expected [[kernel]] tables");
      }
      for (std::size_t i = 0; i < array->size(); ++i) {
        if (auto r = expand_kernel(*array->get(i)->as_table(), i, reader, sweep); !r) return r.error();
      }
    } else {
      return reader.error_at(node, std::string(name.str()), "unknown table (expected [sweep] or [[kernel]])");
    }
  }
  if (sweep.jobs.empty()) return reader.error("[[kernel]]", "the sweep has no kernel tables");
  return sweep;
}

Result<Sweep> load_sweep(const std::string& path) {
  auto text = read_file(path);
  if (!text) return make_error(ErrorCode::sweep_error, "cannot read sweep file " + path + " (" + text.error().message + ")");
  return parse_sweep(*text, path);
}

std::vector<SweepJob> shard_jobs(const Sweep& sweep, const Shard& shard) {
  std::vector<SweepJob> out;
  for (const auto& job : sweep.jobs) {
    if (job.number % shard.count == shard.index - 1) out.push_back(job);
  }
  return out;
}

} // namespace ktune::sweep
