#pragma once
// Reading recorded result files: plain text or gzip (detected from the content, not the name).
#include "core/result.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace ktune::replay {

// Largest decompressed file read_text_file() accepts by default (the biggest shared cache is
// about 40 MiB of JSON).
inline constexpr std::size_t k_max_file_bytes = std::size_t{1} << 30;

// The whole content of `path`, decompressed when it is gzip. Errors (code "io_error") name the
// path and the reason: missing or unreadable file, corrupt gzip stream, more than `max_bytes`.
[[nodiscard]] Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes = k_max_file_bytes);

// The same for a file's bytes already in memory: `bytes` decompressed when they are gzip, else
// returned as they are. Errors as read_text_file's, naming `label` instead of a path.
[[nodiscard]] Result<std::string> decode_text(std::string_view bytes, std::string_view label,
                                              std::size_t max_bytes = k_max_file_bytes);

} // namespace ktune::replay
