#include "db/salvage.hpp"

#include "db/migrations.hpp"
#include "db/sqlite.hpp"
#include "db/store.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sys/stat.h>

namespace ktune {

namespace {

using db::DbRef;

// Rowids probed past the last one known, when the table's largest rowid cannot be read.
constexpr std::int64_t k_blind_probe = 100000;

struct Closer {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
using Connection = std::unique_ptr<sqlite3, Closer>;

struct Finalizer {
  void operator()(sqlite3_stmt* stmt) const noexcept { sqlite3_finalize(stmt); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, Finalizer>;

Error db_error(const std::string& op, const std::string& path, sqlite3* db) {
  return make_error(ErrorCode::db_error, op + " on " + path + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

Result<Connection> open(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Connection db(raw);
  if (rc != SQLITE_OK) return db_error("open", path, raw);
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

Stmt prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) return Stmt();
  return Stmt(raw);
}

Result<void> refuse_existing(const std::string& destination) {
  struct stat st {};
  if (::lstat(destination.c_str(), &st) == 0) {
    return make_error(ErrorCode::io_error, destination + " exists; name a new file (nothing is overwritten)");
  }
  return {};
}

// integrity_check on `db`; the first finding when it fails.
Result<void> check(sqlite3* db, const std::string& path) {
  Stmt stmt = prepare(db, "PRAGMA integrity_check(3)");
  if (!stmt) return db_error("integrity_check", path, db);
  std::string findings;
  for (;;) {
    const int rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return db_error("integrity_check", path, db);
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt.get(), 0));
    const std::string line = text ? text : "";
    if (line == "ok") return {};
    findings += (findings.empty() ? "" : "; ") + line;
  }
  if (findings.empty()) return {};
  return make_error(ErrorCode::db_corrupt, "the copy " + path + " fails its check: " + findings);
}

std::string quoted(const std::string& name) {
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// Column names of `table` in `db` (PRAGMA table_info); empty when it cannot be read.
std::vector<std::string> columns(sqlite3* db, const std::string& table) {
  std::vector<std::string> names;
  Stmt stmt = prepare(db, "PRAGMA table_info(" + quoted(table) + ")");
  if (!stmt) return names;
  while (sqlite3_step(stmt.get()) == SQLITE_ROW) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt.get(), 1));
    if (text != nullptr) names.emplace_back(text);
  }
  return names;
}

// Copies one row from `select` (after a successful step) through `insert`. False on an error.
bool copy_row(sqlite3_stmt* select, sqlite3_stmt* insert, int columns, int first) {
  sqlite3_reset(insert);
  sqlite3_clear_bindings(insert);
  for (int i = 0; i < columns; ++i) {
    if (sqlite3_bind_value(insert, i + 1, sqlite3_column_value(select, first + i)) != SQLITE_OK) {
      return false;
    }
  }
  const int rc = sqlite3_step(insert);
  return rc == SQLITE_DONE || rc == SQLITE_CONSTRAINT || (rc & 0xff) == SQLITE_CONSTRAINT;
}

SalvagedTable salvage_table(sqlite3* source, sqlite3* destination, const std::string& table) {
  SalvagedTable out;
  out.name = table;
  const std::vector<std::string> wanted = columns(destination, table);
  const std::vector<std::string> present = columns(source, table);
  std::vector<std::string> common;
  for (const auto& c : wanted) {
    if (std::find(present.begin(), present.end(), c) != present.end()) common.push_back(c);
  }
  if (common.empty()) {
    out.error = present.empty() ? "its definition cannot be read from the source"
                                : "no column in common with the current schema";
    return out;
  }
  std::string list;
  std::string marks;
  for (const auto& c : common) {
    list += (list.empty() ? "" : ", ") + quoted(c);
    marks += marks.empty() ? "?" : ", ?";
  }
  const int n = static_cast<int>(common.size());
  Stmt insert = prepare(destination, "INSERT OR IGNORE INTO " + quoted(table) + " (" + list +
                                         ") VALUES (" + marks + ")");
  if (!insert) {
    out.error = std::string("cannot prepare the copy: ") + sqlite3_errmsg(destination);
    return out;
  }
  std::int64_t last = 0;
  Stmt scan = prepare(source, "SELECT rowid, " + list + " FROM " + quoted(table) + " ORDER BY rowid");
  if (!scan) {
    out.error = std::string("cannot read it: ") + sqlite3_errmsg(source);
    return out;
  }
  for (;;) {
    const int rc = sqlite3_step(scan.get());
    if (rc == SQLITE_DONE) return out;
    if (rc != SQLITE_ROW) break;
    last = sqlite3_column_int64(scan.get(), 0);
    if (copy_row(scan.get(), insert.get(), n, 1)) ++out.copied;
  }
  // Damage: the rest row by row, by rowid.
  out.scan_broke = true;
  scan.reset();
  std::int64_t max_rowid = -1;
  if (Stmt top = prepare(source, "SELECT max(rowid) FROM " + quoted(table))) {
    if (sqlite3_step(top.get()) == SQLITE_ROW) max_rowid = sqlite3_column_int64(top.get(), 0);
  }
  const std::int64_t end = max_rowid > last ? max_rowid : last + k_blind_probe;
  Stmt probe = prepare(source, "SELECT rowid, " + list + " FROM " + quoted(table) + " WHERE rowid = ?");
  if (!probe) {
    out.error = std::string("cannot read it by rowid: ") + sqlite3_errmsg(source);
    return out;
  }
  for (std::int64_t rowid = last + 1; rowid <= end; ++rowid) {
    sqlite3_reset(probe.get());
    sqlite3_bind_int64(probe.get(), 1, rowid);
    const int rc = sqlite3_step(probe.get());
    if (rc == SQLITE_ROW) {
      if (copy_row(probe.get(), insert.get(), n, 1)) ++out.copied;
    } else if (rc != SQLITE_DONE) {
      ++out.unreadable;
    }
  }
  return out;
}

} // namespace

Result<SalvageReport> backup_database(const std::string& source, const std::string& destination) {
  if (auto fresh = refuse_existing(destination); !fresh) return fresh.error();
  auto from = open(source, SQLITE_OPEN_READONLY);
  if (!from) return from.error();
  auto to = open(destination, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (!to) return to.error();
  sqlite3_backup* backup = sqlite3_backup_init(to->get(), "main", from->get(), "main");
  if (backup == nullptr) return db_error("backup", destination, to->get());
  const int rc = sqlite3_backup_step(backup, -1);
  SalvageReport report;
  report.pages = sqlite3_backup_pagecount(backup);
  sqlite3_backup_finish(backup);
  if (rc != SQLITE_DONE) {
    const Error error = db_error("backup of " + source + " to", destination, to->get());
    to.value().reset();
    std::filesystem::remove(destination);
    return error;
  }
  if (auto sound = check(to->get(), destination); !sound) return sound.error();
  return report;
}

Result<SalvageReport> recover_database(const std::string& source, const std::string& destination) {
  if (auto fresh = refuse_existing(destination); !fresh) return fresh.error();
  auto from = open(source, SQLITE_OPEN_READONLY);
  if (!from) return from.error();
  {
    // A new, sound ktune database of the current schema.
    auto created = Store::open(destination, OpenMode::read_write);
    if (!created) return created.error();
  }
  auto to = open(destination, SQLITE_OPEN_READWRITE);
  if (!to) return to.error();
  const DbRef dest{to->get(), destination};
  if (auto off = dest.exec("recover", "PRAGMA foreign_keys = OFF; BEGIN IMMEDIATE"); !off) {
    return off.error();
  }
  std::vector<std::string> tables;
  {
    Stmt list = prepare(to->get(), "SELECT name FROM sqlite_schema WHERE type = 'table' AND name "
                                   "NOT LIKE 'sqlite_%' ORDER BY rootpage");
    if (!list) return db_error("recover", destination, to->get());
    while (sqlite3_step(list.get()) == SQLITE_ROW) {
      tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(list.get(), 0)));
    }
  }
  SalvageReport report;
  for (const auto& table : tables) report.tables.push_back(salvage_table(from->get(), to->get(), table));
  // Device rows copied from a database older than schema v13 have no identity halves yet.
  if (auto filled = db::fill_device_identities(dest); !filled) return filled.error();
  if (auto committed = dest.exec("recover", "COMMIT"); !committed) return committed.error();
  if (auto sound = check(to->get(), destination); !sound) return sound.error();
  return report;
}

} // namespace ktune
