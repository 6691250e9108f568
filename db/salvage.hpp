#pragma once
// Copies of a database made without ktuned's read-write connection: `ktune db backup` and
// `ktune db recover` (cli/db_command.hpp). Neither writes to the source, which is opened
// read-only (SQLite's rule for every process but ktuned).
//
// backup_database: SQLite's online backup API, page by page in one read transaction of the
// source, so a ktuned writing meanwhile neither waits nor tears the copy (WAL readers never
// block the writer). The copy is checked (integrity_check) before it is reported.
//
// recover_database: for a damaged source (garbage pages, a torn write). The destination is a
// new, sound ktune database (Store::open, schema migrated); every table is copied row by row in
// rowid order, the columns both schemas have; where a scan meets damage the rest of the table is
// read by rowid, one row at a time, so that every row still reachable through an intact path is
// kept. What could not be read is counted per table. The destination is checked at the end.
#include "core/result.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace ktune {

struct SalvagedTable {
  std::string name;
  std::int64_t copied = 0;         // rows written to the destination
  std::int64_t unreadable = 0;     // rowids that exist but could not be read
  bool scan_broke = false;         // the ordered scan met damage (rows then read by rowid)
  std::string error;               // a table that could not be read at all: why
};

struct SalvageReport {
  std::vector<SalvagedTable> tables;
  std::int64_t pages = 0;          // pages copied (backup)
};

// Errors: io_error (the destination exists), db_error (either database, naming the file).
[[nodiscard]] Result<SalvageReport> backup_database(const std::string& source,
                                                    const std::string& destination);
[[nodiscard]] Result<SalvageReport> recover_database(const std::string& source,
                                                     const std::string& destination);

} // namespace ktune
