#include "jobs/source_archive.hpp"
#include "core/file_io.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace ktune {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_manifest = "manifest.json";
constexpr const char* k_files = "files";

Error io_error(const std::string& message) { return make_error(ErrorCode::io_error, message); }

// A source hash is what names an entry: hex digits only, so that it can never leave the root.
bool is_hash(const std::string& text) {
  return !text.empty() && text.size() <= 128 && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// `path` relative to `root`, or empty when it is not inside.
fs::path inside(const fs::path& root, const fs::path& path) {
  const fs::path relative = fs::path(path).lexically_normal().lexically_relative(root);
  if (relative.empty() || *relative.begin() == ".." || relative.is_absolute()) return {};
  return relative;
}

} // namespace

std::string source_archive_dir(const std::string& cache_dir) {
  return (fs::path(cache_dir) / "sources").string();
}

Result<bool> archive_kernel(const LoadedKernel& kernel, const std::string& root) {
  if (!is_hash(kernel.source_hash)) {
    return io_error("kernel " + kernel.spec.name + " has no source hash to archive it by");
  }
  const fs::path target = fs::path(root) / kernel.source_hash;
  std::error_code ec;
  if (fs::exists(target / k_manifest, ec)) return false;
  const fs::path family_root = fs::path(kernel.root).lexically_normal();
  nlohmann::json files = nlohmann::json::array();
  std::vector<std::pair<fs::path, fs::path>> copies;  // from, relative
  for (const auto& file : kernel.files) {
    const fs::path relative = inside(family_root, file);
    if (relative.empty()) {
      return io_error("kernel " + kernel.spec.name + ": " + file + " lies outside " +
                      family_root.string() + "; its sources cannot be archived");
    }
    if (std::none_of(copies.begin(), copies.end(), [&](const auto& c) { return c.second == relative; })) {
      copies.emplace_back(file, relative);
      files.push_back(relative.generic_string());
    }
  }
  const fs::path spec = inside(family_root, kernel.spec_path);
  if (spec.empty()) {
    return io_error("kernel " + kernel.spec.name + ": its spec " + kernel.spec_path +
                    " lies outside " + family_root.string());
  }
  fs::create_directories(root, ec);
  if (ec) return io_error("cannot create the source archive " + root + ": " + ec.message());
  std::random_device random;
  const fs::path temp = fs::path(root) / (".tmp-" + kernel.source_hash + "-" +
                                          std::to_string(::getpid()) + "-" +
                                          std::to_string(random()));
  const auto fail = [&](const std::string& message) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    return io_error(message);
  };
  for (const auto& [from, relative] : copies) {
    const fs::path to = temp / k_files / relative;
    fs::create_directories(to.parent_path(), ec);
    if (ec) return fail("cannot create " + to.parent_path().string() + ": " + ec.message());
    if (!fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec) || ec) {
      return fail("cannot archive " + from.string() + " to " + to.string() + ": " +
                  (ec ? ec.message() : std::string("copy failed")));
    }
    // The copy is the archive's, private like everything else under the cache (whatever the
    // family's files allow).
    fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, ec);
    if (ec) return fail("cannot restrict " + to.string() + ": " + ec.message());
  }
  const nlohmann::json manifest{{"kernel", kernel.spec.name},
                                {"source_hash", kernel.source_hash},
                                {"spec", spec.generic_string()},
                                {"files", files}};
  {
    std::ofstream out(temp / k_manifest, std::ios::binary | std::ios::trunc);
    out << manifest.dump(2) << '\n';
    out.flush();
    if (!out) return fail("cannot write " + (temp / k_manifest).string());
  }
  fs::rename(temp, target, ec);
  if (ec) {
    // Another process archived the same source meanwhile: theirs stays.
    if (fs::exists(target / k_manifest)) {
      std::error_code ignored;
      fs::remove_all(temp, ignored);
      return false;
    }
    return fail("cannot move the archived sources into " + target.string() + ": " + ec.message());
  }
  return true;
}

Result<std::optional<LoadedKernel>> load_archived_kernel(const std::string& root,
                                                         const std::string& source_hash) {
  if (!is_hash(source_hash)) return std::optional<LoadedKernel>();
  const fs::path entry = fs::path(root) / source_hash;
  std::error_code ec;
  if (!fs::exists(entry / k_manifest, ec)) return std::optional<LoadedKernel>();
  const auto text = read_file((entry / k_manifest).string());
  const auto manifest = nlohmann::json::parse(text.value_or(std::string()), nullptr, false);
  if (!text || !manifest.is_object() || !manifest.contains("spec") || !manifest["spec"].is_string()) {
    return io_error("the source archive's manifest " + (entry / k_manifest).string() +
                    " cannot be read");
  }
  const fs::path files = entry / k_files;
  const fs::path spec = files / manifest["spec"].get<std::string>();
  if (inside(files, spec).empty()) {
    return io_error("the source archive's manifest " + (entry / k_manifest).string() +
                    " names a spec outside the entry");
  }
  auto kernel = load_kernel(spec.string(), files.string());
  if (!kernel) return kernel.error();
  if (kernel->source_hash != source_hash) {
    return make_error(ErrorCode::source_changed, "the archived sources in " + entry.string() +
                                              " hash to " + kernel->source_hash + ", not " +
                                              source_hash);
  }
  return std::optional<LoadedKernel>(std::move(*kernel));
}

} // namespace ktune
