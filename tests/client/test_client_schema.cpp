// libktune_client reads the store only through db/client_query.hpp's queries, and only on a file
// of ktune's application id and a schema version they know; any other file is left alone and
// the answer comes from the spec file, with the reason in the client's last error.
#include "tests/support/paths.hpp"
#include "db/client_query.hpp"
#include "db/store.hpp"
#include "ktune/client.h"
#include "tests/report/sample_jobs.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <string>

using ktune::test::TempDir;

namespace {

// Sets an integer PRAGMA of the file at `path` (a writer of its own, as another program would).
void set_pragma(const std::string& path, const std::string& name, std::int64_t value) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  const std::string sql = "PRAGMA " + name + " = " + std::to_string(value);
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

struct Lookup {
  ktune_status status = KTUNE_OK;
  ktune_answer answer{};
  std::string error;
};

// One lookup of the sample job's key with no daemon: the database, else the spec file.
Lookup lookup_offline(const TempDir& dir, const std::string& db) {
  const std::string socket = (dir.path() / "none.sock").string();
  const std::string kernels = ktune::test::source_path("/kernels_src");
  ktune_options options;
  ktune_options_init(&options);
  options.socket_path = socket.c_str();
  options.db_path = db.c_str();
  options.kernel_dirs = kernels.c_str();
  options.cache_ttl_ms = -1;
  ktune_client* client = nullptr;
  REQUIRE(ktune_connect(&options, &client) == KTUNE_OK);
  REQUIRE(ktune_set_table(client, "") == KTUNE_OK);
  Lookup out;
  out.status = ktune_lookup(client, "gemm", "M=256,N=256,K=256", "f32", "cpu", &out.answer);
  out.error = ktune_last_error(client);
  ktune_close(client);
  return out;
}

} // namespace

TEST_CASE("the client reads a store only of a schema its queries know", "[client]") {
  TempDir dir;
  const std::string db = (dir.path() / "ktune.db").string();
  {
    auto store = ktune::Store::open(db, ktune::OpenMode::read_write);
    REQUIRE(store);
    ktune::test::write_sample_jobs(*store);
  }

  SECTION("the current schema: the winner from the database") {
    const Lookup got = lookup_offline(dir, db);
    REQUIRE(got.status == KTUNE_OK);
    CHECK(got.answer.rung == KTUNE_RUNG_EXACT);
    CHECK(got.answer.source == KTUNE_SOURCE_DATABASE);
  }
  SECTION("a newer schema: the database is not read, the [default] comes from the spec file") {
    set_pragma(db, "user_version", ktune::db::k_client_query_last_schema + 1);
    const Lookup got = lookup_offline(dir, db);
    REQUIRE(got.status == KTUNE_OK);
    CHECK(got.answer.rung == KTUNE_RUNG_DEFAULT);
    CHECK(got.answer.source == KTUNE_SOURCE_SPEC);
    CHECK(got.error.find("schema version " + std::to_string(ktune::db::k_client_query_last_schema + 1)) !=
          std::string::npos);
  }
  SECTION("another program's file: not read") {
    set_pragma(db, "application_id", 42);
    const Lookup got = lookup_offline(dir, db);
    REQUIRE(got.status == KTUNE_OK);
    CHECK(got.answer.source == KTUNE_SOURCE_SPEC);
    CHECK(got.error.find("not a ktune database (application_id 42)") != std::string::npos);
  }
}

TEST_CASE("the client's queries run on a store of the current schema", "[client]") {
  TempDir dir;
  const std::string db = (dir.path() / "ktune.db").string();
  REQUIRE(ktune::Store::open(db, ktune::OpenMode::read_write));
  sqlite3* handle = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  for (const char* sql : {ktune::db::k_client_winners_query, ktune::db::k_client_spec_query}) {
    sqlite3_stmt* statement = nullptr;
    INFO(sql);
    CHECK(sqlite3_prepare_v2(handle, sql, -1, &statement, nullptr) == SQLITE_OK);
    sqlite3_finalize(statement);
  }
  sqlite3_close(handle);
  CHECK(ktune::db::client_query_refusal(ktune::k_application_id, ktune::k_schema_version).empty());
  CHECK_FALSE(ktune::db::client_query_refusal(ktune::k_application_id, 0).empty());
}
