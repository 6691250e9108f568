#pragma once
// import_table: writes an exported table (tableio/table.hpp) into ktuned's store, the daemon side
// of the `import` op (docs/export-format.md § Import).
//
// For each row, against the store's current winner of its key:
//   no winner             -> imported: the row becomes the winner
//   same config and time  -> unchanged: nothing is written
//   otherwise             -> tableio::decide(existing, row, policy) picks the winner; differing
//                            configs are reported as conflicts (kept, dropped, why)
// Every row that is not unchanged is recorded as history: a job (strategy "import", state done,
// one per key) holding one `ok` result with the row's statistics and measurement time. A row that
// wins also becomes the key's winner (upsert_winner, pointing at that result). The device
// (name, details) and the kernel spec texts the table carries are stored when the store lacks
// them, so that lookups and later exports know them. Configs are put in the params order of the
// kernel's spec (stored or carried) so they match what ktuned writes itself.
//
// Every write goes through Store's public API. ImportRun imports a table in steps, so that the
// daemon can commit each step as one transaction and serve other requests between steps; on an
// error the steps before it stay imported and the error says which row failed.
//
// Reply: {"rows":N,"imported":I,"replaced":R,"kept":K,"unchanged":U,"jobs":[ids],
//         "conflicts":[{"kernel","shape","dtype","fingerprint","source_hash",
//                       "kept":{"config","median_ms","time_ms","host","from"},
//                       "dropped":{...},"why"}]}
// ("from" is "store" or "import"). `upserted` (optional) receives every winner written, for the
// daemon's in-memory winner index.
#include "core/result.hpp"
#include "db/store.hpp"
#include "tableio/merge.hpp"
#include "tableio/table.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ktune::daemon {

// One import in progress: prepare() once, step() until done(), then reply().
class ImportRun {
public:
  ImportRun(tableio::Table table, tableio::Policy policy);
  // Records the kernel spec texts the table carries. Errors: the store's, naming the kernel.
  [[nodiscard]] Result<void> prepare(Store& store);
  // Imports the next `max_rows` rows; `upserted` (optional) receives every winner written.
  // Errors: the store's, naming the row.
  [[nodiscard]] Result<void> step(Store& store, std::size_t max_rows,
                                  std::vector<WinnerRecord>* upserted = nullptr);
  [[nodiscard]] bool done() const { return m_next >= m_table.rows.size(); }
  [[nodiscard]] std::size_t rows_done() const { return m_next; }
  [[nodiscard]] nlohmann::json reply() const;
  // How long its steps have waited for a database that took no writes.
  [[nodiscard]] std::chrono::milliseconds waited() const { return m_waited; }
  void wait(std::chrono::milliseconds more) { m_waited += more; }

private:
  // What an imported row does to its key: nothing (the same winner is stored), becomes the
  // winner, or is kept as history only.
  enum class Verdict { unchanged, take, keep };
  // The params order of the row's kernel source: the stored spec's, else the table's.
  [[nodiscard]] Result<std::vector<std::string>> param_order(const Store& store,
                                                             const tableio::TableRow& row);
  // The row against its key's stored winner (tableio::decide); counts it and any conflict.
  [[nodiscard]] Result<Verdict> weigh(const Store& store, const tableio::TableRow& row);

  tableio::Table m_table;
  tableio::Policy m_policy;
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> m_orders;
  std::set<std::string> m_known_devices;
  std::size_t m_next = 0;
  std::chrono::milliseconds m_waited{0};
  std::int64_t m_imported = 0, m_replaced = 0, m_kept = 0, m_unchanged = 0;
  nlohmann::json m_jobs = nlohmann::json::array();
  nlohmann::json m_conflicts = nlohmann::json::array();
};

// The whole table in one go (each write its own transaction).
[[nodiscard]] Result<nlohmann::json> import_table(Store& store, const tableio::Table& table,
                                                  tableio::Policy policy,
                                                  std::vector<WinnerRecord>* upserted = nullptr);

// Decodes the `import` op's body {"table": {...json export schema...}, "policy":
// "faster"|"newer"|"keep" (default faster)} with the table reader. Errors: "bad_request" naming
// the field (table rows and fields as the reader names them).
[[nodiscard]] Result<ImportRun> decode_import(const nlohmann::json& body);

} // namespace ktune::daemon
