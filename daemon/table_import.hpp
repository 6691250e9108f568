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
// Every write goes through Store's public API, each its own BEGIN IMMEDIATE transaction; on an
// error the rows before it stay imported and the error says which row failed.
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

#include <vector>

namespace ktune::daemon {

[[nodiscard]] Result<nlohmann::json> import_table(Store& store, const tableio::Table& table,
                                                  tableio::Policy policy,
                                                  std::vector<WinnerRecord>* upserted = nullptr);

// The `import` op: decodes the request body {"table": {...json export schema...}, "policy":
// "faster"|"newer"|"keep" (default faster)} with the table reader and runs import_table.
// Errors: "bad_request" naming the field (table rows and fields as the reader names them),
// "internal" for a store failure (the message names the row). `upserted` as above, filled also
// when a later row fails.
[[nodiscard]] Result<nlohmann::json> import_op(Store& store, const nlohmann::json& body,
                                               std::vector<WinnerRecord>* upserted = nullptr);

} // namespace ktune::daemon
