#include "replay/file_reader.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace ktune::replay {

namespace {

struct GzCloser {
  void operator()(gzFile file) const noexcept {
    if (file != nullptr) gzclose(file);
  }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

} // namespace

Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes) {
  // gzopen reads plain files transparently.
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) {
    return make_error("io_error", path + ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(file.get(), 1 << 17);
  std::string out;
  constexpr unsigned k_chunk = 1 << 16;
  char buffer[k_chunk];
  while (true) {
    const int n = gzread(file.get(), buffer, k_chunk);
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      return make_error("io_error", path + ": cannot read: " +
                                        (code == Z_ERRNO ? std::string(std::strerror(errno)) : std::string(message)));
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes) {
      return make_error("io_error", path + ": larger than " + std::to_string(max_bytes) + " bytes (decompressed)");
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
  // A gzip stream cut short reads as end of file; gzerror tells the difference.
  int code = 0;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END) return make_error("io_error", path + ": cannot read: " + message);
  return out;
}

} // namespace ktune::replay
