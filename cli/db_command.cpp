#include "cli/db_command.hpp"

#include "cli/daemon_calls.hpp"
#include "core/paths.hpp"
#include "db/salvage.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sys/stat.h>

namespace ktune::cli {

namespace {

// The copies are as private as the store they come from, whatever the umask.
class PrivateUmask {
public:
  PrivateUmask() : m_before(::umask(077)) {}
  ~PrivateUmask() { ::umask(m_before); }
  PrivateUmask(const PrivateUmask&) = delete;
  PrivateUmask& operator=(const PrivateUmask&) = delete;

private:
  mode_t m_before;
};

int backup(const DbCommand& command, Output& io) {
  const std::string source =
      command.db.empty() ? resolve_paths(path_env_from_process()).db : command.db;
  if (!std::filesystem::exists(source)) {
    return report_error(io, ErrorCode::db_error, "no database at " + source + " (pass --db PATH)");
  }
  const PrivateUmask umask;
  auto done = backup_database(source, command.destination);
  if (!done) return report_error(io, done.error().code, done.error().message);
  if (io.json) {
    print_json(io, {{"source", source}, {"backup", command.destination}, {"pages", done->pages}});
  } else {
    io.out << "backed up " << source << " to " << command.destination << " (" << done->pages
           << " pages, checked)\n";
  }
  return k_exit_ok;
}

int recover(const DbCommand& command, Output& io) {
  if (!std::filesystem::exists(command.db)) {
    return report_error(io, ErrorCode::db_error, "no database at " + command.db);
  }
  const PrivateUmask umask;
  auto done = recover_database(command.db, command.destination);
  if (!done) return report_error(io, done.error().code, done.error().message);
  std::int64_t copied = 0;
  std::int64_t unreadable = 0;
  bool incomplete = false;
  Json tables = Json::array();
  for (const SalvagedTable& t : done->tables) {
    copied += t.copied;
    unreadable += t.unreadable;
    incomplete = incomplete || t.scan_broke || !t.error.empty() || t.unreadable > 0;
    tables.push_back({{"table", t.name}, {"copied", t.copied}, {"unreadable", t.unreadable},
                      {"damaged", t.scan_broke}, {"error", t.error}});
  }
  if (io.json) {
    print_json(io, {{"source", command.db}, {"recovered", command.destination},
                    {"copied", copied}, {"unreadable", unreadable}, {"tables", tables}});
    return k_exit_ok;
  }
  for (const SalvagedTable& t : done->tables) {
    io.out << "  " << t.name << ": " << t.copied << " row(s) copied";
    if (t.unreadable > 0) io.out << ", " << t.unreadable << " unreadable";
    if (t.scan_broke) io.out << " (damaged: read row by row past the damage)";
    if (!t.error.empty()) io.out << " (not copied: " << t.error << ")";
    io.out << "\n";
  }
  io.out << "recovered " << copied << " row(s) of " << command.db << " into "
         << command.destination << (incomplete ? "; some could not be read" : "; nothing was lost")
         << ". With ktuned stopped, move the damaged file (and its -wal, -shm) aside and "
         << command.destination << " into its place\n";
  return k_exit_ok;
}

} // namespace

void add_db_command(CLI::App& app, DbCommand& command) {
  CLI::App* db = app.add_subcommand("db", "Back up or recover the database (no daemon needed)");
  db->require_subcommand(1);
  command.backup = db->add_subcommand(
      "backup", "Copy the database with SQLite's online backup, also while ktuned writes");
  command.backup->add_option("destination", command.destination, "the new file")->required();
  command.backup->add_option("--db", command.db,
                             "the database (default: $KTUNE_HOME/ktune.db else "
                             "$XDG_STATE_HOME/ktune/ktune.db)");
  command.recover = db->add_subcommand(
      "recover", "Copy what can still be read of a damaged database into a new one");
  command.recover->add_option("source", command.db, "the damaged database")->required();
  command.recover->add_option("destination", command.destination, "the new file")->required();
  db->footer("\nThe source is only read. Neither overwrites an existing file.\n\n"
             "Examples:\n  ktune db backup ~/ktune-$(date +%F).db\n"
             "  ktune db recover ~/.local/state/ktune/ktune.db recovered.db");
}

std::optional<int> run_db_command(const DbCommand& command, const GlobalOptions& /*global*/,
                                 Output& io) {
  if (command.backup != nullptr && command.backup->parsed()) return backup(command, io);
  if (command.recover != nullptr && command.recover->parsed()) return recover(command, io);
  return std::nullopt;
}

} // namespace ktune::cli
