#pragma once
// Files the CLI writes for the user (tables, reports, JUnit XML).
#include "core/result.hpp"

#include <string>

namespace ktune::cli {

// Writes `text` to `path` through a temporary file in the same directory and a rename, so a
// reader never sees half a file. Errors: "io_error" naming the file and the cause; the temporary
// file is removed.
[[nodiscard]] Result<void> write_file_atomic(const std::string& path, const std::string& text);

} // namespace ktune::cli
