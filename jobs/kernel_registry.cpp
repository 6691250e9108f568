#include "jobs/kernel_registry.hpp"

#include "jobs/typed_entry.hpp"
#include "core/buffer_init.hpp"
#include "core/hash.hpp"
#include "core/protocol.hpp"
#include "core/quote.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace ktune {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_spec_file = "kernel.toml";

// What loading one family has read so far: every input's stamp, and the bytes hashed (bounded by
// SpecLimits::max_family_bytes).
struct Reading {
  std::vector<FileStamp> inputs;
  std::uint64_t bytes = 0;
  std::set<std::string> dirs;   // stamped once each
  // A file could not be opened for want of descriptors or memory: the host's trouble, passing,
  // not the family's (load_kernel answers out_of_resources).
  bool short_of_resources = false;

  void stamp_dir(const fs::path& dir) {
    if (dirs.insert(dir.string()).second) inputs.push_back(stamp_of(dir.string()));
  }
};

// Reads a whole file of at most `limit` bytes (SpecLimits); false when it cannot be opened or
// read, or is larger (then `too_large` is set and `reason` says so, naming the limit). The file
// is stamped into `reading` either way.
bool read_text(const fs::path& path, std::string& text, std::string& reason, Reading& reading,
               std::uint64_t limit = SpecLimits::max_source_bytes, bool* too_large = nullptr,
               const char* limit_name = "max_source_bytes") {
  const FileStamp stamp = stamp_of(path.string());
  reading.inputs.push_back(stamp);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    reason = ec ? ec.message() : "not a regular file (or missing)";
    return false;
  }
  const std::uint64_t family_left =
      reading.bytes < SpecLimits::max_family_bytes ? SpecLimits::max_family_bytes - reading.bytes : 0;
  if (stamp.size > limit || stamp.size > family_left) {
    const bool file_limit = stamp.size > limit;
    reason = std::to_string(stamp.size) + " bytes, more than the " +
             std::to_string(file_limit ? limit : family_left) + " " +
             (file_limit ? "one file of a kernel family may have (limit " + std::string(limit_name)
                         : "left of what a kernel family may read (limit max_family_bytes") +
             "); not read";
    if (too_large != nullptr) *too_large = true;
    return false;
  }
  reading.bytes += stamp.size;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    reason = std::strerror(errno);
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) reading.short_of_resources = true;
    return false;
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) {
    reason = "read error";
    return false;
  }
  text = out.str();
  return true;
}

// The names in every `#include <name>` line of `text`, in order.
std::vector<std::string> angle_includes(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string::npos || line.compare(i, 7, "include") != 0) continue;
    i = line.find_first_not_of(" \t", i + 7);
    if (i == std::string::npos || line[i] != '<') continue;
    const auto close = line.find('>', i + 1);
    if (close == std::string::npos) continue;
    names.push_back(line.substr(i + 1, close - i - 1));
  }
  return names;
}

// An `#include <name>` of `file` that could reach outside the include path: an absolute name
// (`</dev/zero>`, `</etc/shadow>`) or one with a ".." component. Error: spec_error naming it.
Result<void> confined_angle_includes(const fs::path& spec_file, const fs::path& file,
                                     const std::string& text) {
  for (const auto& name : angle_includes(text)) {
    const fs::path path(name);
    const bool climbs = std::any_of(path.begin(), path.end(), [](const fs::path& part) {
      return part == "..";
    });
    if (path.is_absolute() || climbs) {
      return make_error(ErrorCode::spec_error,
                        spec_file.string() + ": [kernel].source: #include <" + clip_quoted(name) +
                            "> in " + file.string() + " names a file outside the include path " +
                            "(an absolute path or '..'); include system headers by their plain "
                            "name and the family's own with \"...\"");
    }
  }
  return {};
}

// The names in every `#include "name"` line of `text`, in order.
std::vector<std::string> quoted_includes(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::size_t i = 0;
    auto skip_space = [&] {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    };
    skip_space();
    if (i >= line.size() || line[i] != '#') continue;
    ++i;
    skip_space();
    if (line.compare(i, 7, "include") != 0) continue;
    i += 7;
    skip_space();
    if (i >= line.size() || line[i] != '"') continue;
    const auto close = line.find('"', i + 1);
    if (close == std::string::npos || close == i + 1) continue;
    names.push_back(line.substr(i + 1, close - i - 1));
  }
  return names;
}

// True when `path` (an existing file), with every symbolic link resolved, lies inside `dir`
// (resolved too). `real` receives the resolved path.
bool resolves_inside(const fs::path& dir, const fs::path& path, fs::path& real) {
  std::error_code ec;
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec) return false;
  real = fs::canonical(path, ec);
  if (ec) return false;
  const fs::path relative = real.lexically_relative(real_dir);
  return !relative.empty() && *relative.begin() != ".." && *relative.begin() != ".";
}

// Where a family may read files: `root` (its kernel directory, when loaded through a registry)
// or else its own directory. Messages name which.
struct Boundary {
  fs::path dir;
  std::string what;   // "the family directory" or "the kernel directory"
};

// Hashes the headers `text` (at `file`) includes with quotes, depth first in include order, each
// once. A header is looked up next to the including file, then in the family directory; names
// that resolve to neither are left to the compiler's search path and not hashed. A header found
// outside the boundary (an absolute name, '..', a symbolic link leading out) is an error: a
// kernel reads nothing but its own directory, or its kernel directory.
Result<void> hash_includes(Hasher& hasher, const fs::path& spec_file, const fs::path& family_dir,
                           const Boundary& boundary, const fs::path& file,
                           const std::string& text, std::set<fs::path>& seen, Reading& reading,
                           std::vector<std::string>& files) {
  for (const auto& name : quoted_includes(text)) {
    std::error_code ec;
    fs::path found;
    // A header that appears in a searched directory later changes the directory's stamp.
    reading.stamp_dir(file.parent_path());
    reading.stamp_dir(family_dir);
    for (const auto& base : {file.parent_path(), family_dir}) {
      const fs::path candidate = (base / name).lexically_normal();
      if (fs::is_regular_file(candidate, ec)) {
        found = candidate;
        break;
      }
    }
    if (found.empty()) continue;
    fs::path real;
    if (!resolves_inside(boundary.dir, found, real)) {
      return make_error(ErrorCode::spec_error,
                        spec_file.string() + ": [kernel].source: #include \"" + name + "\" in " +
                            file.string() + " resolves to " +
                            (real.empty() ? found.string() : real.string()) + ", outside " +
                            boundary.what + " " + boundary.dir.string());
    }
    if (!seen.insert(real).second) continue;
    std::string header, reason;
    bool too_large = false;
    if (!read_text(found, header, reason, reading, SpecLimits::max_source_bytes, &too_large)) {
      if (too_large) {
        return make_error(ErrorCode::spec_too_large, spec_file.string() + ": [kernel].source: #include \"" +
                                                name + "\" in " + file.string() + ": " + reason);
      }
      continue;
    }
    if (auto r = confined_angle_includes(spec_file, found, header); !r) return r;
    hasher.update(found.lexically_relative(family_dir).string()).update(header);
    files.push_back(found.string());
    if (auto r = hash_includes(hasher, spec_file, family_dir, boundary, found, header, seen, reading,
                               files);
        !r) {
      return r;
    }
  }
  return {};
}

// A family name usable as a directory name: no separators, not "." or "..".
bool is_family_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

std::string normalized_path(const std::string& path) {
  return fs::absolute(path).lexically_normal().string();
}

std::string family_dir_name(const std::string& spec_path) {
  return fs::path(spec_path).parent_path().filename().string();
}

// Reads, checks and hashes the reference function of `spec` into `kernel`.
Result<void> load_reference(KernelSpec& spec, LoadedKernel& kernel, const Boundary& boundary,
                            Hasher& hasher, std::set<fs::path>& seen, Reading& reading) {
  const fs::path spec_file(kernel.spec_path);
  const fs::path dir(kernel.dir);
  const fs::path source = (dir / spec.check.source).lexically_normal();
  const std::string where = kernel.spec_path + ":" + std::to_string(spec.check.line) + ": ";
  std::string text, reason;
  bool too_large = false;
  if (!read_text(source, text, reason, reading, SpecLimits::max_source_bytes, &too_large)) {
    return make_error(too_large ? ErrorCode::spec_too_large : ErrorCode::spec_error,
                      where + "[check].source: '" + spec.check.source + "' cannot be read at " +
                          source.string() + ": " + reason +
                          " (fix: name the file that defines " + spec.check.function +
                          ", relative to the spec)");
  }
  fs::path real;
  if (!resolves_inside(boundary.dir, source, real)) {
    return make_error(ErrorCode::spec_error,
                      where + "[check].source: '" + spec.check.source + "' resolves to " +
                          (real.empty() ? source.string() : real.string()) + ", outside " +
                          boundary.what + " " + boundary.dir.string());
  }
  auto signature = find_signature(text, spec.check.function);
  if (!signature) {
    return make_error(ErrorCode::spec_error,
                      where + "[check].function: " + source.string() + ": " +
                          signature.error().message + " (fix: define void " +
                          spec.check.function + "(...) with the kernel's parameters there)");
  }
  if (auto r = apply_signature(spec, *signature, kernel.spec_path,
                               source.string() + ":" + std::to_string(signature->line),
                               SignatureUse::reference);
      !r) {
    return r.error();
  }
  if (auto r = confined_angle_includes(spec_file, source, text); !r) return r;
  hasher.update("reference").update(text);
  kernel.files.push_back(source.string());
  if (seen.insert(real).second) {
    if (auto r = hash_includes(hasher, spec_file, dir, boundary, source, text, seen, reading,
                               kernel.files);
        !r) {
      return r;
    }
  }
  kernel.reference_path = source.string();
  kernel.reference_signature = std::move(signature).value();
  return {};
}

} // namespace

namespace {

// The source's text, read only when it resolves inside the boundary.
Result<std::string> read_kernel_source(const KernelSpec& spec, const LoadedKernel& kernel,
                                       const Boundary& boundary, fs::path& real_source, Reading& reading) {
  const fs::path source_file(kernel.source_path);
  std::error_code exists_ec;
  if (fs::exists(source_file, exists_ec) && !resolves_inside(boundary.dir, source_file, real_source)) {
    return make_error(ErrorCode::spec_error,
                      kernel.spec_path + ": [kernel].source: '" + spec.source + "' resolves to " +
                          (real_source.empty() ? kernel.source_path : real_source.string()) +
                          ", outside " + boundary.what + " " + boundary.dir.string());
  }
  std::string source_text, reason;
  bool too_large = false;
  if (spec.source.empty() ||
      !read_text(source_file, source_text, reason, reading, SpecLimits::max_source_bytes, &too_large)) {
    return make_error(too_large ? ErrorCode::spec_too_large : ErrorCode::spec_error,
                      kernel.spec_path + ": [kernel].source: '" + spec.source +
                          "' cannot be read at " + kernel.source_path + ": " +
                          (spec.source.empty() ? std::string("empty name") : reason));
  }
  return source_text;
}

// [kernel].signature = "source": the entry's declaration found in the source types the args.
Result<void> apply_source_signature(KernelSpec& spec, const LoadedKernel& kernel, const std::string& source_text) {
  auto signature = find_signature(source_text, spec.entry);
  if (!signature) {
    return make_error(ErrorCode::spec_error,
                      kernel.spec_path + ":" + std::to_string(spec.signature_line) +
                          ": [kernel].signature: \"source\", but " + kernel.source_path + ": " +
                          signature.error().message + " (fix: declare void " + spec.entry +
                          "(...) there, or write the declaration in [kernel].signature)");
  }
  const std::string declared_at = kernel.source_path + ":" + std::to_string(signature->line);
  return apply_signature(spec, *signature, kernel.spec_path, declared_at, SignatureUse::kernel);
}

// Data files (expected values, file inits) become absolute paths inside the boundary, and
// files of the kernel.
Result<void> resolve_data_files(KernelSpec& spec, LoadedKernel& kernel, const fs::path& spec_dir,
                                const Boundary& boundary) {
  const auto resolve = [&](std::string& file, const std::string& key) -> Result<void> {
    const fs::path path = (spec_dir / file).lexically_normal();
    const fs::path relative = path.lexically_relative(boundary.dir);
    if (relative.empty() || *relative.begin() == "..") {
      return make_error(ErrorCode::spec_error,
                        kernel.spec_path + ": " + key + ": '" + file + "' leads outside " +
                            boundary.what + " " + boundary.dir.string());
    }
    file = path.string();
    kernel.files.push_back(file);
    return {};
  };
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    ArgSpec& arg = spec.args[i];
    const std::string key = "args[" + std::to_string(i) + "]";
    if (!arg.expected.empty()) {
      if (auto r = resolve(arg.expected, key + ".expected"); !r) return r.error();
    }
    if (arg.init.starts_with(k_file_init_prefix)) {
      std::string file = arg.init.substr(k_file_init_prefix.size());
      if (auto r = resolve(file, key + ".init"); !r) return r.error();
      arg.init = std::string(k_file_init_prefix) + file;
    }
  }
  return {};
}

Result<LoadedKernel> load_kernel_reading(const std::string& spec_path, const std::string& kernel_dir,
                                         Reading& reading) {
  const fs::path spec_file = fs::absolute(spec_path).lexically_normal();
  const Boundary boundary =
      kernel_dir.empty()
          ? Boundary{spec_file.parent_path(), "the family directory"}
          : Boundary{fs::absolute(kernel_dir).lexically_normal(), "the kernel directory"};
  reading.stamp_dir(spec_file.parent_path());
  std::string spec_text, reason;
  bool too_large = false;
  if (!read_text(spec_file, spec_text, reason, reading, SpecLimits::max_spec_bytes, &too_large,
                 "max_spec_bytes")) {
    return make_error(too_large ? ErrorCode::spec_too_large : ErrorCode::spec_error,
                      spec_file.string() + ": cannot read the kernel spec: " + reason);
  }
  auto spec = parse_kernel_spec(spec_text, spec_file.string());
  if (!spec) return spec.error();

  LoadedKernel kernel;
  kernel.dir = spec_file.parent_path().string();
  kernel.spec_path = spec_file.string();
  const fs::path source_file = (spec_file.parent_path() / spec->source).lexically_normal();
  kernel.source_path = source_file.string();
  fs::path real_source;
  auto source_text = read_kernel_source(*spec, kernel, boundary, real_source, reading);
  if (!source_text) return source_text.error();

  if (auto r = confined_angle_includes(spec_file, source_file, *source_text); !r) return r.error();
  Hasher hasher;
  hasher.update(spec_text).update(*source_text);
  kernel.root = boundary.dir.string();
  kernel.files = {spec_file.string(), source_file.string()};
  std::set<fs::path> seen{real_source};
  if (auto r = hash_includes(hasher, spec_file, spec_file.parent_path(), boundary, source_file,
                             *source_text, seen, reading, kernel.files);
      !r) {
    return r.error();
  }
  if (spec->signature_text == "source") {
    if (auto r = apply_source_signature(*spec, kernel, *source_text); !r) return r.error();
  }
  if (spec->check.reference == ReferenceKind::function) {
    auto reference = load_reference(*spec, kernel, boundary, hasher, seen, reading);
    if (!reference) return reference.error();
  }
  if (auto r = resolve_data_files(*spec, kernel, spec_file.parent_path(), boundary); !r) return r.error();
  kernel.source_hash = hasher.hex_digest();
  kernel.spec = std::move(*spec);
  return kernel;
}

} // namespace

Result<LoadedKernel> load_kernel(const std::string& spec_path, const std::string& kernel_dir,
                                 std::vector<FileStamp>* inputs) {
  Reading reading;
  auto kernel = load_kernel_reading(spec_path, kernel_dir, reading);
  if (!kernel && reading.short_of_resources) {
    kernel = make_error(ErrorCode::out_of_resources,
                        kernel.error().message + " (the process is short of file descriptors or "
                        "memory; the family is read again later)");
  }
  if (kernel) kernel->inputs = reading.inputs;
  if (inputs != nullptr) *inputs = std::move(reading.inputs);
  return kernel;
}

FileStamp stamp_of(const std::string& path) {
  FileStamp stamp;
  stamp.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return stamp;
  stamp.exists = true;
  stamp.dev = static_cast<std::uint64_t>(st.st_dev);
  stamp.ino = static_cast<std::uint64_t>(st.st_ino);
  stamp.size = static_cast<std::uint64_t>(st.st_size);
  stamp.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return stamp;
}

bool unchanged(const std::vector<FileStamp>& inputs) {
  if (inputs.empty()) return false;
  return std::all_of(inputs.begin(), inputs.end(),
                     [](const FileStamp& stamp) { return stamp_of(stamp.path) == stamp; });
}

std::vector<fs::path> KernelRegistry::family_dirs(const std::string& dir) {
  std::vector<fs::path> families;
  std::vector<fs::path> groups;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return families;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (fs::is_regular_file(entry.path() / k_spec_file, ec)) families.push_back(entry.path());
    else if (fs::is_directory(entry.path(), ec)) groups.push_back(entry.path());
  }
  std::sort(families.begin(), families.end());
  std::sort(groups.begin(), groups.end());
  for (const auto& group : groups) {
    std::vector<fs::path> nested;
    for (const auto& entry : fs::directory_iterator(group, ec)) {
      if (fs::is_regular_file(entry.path() / k_spec_file, ec)) nested.push_back(entry.path());
    }
    std::sort(nested.begin(), nested.end());
    families.insert(families.end(), nested.begin(), nested.end());
  }
  return families;
}

std::string KernelRegistry::kernel_dir_of(const std::string& spec_path) const {
  const fs::path path = fs::absolute(spec_path).lexically_normal();
  for (const auto& dir : m_dirs) {
    const fs::path relative = path.lexically_relative(fs::absolute(dir).lexically_normal());
    if (!relative.empty() && *relative.begin() != ".." && *relative.begin() != ".") return dir;
  }
  return {};
}

std::vector<std::string> KernelRegistry::spec_candidates(const std::string& name) const {
  std::vector<std::string> paths;
  for (const auto& dir : m_dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    const fs::path direct = fs::path(dir) / name / k_spec_file;
    if (fs::is_regular_file(direct, ec)) paths.push_back(direct.string());
    std::vector<fs::path> nested;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (fs::is_regular_file(entry.path() / k_spec_file, ec)) continue; // a family, not a group
      const fs::path candidate = entry.path() / name / k_spec_file;
      if (fs::is_regular_file(candidate, ec)) nested.push_back(candidate);
    }
    std::sort(nested.begin(), nested.end());
    for (const auto& path : nested) paths.push_back(path.string());
  }
  return paths;
}

void KernelRegistry::load(const std::vector<std::string>& dirs) {
  m_dirs = dirs;
  m_kernels.clear();
  m_broken.clear();
  m_missing_dirs.clear();
  m_dir_problems.clear();
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      m_missing_dirs.push_back(dir);
      m_dir_problems.push_back("kernel directory " + dir + " " +
                               (fs::exists(dir, ec) ? "is not a directory"
                                                    : "does not exist") +
                               ": no family is loaded from it");
      continue;
    }
    if (fs::is_regular_file(fs::path(dir) / k_spec_file, ec)) {
      m_dir_problems.push_back(
          "kernel directory " + dir + " is itself a kernel family (it holds " + k_spec_file +
          "): a kernel directory holds families, one directory each; give its parent, " +
          fs::absolute(dir).lexically_normal().parent_path().string() + ", instead");
    }
    for (const auto& family : family_dirs(dir)) {
      const std::string spec_path = (family / k_spec_file).string();
      std::vector<FileStamp> inputs;
      auto kernel = load_kernel(spec_path, dir, &inputs);
      if (!kernel) {
        m_broken.push_back(BrokenKernel{normalized_path(spec_path), kernel.error(), std::move(inputs)});
        continue;
      }
      const Key key{kernel->spec.name, kernel->spec.language};
      auto [it, inserted] = m_kernels.try_emplace(key, *kernel);
      if (!inserted) {
        m_broken.push_back(BrokenKernel{
            kernel->spec_path,
            make_error(ErrorCode::spec_error,
                       kernel->spec_path + ": [kernel].name: '" + kernel->spec.name + "' (" +
                           std::string(to_string(kernel->spec.language)) +
                           ") is already defined by " + it->second.spec_path)});
      }
    }
  }
}

Result<LoadedKernel> KernelRegistry::reload(const std::string& name, const std::string& spec_path) {
  const std::string path = normalized_path(spec_path);
  // Nothing it read has changed: the family (or its error) as it was, without reading a file.
  for (const auto& [key, kernel] : m_kernels) {
    if (kernel.spec_path == path && unchanged(kernel.inputs)) return kernel;
  }
  for (const auto& broken : m_broken) {
    if (broken.spec_path == path && unchanged(broken.inputs)) return broken.error;
  }
  std::vector<FileStamp> inputs;
  auto kernel = load_kernel(spec_path, kernel_dir_of(spec_path), &inputs);
  return install(name, spec_path, std::move(kernel), std::move(inputs));
}

Result<LoadedKernel> KernelRegistry::install(const std::string& name, const std::string& spec_path,
                                             Result<LoadedKernel> kernel,
                                             std::vector<FileStamp> inputs) {
  const std::string path = normalized_path(spec_path);
  if (!kernel && kernel.error().code == ErrorCode::out_of_resources) {
    // Passing trouble of the host: the family as it was loaded last, else the error; never
    // recorded as broken.
    for (const auto& [key, loaded] : m_kernels) {
      if (loaded.spec_path == path) return loaded;
    }
    return kernel.error();
  }
  std::erase_if(m_broken, [&](const BrokenKernel& broken) { return broken.spec_path == path; });
  std::erase_if(m_kernels, [&](const auto& entry) {
    return entry.second.spec_path == path &&
           (!kernel || entry.first != Key{kernel->spec.name, kernel->spec.language});
  });
  if (!kernel) {
    m_broken.push_back(BrokenKernel{path, kernel.error(), std::move(inputs)});
    return kernel.error();
  }
  if (kernel->spec.name == name) {
    m_kernels.insert_or_assign(Key{name, kernel->spec.language}, *kernel);
  }
  return kernel;
}

Result<LoadedKernel> KernelRegistry::find(const std::string& name) {
  return find_impl(name, std::nullopt);
}

Result<LoadedKernel> KernelRegistry::find(const std::string& name, Language language) {
  return find_impl(name, language);
}

Result<LoadedKernel> KernelRegistry::find_impl(const std::string& name,
                                               std::optional<Language> language) {
  if (name.size() > k_max_family_name) {
    return make_error(ErrorCode::unknown_kernel,
                      "unknown kernel '" + clip_quoted(name) + "': a family name has at most " +
                          std::to_string(k_max_family_name) + " characters");
  }
  if (is_family_name(name)) {
    std::optional<Error> first_error;
    // The first of `paths` that loads as the family (in `language`, when given); without a
    // language, the first that fails to load is the answer.
    const auto first_loaded = [&](const std::vector<std::string>& paths) -> std::optional<Result<LoadedKernel>> {
      for (const auto& spec_path : paths) {
        auto kernel = reload(name, spec_path);
        if (!kernel) {
          if (!language) return kernel;
          if (!first_error) first_error = kernel.error();
          continue;
        }
        if (kernel->spec.name == name && (!language || kernel->spec.language == *language)) {
          return kernel;
        }
      }
      return std::nullopt;
    };
    if (auto found = first_loaded(spec_candidates(name))) return std::move(*found);
    // A family whose directory is not named after it, found by load().
    std::vector<std::string> others;
    for (const auto& [key, kernel] : m_kernels) {
      if (key.first == name && (!language || key.second == *language)) {
        others.push_back(kernel.spec_path);
      }
    }
    if (auto found = first_loaded(others)) return std::move(*found);
    if (first_error) return *first_error;
  }
  const std::string which =
      language ? " written in " + std::string(to_string(*language)) : std::string();
  return make_error(ErrorCode::unknown_kernel,
                    "unknown kernel '" + clip_quoted(name) + "': no family with that name" + which + " in " +
                        (m_dirs.empty() ? std::string("(no kernel directories configured)")
                                        : "the kernel directories " + join(m_dirs) +
                                              " (and their subdirectories)"));
}

std::vector<std::string> KernelRegistry::names() const {
  std::set<std::string> names;
  for (const auto& [key, kernel] : m_kernels) names.insert(key.first);
  for (const auto& broken : m_broken) names.insert(family_dir_name(broken.spec_path));
  return {names.begin(), names.end()};
}

std::vector<std::pair<std::string, Language>> KernelRegistry::families() const {
  std::vector<std::pair<std::string, Language>> out;
  for (const auto& [key, kernel] : m_kernels) out.push_back(key);
  return out;
}

Language language_for_device(std::string_view device) {
  return device.rfind("cuda", 0) == 0 ? Language::cuda : Language::cpp;
}

Result<CompileJob> make_compile_job(const LoadedKernel& kernel, const Config& config,
                                    const std::string& dtype, const std::string& cache_dir) {
  const auto& dtypes = kernel.spec.dtypes;
  if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end()) {
    return make_error(ErrorCode::bad_dtype, "kernel '" + kernel.spec.name +
                                                     "' does not support dtype '" + dtype +
                                                     "' (its dtypes: " + join(dtypes) + ")");
  }
  CompileJob job;
  job.kernel = kernel.spec.name;
  job.language = std::string(to_string(kernel.spec.language));
  job.source_path = kernel.source_path;
  job.include_dirs = {kernel.dir};
  job.defines = config;
  job.dtype = kernel.spec.dtype_axis ? dtype : std::string();
  job.extra_flags = kernel.spec.flags;
  job.removed_flags = kernel.spec.flags_remove;
  job.entry = kernel.spec.entry;
  if (kernel.spec.language == Language::cpp && kernel.spec.signature) {
    job.shim = host_shim_source(*kernel.spec.signature, kernel.spec.args);
  }
  job.source_hash = kernel.source_hash;
  job.cache_dir = cache_dir;
  return job;
}

Result<CompileJob> make_reference_compile_job(const LoadedKernel& kernel, const std::string& dtype,
                                              const std::string& cache_dir) {
  if (!kernel.reference_signature) {
    return make_error(ErrorCode::spec_error,
                      kernel.spec_path + ": [check]: the family has no reference function");
  }
  auto job = make_compile_job(kernel, {}, dtype, cache_dir);
  if (!job) return job;
  job->kernel = kernel.spec.name + " (reference " + kernel.spec.check.function + ")";
  job->source_path = kernel.reference_path;
  job->shim = host_shim_source(*kernel.reference_signature, kernel.spec.args);
  job->entry = kernel.spec.check.function;
  return job;
}

} // namespace ktune
