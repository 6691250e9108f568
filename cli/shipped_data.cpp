#include "cli/shipped_data.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#ifndef KTUNE_DATA_DIR_FROM_BIN
#error "KTUNE_DATA_DIR_FROM_BIN must be defined by the build"
#endif

namespace ktune::cli {

namespace fs = std::filesystem;

std::string shipped_data_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return (exe.parent_path() / KTUNE_DATA_DIR_FROM_BIN).lexically_normal().string();
}

std::vector<std::string> shipped_sweeps(const std::string& sweep_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(sweep_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".toml") names.push_back(it->path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> resolve_sweep_file(const std::string& given, const std::string& sweep_dir) {
  std::error_code ec;
  if (fs::exists(given, ec)) return given;
  const fs::path path(given);
  const fs::path parent = path.parent_path().lexically_normal();
  const bool bare = parent.empty() || parent == "configs/sweeps" || parent == "sweeps";
  if (bare && !sweep_dir.empty()) {
    for (const fs::path candidate : {fs::path(sweep_dir) / path.filename(),
                                     fs::path(sweep_dir) / (path.filename().string() + ".toml")}) {
      if (fs::is_regular_file(candidate, ec)) return candidate.string();
    }
  }
  std::string shipped;
  for (const auto& name : shipped_sweeps(sweep_dir)) shipped += (shipped.empty() ? "" : ", ") + name;
  return make_error(
      ErrorCode::sweep_error,
      "sweep file '" + given + "' not found (relative to " + fs::current_path(ec).string() + ")" +
          (shipped.empty() ? std::string()
                           : bare ? "; the shipped sweeps in " + sweep_dir + " are: " + shipped +
                                        " (`ktune sweep NAME` runs one)"
                                  : "; shipped sweeps (" + shipped + ") are in " + sweep_dir));
}

} // namespace ktune::cli
