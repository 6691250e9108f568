#include "cli/output_file.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ktune::cli {

Result<void> write_file_atomic(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(ErrorCode::io_error, "cannot create " + temp);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temp, ignored);
      return make_error(ErrorCode::io_error, "cannot write " + temp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    return make_error(ErrorCode::io_error, "cannot rename " + temp + " to " + path + ": " + ec.message());
  }
  return {};
}

} // namespace ktune::cli
