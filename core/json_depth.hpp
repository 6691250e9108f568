#pragma once
// How deeply a JSON text nests, measured without building a tree: copying, dumping or destroying
// a nlohmann::json recurses once per level, so untrusted input is checked before it is walked
// (a 1 MiB line can nest 500,000 levels and overflow the stack).
#include <cstddef>
#include <string_view>

namespace ktune {

// The deepest nesting of arrays and objects in `text` (brackets inside strings do not count). Any
// text is accepted; for invalid JSON the figure is an estimate, never a crash.
[[nodiscard]] std::size_t json_nesting_depth(std::string_view text);

} // namespace ktune
