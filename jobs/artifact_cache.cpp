#include "jobs/artifact_cache.hpp"

#include "core/hash.hpp"
#include "core/safe_fs.hpp"
#include "core/unique_fd.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <cctype>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace ktune {

namespace {

constexpr std::string_view k_hash_name = "xxh3-128";
constexpr std::int64_t k_stale_temp_s = 3600;

Error io_error(const std::string& what, const std::string& path, int err) {
  return make_error(ErrorCode::io_error, what + " " + path + ": " + std::strerror(err));
}

std::string parent_of(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

std::string name_of(const std::string& path) { return fs::path(path).filename().string(); }

// Reads the whole file at `path` without following a link. errno is kept on failure.
bool read_whole(const std::string& path, std::string& out, int& err) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    err = errno;
    return false;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    err = errno;
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    err = EINVAL;
    return false;
  }
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  for (;;) {
    if (done == out.size()) out.resize(out.size() + 65536);
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      return false;
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return true;
}

std::string record_of(std::string_view bytes) {
  return std::string(k_hash_name) + " " + hash_hex(bytes) + " " + std::to_string(bytes.size()) + "\n";
}

// Writes `text` to `name` in `dir`: temp file, fsync, rename. The directory is not fsync'd.
Result<void> write_synced(const SafeDir& dir, const std::string& name, std::string_view text) {
  std::string tmp;
  auto fd = dir.create_temp(name, tmp);
  if (!fd) return fd.error();
  if (!write_all_fd(fd->get(), text) || !sync_fd(fd->get())) {
    const int err = errno;
    ::unlinkat(dir.fd(), tmp.c_str(), 0);
    return io_error("cannot write", dir.file_path(tmp), err);
  }
  fd->reset();
  if (auto renamed = dir.rename(tmp, name); !renamed) {
    ::unlinkat(dir.fd(), tmp.c_str(), 0);
    return renamed.error();
  }
  return {};
}

// Puts the sealed file `from_path` (`from_name` in `from_dir`) at `to` in `dir`, replacing what is
// there: a hard link under a fresh name renamed over `to`; a checked copy where links fail.
Result<void> place(int from_dir, const std::string& from_name, const std::string& from_path,
                   const std::string& record, const SafeDir& dir, const std::string& to) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string link_name = to + ".link." + std::to_string(::getpid()) + "." +
                                  std::to_string(counter.fetch_add(1));
    if (::linkat(from_dir, from_name.c_str(), dir.fd(), link_name.c_str(), 0) == 0) {
      if (auto renamed = dir.rename(link_name, to); !renamed) {
        ::unlinkat(dir.fd(), link_name.c_str(), 0);
        return renamed.error();
      }
      return {};
    }
    if (errno == EEXIST) continue;
    break;  // no links here (a file system without them, a link count at its limit): copy
  }
  std::string bytes;
  int err = 0;
  if (!read_whole(from_path, bytes, err)) return io_error("cannot read", from_path, err);
  if (record_of(bytes) != record) return make_error(ErrorCode::io_error, from_path + " changed after it was sealed");
  return write_synced(dir, to, bytes);
}

} // namespace

std::string artifact_path(const std::string& cache_dir, const std::string& key, std::string_view ext) {
  return (fs::path(cache_dir) / key.substr(0, 2) / (key + std::string(ext))).string();
}

std::string_view to_string(ArtifactState state) {
  switch (state) {
  case ArtifactState::ok: return "ok";
  case ArtifactState::missing: return "missing";
  case ArtifactState::unrecorded: return "unrecorded";
  case ArtifactState::mismatch: return "mismatch";
  case ArtifactState::unreadable: return "unreadable";
  }
  return "unknown";
}

ArtifactCheck verify_artifact(const std::string& path, std::string* bytes) {
  std::string content;
  int err = 0;
  if (!read_whole(path, content, err)) {
    if (err == ENOENT) return {ArtifactState::missing, "the compile cache has no artifact " + path};
    if (err == ELOOP) return {ArtifactState::unreadable, "the cached artifact " + path + " is a symbolic link"};
    return {ArtifactState::unreadable,
            "cannot read the cached artifact " + path + ": " + std::strerror(err)};
  }
  std::string record;
  const std::string record_path = path + std::string(k_record_suffix);
  if (!read_whole(record_path, record, err)) {
    if (err == ENOENT) {
      return {ArtifactState::unrecorded, "the cached artifact " + path + " has no record of its "
                                         "content hash (" + record_path + "): written by an older "
                                         "ktune or cut short"};
    }
    return {ArtifactState::unreadable, "cannot read " + record_path + ": " + std::strerror(err)};
  }
  const std::string expected = record_of(content);
  if (record != expected) {
    char hash[64] = {};
    unsigned long long size = 0;
    std::string why = "its content hash differs from the one recorded when it was written";
    if (std::sscanf(record.c_str(), "xxh3-128 %63s %llu", hash, &size) != 2) {
      why = "its record " + record_path + " is malformed";
    } else if (size != content.size()) {
      why = "it has " + std::to_string(content.size()) + " bytes, " + std::to_string(size) +
            " were recorded when it was written";
    }
    return {ArtifactState::mismatch, "the cached artifact " + path + " is not what was compiled: " + why};
  }
  if (bytes != nullptr) *bytes = std::move(content);
  return {ArtifactState::ok, {}};
}

Result<std::string> seal_artifact(const std::string& temp_path) {
  UniqueFd fd(::open(temp_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return io_error("cannot open", temp_path, errno);
  if (!sync_fd(fd.get())) return io_error("cannot fsync", temp_path, errno);
  std::string bytes;
  int err = 0;
  if (!read_whole(temp_path, bytes, err)) return io_error("cannot read", temp_path, err);
  return record_of(bytes);
}

Result<void> publish_artifact(const std::string& temp_path, const std::string& record,
                              const std::string& final_path) {
  auto dir = SafeDir::open(parent_of(final_path), DirCreate::yes);
  if (!dir) return dir.error();
  UniqueFd from_dir(::open(parent_of(temp_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!from_dir.valid()) return io_error("cannot open the directory of", temp_path, errno);
  const std::string name = name_of(final_path);
  if (auto written = write_synced(*dir, name + std::string(k_record_suffix), record); !written) {
    return written.error();
  }
  if (auto placed = place(from_dir.get(), name_of(temp_path), temp_path, record, *dir, name); !placed) {
    return placed.error();
  }
  return dir->sync();
}

Result<void> store_artifact(const std::string& final_path, std::string_view bytes) {
  auto temp = artifact_temp_file(final_path);
  if (!temp) return temp.error();
  const auto discard = [&] { ::unlink(temp->c_str()); };
  {
    UniqueFd fd(::open(temp->c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC));
    if (!fd.valid() || !write_all_fd(fd.get(), bytes)) {
      const int err = errno;
      discard();
      return io_error("cannot write", *temp, err);
    }
  }
  auto record = seal_artifact(*temp);
  if (!record) {
    discard();
    return record.error();
  }
  auto published = publish_artifact(*temp, *record, final_path);
  discard();
  return published;
}

Result<std::string> artifact_temp_file(const std::string& final_path) {
  auto dir = SafeDir::open(parent_of(final_path), DirCreate::yes);
  if (!dir) return dir.error();
  std::string name;
  auto fd = dir->create_temp(name_of(final_path), name);
  if (!fd) return fd.error();
  return dir->file_path(name);
}

Result<CacheScan> scan_cache(const std::string& cache_dir) {
  CacheScan scan;
  std::error_code ec;
  fs::directory_iterator top(cache_dir, ec);
  if (ec) return make_error(ErrorCode::io_error, "cannot read the compile cache " + cache_dir + ": " + ec.message());
  const auto now = static_cast<std::int64_t>(::time(nullptr));
  for (const auto& sub : top) {
    if (!sub.is_directory(ec) || sub.is_symlink(ec)) continue;
    // Artifacts live in the shard directories named by their key's first two hex digits; other
    // directories under the cache (the source archive, jobs/source_archive.hpp) are not the
    // compile cache's.
    const std::string shard = sub.path().filename().string();
    if (shard.size() != 2 || !std::isxdigit(static_cast<unsigned char>(shard[0])) ||
        !std::isxdigit(static_cast<unsigned char>(shard[1]))) {
      continue;
    }
    for (const auto& file : fs::directory_iterator(sub.path(), ec)) {
      const std::string path = file.path().string();
      const std::string name = file.path().filename().string();
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) continue;
      const bool temp = name.find(".tmp") != std::string::npos || name.find(".link.") != std::string::npos;
      if (temp) {
        if (now - static_cast<std::int64_t>(st.st_mtime) > k_stale_temp_s) scan.temps.push_back(path);
        continue;
      }
      const bool record = name.size() > k_record_suffix.size() &&
                          name.compare(name.size() - k_record_suffix.size(), k_record_suffix.size(),
                                       k_record_suffix) == 0;
      CacheEntry entry;
      entry.path = path;
      entry.mtime_s = static_cast<std::int64_t>(st.st_mtime);
      if (record) {
        const std::string artifact = path.substr(0, path.size() - k_record_suffix.size());
        if (::access(artifact.c_str(), F_OK) == 0) continue;  // counted with its artifact
        entry.check = {ArtifactState::missing, "a record without its artifact " + artifact};
        entry.bytes = static_cast<std::uint64_t>(st.st_size);
      } else {
        entry.check = verify_artifact(path);
        struct stat rec {};
        entry.bytes = static_cast<std::uint64_t>(st.st_size) +
                      (::lstat((path + std::string(k_record_suffix)).c_str(), &rec) == 0
                           ? static_cast<std::uint64_t>(rec.st_size)
                           : 0);
      }
      scan.entries.push_back(std::move(entry));
    }
  }
  return scan;
}

} // namespace ktune
