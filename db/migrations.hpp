#pragma once
// Schema migrations of the ktune database, by PRAGMA user_version.
//
// Migration i (0-based) upgrades a database from user_version i to i + 1. run_migrations applies
// every step a database lacks in ONE BEGIN IMMEDIATE transaction, then sets application_id and
// user_version in the same transaction: a database is either fully migrated or untouched.
// A released migration is never edited; a schema change is a new step appended to the list.
#include "db/sqlite.hpp"

#include <span>
#include <string_view>

namespace ktune::db {

// Applies one schema step inside the caller's transaction. Errors name the database path.
using MigrationFn = Result<void> (*)(DbRef db);

struct Migration {
  std::string_view description;  // what the step does, for error messages
  MigrationFn apply;
};

// ktune's schema, in order; its size is k_schema_version (db/store.hpp).
[[nodiscard]] std::span<const Migration> schema_migrations();

// Brings `db` from its user_version up to migrations.size(). Returns how many steps ran (0 when
// the database is already current: nothing is written then). A user_version newer than
// migrations.size() is refused ("db_error" naming both versions). The connection must be
// read-write and outside a transaction.
[[nodiscard]] Result<int> run_migrations(DbRef db, std::span<const Migration> migrations);

// Fills the identity halves (hardware_id, environment; schema v13) of every device row that has
// none, from its stored details: what migration v12 does to earlier rows, and what a recovery
// into a new database does to rows copied from an older one. Inside the caller's transaction.
[[nodiscard]] Result<void> fill_device_identities(DbRef db);

} // namespace ktune::db
