#pragma once
// Client-supplied text quoted in a message (a name, a shape, a value): cut so that every message
// stays small and every reply linear in what was asked, whatever a client sends.
#include <cstddef>
#include <string>
#include <string_view>

namespace ktune {

inline constexpr std::size_t k_max_quoted = 120;

// `text` itself when it has at most k_max_quoted bytes, else its first k_max_quoted bytes
// followed by "... (N bytes)".
[[nodiscard]] inline std::string clip_quoted(std::string_view text) {
  if (text.size() <= k_max_quoted) return std::string(text);
  return std::string(text.substr(0, k_max_quoted)) + "... (" + std::to_string(text.size()) +
         " bytes)";
}

} // namespace ktune
