#include "db/sqlite.hpp"

#include <cmath>
#include <limits>
#include <utility>

namespace ktune::db {

namespace {

// The code an SQLite result code is reported under: the conditions that pass by themselves (another
// process holds the lock, the disk is full, the disk failed) have their own codes, so a writer can
// wait them out instead of giving up; everything else is "db_error".
ErrorCode code_for(int rc) {
  switch (rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return ErrorCode::db_busy;
  case SQLITE_FULL: return ErrorCode::db_full;
  case SQLITE_IOERR: return ErrorCode::db_io;
  default: return ErrorCode::db_error;
  }
}

std::string where(std::string_view op, std::string_view path) {
  std::string text;
  text.reserve(op.size() + path.size() + 6);
  text.append(op).append(" on ").append(path).append(": ");
  return text;
}

} // namespace

Error DbRef::error(std::string_view op) const {
  if (handle == nullptr) return error(op, "out of memory");
  return make_error(code_for(sqlite3_extended_errcode(handle)),
                    where(op, path).append(sqlite3_errmsg(handle)));
}

Error DbRef::error(std::string_view op, std::string_view what) const {
  return make_error(ErrorCode::db_error, where(op, path).append(what));
}

Result<void> DbRef::exec(std::string_view op, const char* sql) const {
  char* message = nullptr;
  const int rc = sqlite3_exec(handle, sql, nullptr, nullptr, &message);
  if (rc == SQLITE_OK) return {};
  std::string what = message != nullptr ? message : sqlite3_errstr(rc);
  sqlite3_free(message);
  return make_error(code_for(rc), where(op, path).append(what));
}

Result<std::int64_t> DbRef::query_int(std::string_view op, const char* sql) const {
  auto statement = Statement::prepare(*this, op, sql);
  if (!statement) return statement.error();
  const int rc = statement->step();
  if (rc == SQLITE_ROW) return statement->column_int(0);
  if (rc == SQLITE_DONE) return error(op, std::string("no row from `") + sql + "`");
  return error(op);
}

Result<std::string> DbRef::query_text(std::string_view op, const char* sql) const {
  auto statement = Statement::prepare(*this, op, sql);
  if (!statement) return statement.error();
  const int rc = statement->step();
  if (rc == SQLITE_ROW) return statement->column_text(0);
  if (rc == SQLITE_DONE) return error(op, std::string("no row from `") + sql + "`");
  return error(op);
}

// ---- Statement ----

Result<Statement> Statement::prepare(DbRef db, std::string_view op, std::string_view sql,
                                     Lifetime lifetime) {
  sqlite3_stmt* stmt = nullptr;
  const unsigned flags = lifetime == Lifetime::persistent ? SQLITE_PREPARE_PERSISTENT : 0;
  const int rc = sqlite3_prepare_v3(db.handle, sql.data(), static_cast<int>(sql.size()), flags,
                                    &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return db.error(op);
  }
  if (stmt == nullptr) return db.error(op, "empty SQL statement");
  return Statement(stmt);
}

Statement::Statement(Statement&& other) noexcept
    : m_stmt(std::exchange(other.m_stmt, nullptr)),
      m_bind_rc(std::exchange(other.m_bind_rc, SQLITE_OK)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(m_stmt);
    m_stmt = std::exchange(other.m_stmt, nullptr);
    m_bind_rc = std::exchange(other.m_bind_rc, SQLITE_OK);
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(m_stmt); }

void Statement::note_bind(int rc) {
  if (rc != SQLITE_OK && m_bind_rc == SQLITE_OK) m_bind_rc = rc;
}

void Statement::bind_int(int index, std::int64_t value) {
  note_bind(sqlite3_bind_int64(m_stmt, index, value));
}

void Statement::bind_double(int index, double value) {
  if (std::isnan(value)) note_bind(sqlite3_bind_null(m_stmt, index));
  else note_bind(sqlite3_bind_double(m_stmt, index, value));
}

void Statement::bind_text(int index, std::string_view value) {
  // A null data pointer would bind SQL NULL; an empty view must bind ''.
  const char* data = value.data() != nullptr ? value.data() : "";
  note_bind(sqlite3_bind_text64(m_stmt, index, data, value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
}

void Statement::bind_null(int index) { note_bind(sqlite3_bind_null(m_stmt, index)); }

void Statement::bind_blob(int index, const void* data, std::size_t bytes) {
  if (bytes == 0) return bind_null(index);
  note_bind(sqlite3_bind_blob64(m_stmt, index, data, bytes, SQLITE_TRANSIENT));
}

void Statement::bind_optional_double(int index, const std::optional<double>& value) {
  if (value) bind_double(index, *value);
  else bind_null(index);
}

void Statement::bind_optional_int(int index, const std::optional<std::int64_t>& value) {
  if (value) bind_int(index, *value);
  else bind_null(index);
}

int Statement::step() {
  if (m_bind_rc != SQLITE_OK) return m_bind_rc;
  return sqlite3_step(m_stmt);
}

Result<void> Statement::run(DbRef db, std::string_view op) {
  int rc = step();
  while (rc == SQLITE_ROW) rc = step();
  if (rc != SQLITE_DONE) return db.error(op);
  return {};
}

void Statement::reset() noexcept {
  if (m_stmt == nullptr) return;
  sqlite3_reset(m_stmt);
  sqlite3_clear_bindings(m_stmt);
  m_bind_rc = SQLITE_OK;
}

std::int64_t Statement::column_int(int index) const { return sqlite3_column_int64(m_stmt, index); }

double Statement::column_double(int index) const {
  if (column_is_null(index)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(m_stmt, index);
}

std::string Statement::column_text(int index) const {
  const auto* text = sqlite3_column_text(m_stmt, index);
  if (text == nullptr) return {};
  const int size = sqlite3_column_bytes(m_stmt, index);
  return std::string(reinterpret_cast<const char*>(text), static_cast<std::size_t>(size));
}

std::string Statement::column_blob(int index) const {
  const auto* data = sqlite3_column_blob(m_stmt, index);
  if (data == nullptr) return {};
  const int size = sqlite3_column_bytes(m_stmt, index);
  return std::string(static_cast<const char*>(data), static_cast<std::size_t>(size));
}

bool Statement::column_is_null(int index) const {
  return sqlite3_column_type(m_stmt, index) == SQLITE_NULL;
}

// ---- Transaction ----

Result<Transaction> Transaction::begin(DbRef db, std::string_view op) {
  Transaction tx(db, op);
  tx.m_nested = sqlite3_get_autocommit(db.handle) == 0;
  auto begun = db.exec(op, tx.m_nested ? "SAVEPOINT ktune_nested" : "BEGIN IMMEDIATE");
  if (!begun) return begun.error();
  tx.m_open = true;
  return tx;
}

Transaction::Transaction(Transaction&& other) noexcept
    : m_db(other.m_db), m_op(other.m_op), m_open(std::exchange(other.m_open, false)),
      m_nested(other.m_nested) {}

Transaction::~Transaction() { rollback(); }

Result<void> Transaction::commit() {
  auto committed = m_db.exec(m_op, m_nested ? "RELEASE ktune_nested" : "COMMIT");
  if (!committed) return committed;
  m_open = false;
  return {};
}

void Transaction::rollback() noexcept {
  if (!m_open) return;
  m_open = false;
  // SQLite may already have rolled back on its own (after SQLITE_FULL, SQLITE_IOERR, ...).
  if (sqlite3_get_autocommit(m_db.handle) == 0) {
    sqlite3_exec(m_db.handle, m_nested ? "ROLLBACK TO ktune_nested; RELEASE ktune_nested"
                                       : "ROLLBACK",
                 nullptr, nullptr, nullptr);
  }
}

} // namespace ktune::db
