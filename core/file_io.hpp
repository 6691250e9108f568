#pragma once
// Whole files, read and written: the one reader of a whole file, the one atomic writer
// (temp file + rename, as ccache's AtomicFile), and the first line of a log.
//
// With safe_fs.hpp, an exception to core's "no I/O". These work on plain paths the caller
// chose (a kernel source, a spec, a table the user names); files in ktune's own directories go
// through SafeDir (core/safe_fs.hpp), which adds the ownership checks. Thread-safe: no state.
#include "core/result.hpp"

#include <string>
#include <string_view>

namespace ktune {

// The bytes of the file at `path`. Errors: io_error "cannot read <path>: <system reason>"
// (missing, unreadable, a directory, a read error).
[[nodiscard]] Result<std::string> read_file(const std::string& path);

// A file replaced all at once: writes go to a temp file beside `path` (same directory, so the
// rename cannot cross file systems), commit() flushes it and renames it over `path`. Until then
// readers see the old file or none; a reader never sees half a file. Destroyed without a
// successful commit(), the temp file is removed and `path` is untouched. Not thread-safe.
class AtomicFile {
public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view text) { m_text.append(text); }

  // Writes the temp file, fsyncs it, renames it over path(). Errors: io_error naming the temp
  // file or the rename and the system's reason (the temp file is then removed).
  [[nodiscard]] Result<void> commit();

  [[nodiscard]] const std::string& path() const { return m_path; }

private:
  std::string m_path;
  std::string m_temp;
  std::string m_text;
  bool m_created = false;
};

// AtomicFile in one call: `path` holds `text`, or is as it was. Errors as AtomicFile::commit.
[[nodiscard]] Result<void> write_file_atomic(const std::string& path, std::string_view text);

// fsync of `fd`, retried on EINTR. False on an error (errno set).
[[nodiscard]] bool sync_fd(int fd);
// Writes all of `text` to `fd`, retrying short writes and EINTR. False on an error (errno set).
[[nodiscard]] bool write_all_fd(int fd, std::string_view text);

// Whether first_line says that more lines follow.
enum class MoreLines { drop, mark };

// The first line of `text` that is not blank (a compiler log may start with an empty line),
// without its line end; "" when there is none. With MoreLines::mark, " ..." is appended when
// another non-blank line follows (a one-line summary of a longer message).
[[nodiscard]] std::string first_line(std::string_view text, MoreLines more = MoreLines::drop);

} // namespace ktune
