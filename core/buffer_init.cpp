#include "core/buffer_init.hpp"

#include <charconv>
#include <cmath>
#include <string>

namespace ktune {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::optional<double> number(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    const std::string copy(text);
    const double value = std::stod(copy, &used);
    if (used != copy.size() || !std::isfinite(value)) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

} // namespace

std::optional<BufferInit> parse_buffer_init(std::string_view text) {
  text = trim(text);
  if (text.starts_with(k_file_init_prefix)) {
    const std::string_view path = text.substr(k_file_init_prefix.size());
    if (trim(path).empty()) return std::nullopt;
    BufferInit init{InitKind::file};
    init.path = std::string(trim(path));
    return init;
  }
  if (text == "zero") return BufferInit{InitKind::zero};
  if (text == "ones") return BufferInit{InitKind::ones};
  if (text == "index") return BufferInit{InitKind::index};
  if (text == "uniform") return BufferInit{InitKind::uniform, -1, 1, false};
  if (text == "normal") return BufferInit{InitKind::normal, 0, 1, false};
  const auto open = text.find('(');
  if (open == std::string_view::npos || text.back() != ')') return std::nullopt;
  const std::string_view name = trim(text.substr(0, open));
  const std::string_view inside = text.substr(open + 1, text.size() - open - 2);
  const auto comma = inside.find(',');
  if (comma == std::string_view::npos) return std::nullopt;
  const auto a = number(inside.substr(0, comma));
  const auto b = number(inside.substr(comma + 1));
  if (!a || !b) return std::nullopt;
  if (name == "uniform" && *a < *b) return BufferInit{InitKind::uniform, *a, *b, true};
  if (name == "normal" && *b >= 0) return BufferInit{InitKind::normal, *a, *b, true};
  return std::nullopt;
}

} // namespace ktune
