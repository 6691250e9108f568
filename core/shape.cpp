#include "core/shape.hpp"

#include "core/quote.hpp"

#include <charconv>

namespace ktune {
namespace {

constexpr std::int64_t k_max_dim_value = std::int64_t{1} << 40;
// Shapes name a kernel's dimensions: a handful. The bounds keep parsing (and every message that
// quotes a shape) linear and small whatever a client sends.
constexpr std::size_t k_max_dims = 64;

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

bool is_identifier(std::string_view name) {
  if (name.empty()) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (!alpha(name.front())) return false;
  for (char c : name) {
    if (!alpha(c) && !digit(c)) return false;
  }
  return true;
}

Error shape_error(std::string_view text, const std::string& reason) {
  return make_error(ErrorCode::bad_shape, "shape '" + clip_quoted(text) + "': " + reason);
}

} // namespace

Result<Shape> Shape::parse(std::string_view text) {
  if (trim(text).empty()) return shape_error(text, "empty shape, expected NAME=VALUE,...");
  Shape shape;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const std::string_view raw =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (shape.dims.size() == k_max_dims) {
      return shape_error(text, "more than " + std::to_string(k_max_dims) + " dimensions");
    }
    const std::string_view item = trim(raw);
    const std::string quoted = "item '" + clip_quoted(item) + "'";
    if (item.empty()) return shape_error(text, "empty item, expected NAME=VALUE");
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) return shape_error(text, quoted + ": missing '=', expected NAME=VALUE");
    const std::string_view name = trim(item.substr(0, eq));
    const std::string_view value_text = trim(item.substr(eq + 1));
    if (!is_identifier(name)) {
      return shape_error(text, quoted + ": bad name '" + clip_quoted(name) +
                                   "', expected letters, digits and '_', not starting with a digit");
    }
    std::int64_t value = 0;
    const char* end = value_text.data() + value_text.size();
    const auto [ptr, ec] = std::from_chars(value_text.data(), end, value);
    if (value_text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
      return shape_error(text, quoted + ": value '" + clip_quoted(value_text) + "' is not an integer");
    }
    if (ec == std::errc::result_out_of_range) {
      if (value_text.front() == '-') return shape_error(text, quoted + ": value must be positive");
      return shape_error(text, quoted + ": value exceeds 2^40 (" + std::to_string(k_max_dim_value) + ")");
    }
    if (value <= 0) return shape_error(text, quoted + ": value must be positive, got " + std::to_string(value));
    if (value > k_max_dim_value) {
      return shape_error(text, quoted + ": value exceeds 2^40 (" + std::to_string(k_max_dim_value) + ")");
    }
    if (shape.get(name)) return shape_error(text, quoted + ": duplicate dimension '" + clip_quoted(name) + "'");
    shape.dims.emplace_back(std::string(name), value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return shape;
}

std::string Shape::to_string() const {
  std::string out;
  for (const auto& [name, value] : dims) {
    if (!out.empty()) out += ',';
    out += name;
    out += '=';
    out += std::to_string(value);
  }
  return out;
}

std::optional<std::int64_t> Shape::get(std::string_view name) const {
  for (const auto& [dim, value] : dims) {
    if (dim == name) return value;
  }
  return std::nullopt;
}

Result<Shape> conform_shape(const Shape& shape, const std::vector<std::string>& dims,
                            std::string_view kernel_name) {
  auto expected = [&] {
    std::string list;
    for (const auto& d : dims) list += (list.empty() ? "" : ",") + d;
    return list;
  };
  for (const auto& [name, value] : shape.dims) {
    bool declared = false;
    for (const auto& d : dims) declared = declared || d == name;
    if (!declared) {
      return make_error(ErrorCode::bad_shape, "shape '" + shape.to_string() + "': kernel '" +
                                         std::string(kernel_name) + "' has no dimension '" + name +
                                         "' (expected " + expected() + ")");
    }
  }
  Shape conformed;
  for (const auto& d : dims) {
    const auto value = shape.get(d);
    if (!value) {
      return make_error(ErrorCode::bad_shape, "shape '" + shape.to_string() + "': missing dimension '" + d +
                                         "' of kernel '" + std::string(kernel_name) + "' (expected " +
                                         expected() + ")");
    }
    conformed.dims.emplace_back(d, *value);
  }
  return conformed;
}

} // namespace ktune
