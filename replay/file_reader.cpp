#include "replay/file_reader.hpp"

#include <sys/mman.h>
#include <unistd.h>
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

// Reads `file` to its end; `name` (a path or a label) names it in messages.
Result<std::string> read_all(gzFile file, const std::string& name, std::size_t max_bytes) {
  gzbuffer(file, 1 << 17);
  std::string out;
  constexpr unsigned k_chunk = 1 << 16;
  char buffer[k_chunk];
  while (true) {
    const int n = gzread(file, buffer, k_chunk);
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      return make_error(ErrorCode::io_error, name + ": cannot read: " +
                                        (code == Z_ERRNO ? std::string(std::strerror(errno)) : std::string(message)));
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes) {
      return make_error(ErrorCode::io_error, name + ": larger than " + std::to_string(max_bytes) + " bytes (decompressed)");
    }
    out.append(buffer, static_cast<std::size_t>(n));
  }
  // A gzip stream cut short reads as end of file; gzerror tells the difference.
  int code = 0;
  const char* message = gzerror(file, &code);
  if (code != Z_OK && code != Z_STREAM_END) return make_error(ErrorCode::io_error, name + ": cannot read: " + message);
  return out;
}

} // namespace

Result<std::string> read_text_file(const std::string& path, std::size_t max_bytes) {
  // gzopen reads plain files transparently.
  errno = 0;
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) {
    return make_error(ErrorCode::io_error, path + ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  return read_all(file.get(), path, max_bytes);
}

Result<std::string> decode_text(std::string_view bytes, std::string_view label, std::size_t max_bytes) {
  // The bytes go through an anonymous in-memory file so that they are read by exactly the code
  // that reads files from disk (gzip detection, concatenated members, truncation errors).
  const std::string name(label);
  const int fd = memfd_create("ktune-record", MFD_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::io_error, name + ": cannot create an in-memory file: " + std::strerror(errno));
  for (std::size_t written = 0; written < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "nothing written";
      close(fd);
      return make_error(ErrorCode::io_error, name + ": cannot buffer " + std::to_string(bytes.size()) + " bytes: " + reason);
    }
    written += static_cast<std::size_t>(n);
  }
  if (lseek(fd, 0, SEEK_SET) != 0) {
    const std::string reason = std::strerror(errno);
    close(fd);
    return make_error(ErrorCode::io_error, name + ": cannot rewind the in-memory file: " + reason);
  }
  GzFile file(gzdopen(fd, "rb")); // owns fd from here on
  if (!file) {
    close(fd);
    return make_error(ErrorCode::io_error, name + ": cannot open: out of memory");
  }
  return read_all(file.get(), name, max_bytes);
}

} // namespace ktune::replay
