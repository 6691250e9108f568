#include "daemon/kernel_dirs.hpp"

#include "core/quote.hpp"
#include "core/unique_fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ktune::daemon {

namespace fs = std::filesystem;

std::string added_kernel_dirs_file(const std::string& db_path) { return db_path + "-kernel-dirs"; }

namespace {

// Client text in a message: clipped (core/quote.hpp).
std::string quote(std::string_view text) {
  std::string out(1, '\'');
  out += clip_quoted(text);
  out += '\'';
  return out;
}

// A path ktuned resolved itself.
std::string quote_path(const std::string& path) { return "'" + path + "'"; }

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The journal's lines in order; a last line without its newline is torn and dropped.
std::vector<std::string> journal_lines(const std::string& path, std::vector<std::string>* warnings) {
  std::vector<std::string> lines;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno != ENOENT && warnings) {
      warnings->push_back("cannot read " + path + ": " + std::strerror(errno));
    }
    return lines;
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  std::size_t at = 0;
  while (at < all.size()) {
    const std::size_t end = all.find('\n', at);
    if (end == std::string::npos) {
      if (warnings) warnings->push_back(path + ": an incomplete last line is ignored");
      break;
    }
    lines.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

Result<void> check_client(uid_t client, const char* op) {
  const uid_t self = ::getuid();
  if (client == self || client == 0) return {};
  return make_error(ErrorCode::permission_denied,
                    std::string(op) + ": uid " + std::to_string(client) +
                        " may not change ktuned's kernel directories (only uid " +
                        std::to_string(self) + ", ktuned's own, and root may)");
}

Result<std::string> request_path(const protocol::Request& request) {
  const auto& body = request.body;
  const auto field = body.find("path");
  if (field == body.end() || !field->is_string()) {
    return make_error(ErrorCode::bad_request, request.op + ": field 'path' (an absolute directory path, "
                                                      "a string) is missing or not a string");
  }
  std::string path = field->get<std::string>();
  if (path.empty() || path.front() != '/') {
    return make_error(ErrorCode::bad_request,
                      request.op + ": path " + quote(path) + ": expected an absolute path");
  }
  return path;
}

// The resolved directory, checked as add() promises.
Result<std::string> checked_directory(const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return make_error(ErrorCode::bad_request,
                      "add_kernel_dir: path " + quote(path) + ": expected an absolute path");
  }
  std::error_code ec;
  const fs::path resolved = fs::canonical(path, ec);
  if (ec) {
    return make_error(ErrorCode::bad_request, "add_kernel_dir: " + quote(path) + ": " + ec.message());
  }
  struct stat st {};
  if (::stat(resolved.c_str(), &st) != 0) {
    return make_error(ErrorCode::bad_request,
                      "add_kernel_dir: " + quote(path) + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return make_error(ErrorCode::bad_request,
                      "add_kernel_dir: " + quote_path(resolved.string()) + " is not a directory");
  }
  const uid_t self = ::getuid();
  if (st.st_uid != self && st.st_uid != 0) {
    return make_error(ErrorCode::bad_request,
                      "add_kernel_dir: " + quote_path(resolved.string()) + " belongs to uid " +
                          std::to_string(st.st_uid) + ", not to ktuned's uid " +
                          std::to_string(self) + " or root: its families would run as ktuned");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return make_error(ErrorCode::bad_request,
                      "add_kernel_dir: " + quote_path(resolved.string()) +
                          " is writable by its group or by others (fix: chmod go-w)");
  }
  return resolved.string();
}

} // namespace

KernelDirs::KernelDirs(std::vector<std::string> configured, std::string journal)
    : m_configured(std::move(configured)), m_journal(std::move(journal)) {
  for (const std::string& line : journal_lines(m_journal, &m_warnings)) {
    if (line.size() < 2 || (line[0] != '+' && line[0] != '-') || line[1] != '/') {
      m_warnings.push_back(m_journal + ": line " + quote(line) + " is ignored");
      continue;
    }
    const std::string path = line.substr(1);
    std::erase(m_added, path);
    if (line[0] == '+') m_added.push_back(path);
  }
}

std::vector<std::string> KernelDirs::all() const {
  std::vector<std::string> dirs = m_configured;
  for (const auto& dir : m_added) {
    if (!contains(dirs, dir)) dirs.push_back(dir);
  }
  return dirs;
}

Result<void> KernelDirs::append(char sign, const std::string& path) {
  UniqueFd fd(::open(m_journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return make_error(ErrorCode::internal, "cannot open " + m_journal + ": " + std::strerror(errno));
  }
  const std::string line = std::string(1, sign) + path + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd.get(), line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return make_error(ErrorCode::internal, "cannot write " + m_journal + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) {
    return make_error(ErrorCode::internal, "cannot sync " + m_journal + ": " + std::strerror(errno));
  }
  return {};
}

Result<KernelDirs::Change> KernelDirs::add(const std::string& path, uid_t client) {
  if (auto r = check_client(client, "add_kernel_dir"); !r) return r.error();
  auto dir = checked_directory(path);
  if (!dir) return dir.error();
  if (contains(m_configured, *dir) || contains(m_added, *dir)) return Change{*dir, false};
  if (m_added.size() >= k_max_added) {
    return make_error(ErrorCode::bad_request, "add_kernel_dir: " + std::to_string(k_max_added) +
                                             " directories are added already (fix: remove_kernel_dir "
                                             "the ones no longer used)");
  }
  if (auto r = append('+', *dir); !r) return r.error();
  m_added.push_back(*dir);
  return Change{*dir, true};
}

Result<KernelDirs::Change> KernelDirs::remove(const std::string& path, uid_t client) {
  if (auto r = check_client(client, "remove_kernel_dir"); !r) return r.error();
  std::error_code ec;
  fs::path resolved = fs::canonical(path, ec);
  if (ec) resolved = fs::path(path).lexically_normal();  // it may be gone already
  std::string dir = resolved.string();
  if (!contains(m_added, dir) && contains(m_added, path)) dir = path;
  if (contains(m_configured, dir) && !contains(m_added, dir)) {
    return make_error(ErrorCode::bad_request,
                      "remove_kernel_dir: " + quote_path(dir) +
                          " is configured ([daemon].kernel_dirs or --kernel-dir), not added");
  }
  if (!contains(m_added, dir)) return Change{dir, false};
  if (auto r = append('-', dir); !r) return r.error();
  std::erase(m_added, dir);
  return Change{dir, true};
}

Result<nlohmann::json> kernel_dir_request(const protocol::Request& request, uid_t client,
                                          KernelDirs& dirs,
                                          const std::function<Result<nlohmann::json>()>& rescan) {
  auto path = request_path(request);
  if (!path) return path.error();
  const bool adding = request.op == "add_kernel_dir";
  auto change = adding ? dirs.add(*path, client) : dirs.remove(*path, client);
  if (!change) return change.error();
  auto listing = rescan();
  if (!listing) return listing.error();
  const std::string prefix = change->path + "/";
  const auto under = [&](const nlohmann::json& entries) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& entry : entries) {
      if (entry.value("path", "").starts_with(prefix)) out.push_back(entry);
    }
    return out;
  };
  return nlohmann::json{{"path", change->path},
                        {adding ? "added" : "removed", change->changed},
                        {"kernel_dirs", dirs.all()},
                        {"kernels", under(listing->at("kernels"))},
                        {"broken", under(listing->at("broken"))}};
}

} // namespace ktune::daemon
