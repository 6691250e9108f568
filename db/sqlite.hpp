#pragma once
// Thin RAII layer over the SQLite C API, used by the store and its migrations.
//
// DbRef names a connection together with its file path, so every error can say where it happened:
// code "db_error", message "<op> on <path>: <sqlite3_errmsg>". Statement owns one sqlite3_stmt
// (finalized in its destructor); Transaction is one BEGIN IMMEDIATE transaction that rolls back in
// its noexcept destructor unless commit() succeeded. All types are move-only and single-threaded.
#include "core/result.hpp"

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ktune::db {

// A connection (not owned) and the database path it was opened on.
struct DbRef {
  sqlite3* handle = nullptr;
  std::string_view path;

  // "<op> on <path>: <SQLite's message for the last failed call on handle>", code "db_busy" (the
  // database is locked by another connection), "db_full" (the disk is full), "db_io" (the disk
  // failed) or "db_error" (anything else); ktune::is_transient (store.hpp) tells them apart.
  [[nodiscard]] Error error(std::string_view op) const;
  // "db_error": "<op> on <path>: <what>", for failures SQLite did not report itself.
  [[nodiscard]] Error error(std::string_view op, std::string_view what) const;
  // Runs SQL text without results (one or more statements).
  [[nodiscard]] Result<void> exec(std::string_view op, const char* sql) const;
  // Runs a statement that yields one integer (a PRAGMA read, a count).
  [[nodiscard]] Result<std::int64_t> query_int(std::string_view op, const char* sql) const;
  // Runs a statement that yields one text value (PRAGMA journal_mode=...).
  [[nodiscard]] Result<std::string> query_text(std::string_view op, const char* sql) const;
};

// Whether a prepared statement is kept for many uses (SQLITE_PREPARE_PERSISTENT) or used once.
enum class Lifetime { once, persistent };

// One prepared statement. Bind errors are remembered and reported by the next step(), so call
// sites bind without checking and check the step. Text is bound as a copy (SQLITE_TRANSIENT).
class Statement {
public:
  Statement() = default;
  [[nodiscard]] static Result<Statement> prepare(DbRef db, std::string_view op, std::string_view sql,
                                                 Lifetime lifetime = Lifetime::once);

  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  [[nodiscard]] bool valid() const { return m_stmt != nullptr; }
  [[nodiscard]] sqlite3_stmt* get() const { return m_stmt; }

  // Parameters are 1-based, as in SQLite.
  void bind_int(int index, std::int64_t value);
  void bind_double(int index, double value);   // NaN is stored as NULL (SQLite has no NaN)
  void bind_text(int index, std::string_view value);
  void bind_null(int index);
  // An empty blob binds SQL NULL.
  void bind_blob(int index, const void* data, std::size_t bytes);
  void bind_optional_int(int index, const std::optional<std::int64_t>& value);
  void bind_optional_double(int index, const std::optional<double>& value);

  // SQLITE_ROW, SQLITE_DONE or an error code; a failed bind since the last reset() is returned
  // here without stepping.
  [[nodiscard]] int step();
  // Steps until SQLITE_DONE; rows are discarded. Errors name op and path.
  [[nodiscard]] Result<void> run(DbRef db, std::string_view op);
  // Makes the statement ready for another use and drops the bindings. Never fails.
  void reset() noexcept;

  // Columns are 0-based. NULL reads as 0, NaN (for doubles) and "".
  [[nodiscard]] std::int64_t column_int(int index) const;
  [[nodiscard]] double column_double(int index) const;
  [[nodiscard]] std::string column_text(int index) const;
  // The column's bytes (a blob, or text as bytes); empty for NULL.
  [[nodiscard]] std::string column_blob(int index) const;
  [[nodiscard]] bool column_is_null(int index) const;

private:
  explicit Statement(sqlite3_stmt* stmt) : m_stmt(stmt) {}
  void note_bind(int rc);

  sqlite3_stmt* m_stmt = nullptr;
  int m_bind_rc = SQLITE_OK;
};

// Resets a (cached) statement when it leaves scope, so it holds no read transaction or bindings.
class ResetOnExit {
public:
  explicit ResetOnExit(Statement& statement) : m_statement(statement) {}
  ~ResetOnExit() { m_statement.reset(); }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

private:
  Statement& m_statement;
};

// One write transaction, started with BEGIN IMMEDIATE (the write lock is taken up front, so a
// busy database fails here, after busy_timeout, not half way through). Rolls back in the
// destructor unless commit() succeeded.
// BEGIN IMMEDIATE ... COMMIT, rolled back by the destructor unless committed. Inside another
// transaction of the same connection it is a savepoint instead: its commit is the outer
// transaction's to make durable, and its rollback undoes its own statements only.
class Transaction {
public:
  [[nodiscard]] static Result<Transaction> begin(DbRef db, std::string_view op);

  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&& other) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // After a failed commit the transaction is still open and the destructor rolls it back.
  [[nodiscard]] Result<void> commit();

private:
  Transaction(DbRef db, std::string_view op) : m_db(db), m_op(op) {}
  void rollback() noexcept;

  DbRef m_db;
  std::string_view m_op;  // the operation's name: a string literal at every call site
  bool m_open = false;
  bool m_nested = false;  // a savepoint inside an outer transaction
};

} // namespace ktune::db
