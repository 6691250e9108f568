#include "cli/cache_command.hpp"

#include "cli/daemon_calls.hpp"
#include "core/paths.hpp"
#include "jobs/artifact_cache.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <unistd.h>

namespace ktune::cli {

namespace {

std::string cache_dir_of(const CacheCommand& command) {
  return command.cache_dir.empty() ? resolve_paths(path_env_from_process()).cache_dir
                                   : command.cache_dir;
}

int verify(const CacheCommand& command, Output& io) {
  const std::string dir = cache_dir_of(command);
  auto scan = scan_cache(dir);
  if (!scan) return report_error(io, scan.error().code, scan.error().message);
  Json damaged = Json::array();
  std::size_t sound = 0;
  for (const CacheEntry& entry : scan->entries) {
    if (entry.check.ok()) {
      ++sound;
      continue;
    }
    damaged.push_back({{"path", entry.path},
                       {"state", std::string(to_string(entry.check.state))},
                       {"reason", entry.check.reason}});
  }
  if (io.json) {
    print_json(io, {{"cache_dir", dir},
                    {"checked", scan->entries.size()},
                    {"ok", sound},
                    {"damaged", damaged},
                    {"stale_temps", scan->temps.size()}});
  } else {
    for (const auto& d : damaged) {
      io.out << d.at("state").get<std::string>() << ": " << d.at("reason").get<std::string>() << "\n";
    }
    io.out << scan->entries.size() << " cache entries checked in " << dir << ": " << sound
           << " ok, " << damaged.size() << " damaged";
    if (!scan->temps.empty()) io.out << ", " << scan->temps.size() << " stale temp file(s)";
    io.out << (damaged.empty() ? "\n" : " (`ktune cache prune` removes them; ktuned compiles "
                                        "them again when needed)\n");
  }
  return damaged.empty() ? k_exit_ok : k_exit_error;
}

int prune(const CacheCommand& command, Output& io) {
  const std::string dir = cache_dir_of(command);
  auto scan = scan_cache(dir);
  if (!scan) return report_error(io, scan.error().code, scan.error().message);
  const auto now = static_cast<std::int64_t>(::time(nullptr));
  const auto max_age_s = static_cast<std::int64_t>(command.older_than_days * 86400.0);
  std::size_t removed = 0;
  std::size_t kept = 0;
  std::uint64_t bytes = 0;
  std::vector<std::string> failures;
  const auto remove = [&](const std::string& path) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      failures.push_back(path + ": " + std::strerror(errno));
      return false;
    }
    return true;
  };
  for (const CacheEntry& entry : scan->entries) {
    const bool old = max_age_s > 0 && now - entry.mtime_s > max_age_s;
    if (entry.check.ok() && !old) {
      ++kept;
      continue;
    }
    // An orphan record is its own path; an artifact goes with its record.
    bool gone = remove(entry.path);
    const std::string record = entry.path + std::string(k_record_suffix);
    if (entry.path.size() <= k_record_suffix.size() ||
        entry.path.compare(entry.path.size() - k_record_suffix.size(), k_record_suffix.size(),
                           k_record_suffix) != 0) {
      gone = remove(record) && gone;
    }
    if (gone) {
      ++removed;
      bytes += entry.bytes;
    }
  }
  for (const std::string& temp : scan->temps) {
    if (remove(temp)) ++removed;
  }
  if (io.json) {
    print_json(io, {{"cache_dir", dir}, {"removed", removed}, {"bytes", bytes}, {"kept", kept},
                    {"failures", failures}});
  } else {
    for (const auto& f : failures) io.err << "ktune: cannot remove " << f << "\n";
    io.out << "removed " << removed << " entr" << (removed == 1 ? "y" : "ies") << " ("
           << bytes / 1024 << " KiB) from " << dir << "; " << kept << " sound entr"
           << (kept == 1 ? "y" : "ies") << " kept\n";
  }
  return failures.empty() ? k_exit_ok : k_exit_error;
}

} // namespace

void add_cache_command(CLI::App& app, CacheCommand& command) {
  CLI::App* cache = app.add_subcommand("cache", "Check or clean the compile cache (no daemon)");
  cache->require_subcommand(1);
  command.verify = cache->add_subcommand(
      "verify", "Check every cached artifact against the content hash recorded with its key");
  command.prune = cache->add_subcommand(
      "prune", "Remove damaged artifacts, stray records and temp files (and old ones)");
  for (CLI::App* sub : {command.verify, command.prune}) {
    sub->add_option("--cache-dir", command.cache_dir,
                    "the compile cache (default: $KTUNE_HOME/cache, else "
                    "$XDG_STATE_HOME/ktune/cache; [daemon].cache_dir if set there)");
  }
  command.prune->add_option("--older-than", command.older_than_days,
                            "also remove sound artifacts written more than this many days ago")
      ->check(CLI::NonNegativeNumber);
  cache->footer(
      "\nEvery artifact is written with a record of its content hash (<key>.so.sum,\n"
      "<key>.cubin.sum); ktuned's workers check it before they use an artifact and compile a\n"
      "damaged one again. verify exits 1 when anything is damaged; prune removes it.\n\n"
      "Examples:\n  ktune cache verify\n  ktune cache prune --older-than 30");
}

std::optional<int> run_cache_command(const CacheCommand& command, const GlobalOptions& /*global*/,
                                 Output& io) {
  if (command.verify != nullptr && command.verify->parsed()) return verify(command, io);
  if (command.prune != nullptr && command.prune->parsed()) return prune(command, io);
  return std::nullopt;
}

} // namespace ktune::cli
