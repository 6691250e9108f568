#pragma once
// Reading recorded result files: plain text or gzip (detected from the content, not the name).
#include "core/result.hpp"

#include <cstddef>
#include <string>

namespace ktune::replay {

// Largest decompressed file read_text_file() accepts by default (the biggest shared cache is
// about 40 MiB of JSON).
inline constexpr std::size_t k_max_file_bytes = std::size_t{1} << 30;

// The whole content of `path`, decompressed when it is gzip. Errors (code "io_error") name the
// path and the reason: missing or unreadable file, corrupt gzip stream, more than `max_bytes`.
[[nodiscard]] Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes = k_max_file_bytes);

} // namespace ktune::replay
