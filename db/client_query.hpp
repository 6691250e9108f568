#pragma once
// The store as the runtime lookup library (client/, libktune_client) reads it: the only SQL
// against the store's tables outside db/, kept here beside the schema. The client opens the
// database read-only and uses these queries only on a file whose application id is ktune's and
// whose schema version lies in [k_client_query_first_schema, k_client_query_last_schema];
// otherwise it answers without the database (the [default] from the spec file) and says why.
//
// A migration that changes the schema fails the build (db/store.cpp: a static_assert that
// k_client_query_last_schema is k_schema_version) until these queries are checked against it
// and the range moved. Header-only and SQLite-free: the client compiles it in.
#include <cstdint>
#include <string>

namespace ktune::db {

inline constexpr std::int32_t k_client_query_application_id = 0x6b74756e;  // "ktun"
// Every column the queries name exists since schema 1.
inline constexpr int k_client_query_first_schema = 1;
inline constexpr int k_client_query_last_schema = 13;

// The winners of (kernel ?1, dtype ?2) under the source hash of the kernel's newest job and the
// fingerprint of its newest job on device ?3: shape, config, median_ms, job_id.
inline constexpr const char* k_client_winners_query =
    "SELECT w.shape, w.config, w.median_ms, w.job_id FROM winners w "
    "WHERE w.kernel = ?1 AND w.dtype = ?2 "
    "AND w.source_hash = (SELECT source_hash FROM jobs WHERE kernel = ?1 ORDER BY id DESC LIMIT 1) "
    "AND w.fingerprint = (SELECT fingerprint FROM jobs WHERE kernel = ?1 AND device = ?3 "
    "ORDER BY id DESC LIMIT 1)";

// The spec text of kernel ?1 at the source hash of its newest job.
inline constexpr const char* k_client_spec_query =
    "SELECT spec_text FROM kernels WHERE name = ?1 AND source_hash = "
    "(SELECT source_hash FROM jobs WHERE kernel = ?1 ORDER BY id DESC LIMIT 1)";

// "" when the queries may read a file of this application id and schema version; otherwise
// why not, for the client's error text.
[[nodiscard]] inline std::string client_query_refusal(std::int64_t application_id, std::int64_t schema_version) {
  if (application_id != k_client_query_application_id) {
    return "not a ktune database (application_id " + std::to_string(application_id) + ")";
  }
  if (schema_version < k_client_query_first_schema || schema_version > k_client_query_last_schema) {
    return "schema version " + std::to_string(schema_version) + ", this client reads versions " +
           std::to_string(k_client_query_first_schema) + " to " + std::to_string(k_client_query_last_schema) +
           " (a newer ktuned wrote it: use its libktune_client)";
  }
  return {};
}

} // namespace ktune::db
