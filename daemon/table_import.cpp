#include "daemon/table_import.hpp"

#include "core/protocol.hpp"
#include "tableio/formats.hpp"

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace ktune::daemon {

namespace {

using nlohmann::json;
using tableio::Policy;
using tableio::RowKey;
using tableio::Table;
using tableio::TableRow;

Error row_error(std::size_t index, const TableRow& row, const Error& cause) {
  return make_error(cause.code, "import: row " + std::to_string(index) + " (" +
                                    tableio::to_string(row.key()) + "): " + cause.message);
}

// The store's winner of `winner`'s key as a table row: config, median, and the time its result
// was measured (the winner's update time when the result row is gone or the winner is old).
Result<TableRow> stored_row(const Store& store, const WinnerRecord& winner) {
  TableRow row;
  row.kernel = winner.kernel;
  row.shape = winner.shape;
  row.dtype = winner.dtype;
  row.fingerprint = winner.fingerprint;
  row.source_hash = winner.source_hash;
  row.config = nlohmann::ordered_json::parse(winner.config, nullptr, false);
  if (row.config.is_discarded()) row.config = nlohmann::ordered_json(winner.config);
  row.median_ms = winner.median_ms;
  row.gflops = winner.gflops;
  row.time_ms = winner.updated_at;
  if (winner.result_id != 0) {
    auto results = store.results_for_key(winner.kernel, winner.source_hash, winner.shape,
                                         winner.dtype, winner.fingerprint);
    if (!results) return results.error();
    for (const ResultRecord& result : *results) {
      if (result.id == winner.result_id) {
        row.stats = result.stats;
        row.samples_ms = result.samples_ms;
        if (result.created_at != 0) row.time_ms = result.created_at;
        break;
      }
    }
  }
  return row;
}

std::int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

json side(const TableRow& row, const char* from) {
  return json{{"config", json(row.config)}, {"median_ms", row.median_ms},
              {"time_ms", row.time_ms},     {"host", row.host},
              {"from", from}};
}

} // namespace

ImportRun::ImportRun(Table table, Policy policy) : m_table(std::move(table)), m_policy(policy) {}

Result<void> ImportRun::prepare(Store& store) {
  // Params order per kernel source: the stored spec, else the one the table carries.
  for (const auto& kernel : m_table.kernels) {
    auto kernel_error = [&](const Error& cause) {
      return make_error(cause.code, "import: kernel " + kernel.name + " source " +
                                        kernel.source_hash + ": " + cause.message);
    };
    auto stored = store.kernel_spec(kernel.name, kernel.source_hash);
    if (!stored) return kernel_error(stored.error());
    if (!*stored && !kernel.spec_text.empty()) {
      if (auto put = store.upsert_kernel(kernel.name, kernel.source_hash, kernel.spec_text); !put)
        return kernel_error(put.error());
    }
    m_orders[{kernel.name, kernel.source_hash}] =
        tableio::spec_param_order(*stored ? **stored : kernel.spec_text);
  }
  return {};
}

namespace {

// The device of a row, stored when the store does not know its fingerprint yet.
Result<void> remember_device(Store& store, const TableRow& row) {
  auto device = store.get_device(row.fingerprint);
  if (!device) return device.error();
  if (*device) return {};
  DeviceInfo info;
  info.name = row.device_name.empty() ? "imported" : row.device_name;
  info.fingerprint = row.fingerprint;
  info.details = row.device.is_object() ? row.device : json::object();
  return store.upsert_device(info);
}

// The history of an imported row: a done job of strategy "import" with one ok result holding the
// row's figures. Returns {job id, result id}.
Result<std::pair<std::int64_t, std::int64_t>> store_history(Store& store, const TableRow& row) {
  JobRecord job;
  job.kernel = row.kernel;
  job.source_hash = row.source_hash;
  job.shape = row.shape;
  job.dtype = row.dtype;
  job.device = row.device_name.empty() ? "imported" : row.device_name;
  job.fingerprint = row.fingerprint;
  job.strategy = "import";
  job.state = JobState::done;
  job.total = 1;
  job.done = 1;
  job.created_at = job.started_at = job.finished_at = now_ms();
  auto job_id = store.create_job(job);
  if (!job_id) return job_id.error();

  ResultRecord result;
  result.job_id = *job_id;
  result.kernel = row.kernel;
  result.source_hash = row.source_hash;
  result.shape = row.shape;
  result.dtype = row.dtype;
  result.fingerprint = row.fingerprint;
  result.config = row.config_text();
  result.config_index = 0;
  result.status = CandidateStatus::ok;
  result.reason = "imported" + (row.host.empty() ? std::string() : " from " + row.host);
  result.stats = row.stats;  // n == 0: only the median is known
  result.samples_ms = row.samples_ms;
  result.stats.median_ms = row.median_ms;
  result.gflops = row.gflops;
  result.gbps = row.gbps;
  result.compile_ms = row.compile_ms;
  result.created_at = row.time_ms;
  auto result_id = store.insert_result(result);
  if (!result_id) return result_id.error();
  return std::make_pair(*job_id, *result_id);
}

// Makes the row (its job and result) its key's winner; `upserted` (optional) receives the
// winner as stored.
Result<void> store_winner(Store& store, const TableRow& row, std::int64_t job_id,
                          std::int64_t result_id, std::vector<WinnerRecord>* upserted) {
  WinnerRecord winner;
  winner.kernel = row.kernel;
  winner.source_hash = row.source_hash;
  winner.shape = row.shape;
  winner.dtype = row.dtype;
  winner.fingerprint = row.fingerprint;
  winner.result_id = result_id;
  winner.job_id = job_id;
  winner.config = row.config_text();
  winner.median_ms = row.median_ms;
  winner.gflops = row.gflops;
  if (auto put = store.upsert_winner(winner); !put) return put.error();
  if (!upserted) return {};
  auto written = store.find_winner(row.kernel, row.source_hash, row.shape, row.dtype,
                                   row.fingerprint);
  if (!written) return written.error();
  if (*written) upserted->push_back(**written);
  return {};
}

} // namespace

Result<std::vector<std::string>> ImportRun::param_order(const Store& store, const TableRow& row) {
  const auto key = std::make_pair(row.kernel, row.source_hash);
  auto it = m_orders.find(key);
  if (it == m_orders.end()) {
    auto stored = store.kernel_spec(row.kernel, row.source_hash);
    if (!stored) return stored.error();
    it = m_orders.emplace(key, *stored ? tableio::spec_param_order(**stored)
                                       : std::vector<std::string>{}).first;
  }
  return it->second;
}

Result<ImportRun::Verdict> ImportRun::weigh(const Store& store, const TableRow& row) {
  auto existing = store.find_winner(row.kernel, row.source_hash, row.shape, row.dtype,
                                    row.fingerprint);
  if (!existing) return existing.error();
  if (!*existing) {
    ++m_imported;
    return Verdict::take;
  }
  auto base = stored_row(store, **existing);
  if (!base) return base.error();
  if (tableio::same_config(base->config, row.config) && base->median_ms == row.median_ms &&
      base->time_ms == row.time_ms) {
    ++m_unchanged;
    return Verdict::unchanged;
  }
  const tableio::Decision decision = tableio::decide(*base, row, m_policy);
  const bool take = decision.take_incoming;
  ++(take ? m_replaced : m_kept);
  if (decision.conflict) {
    m_conflicts.push_back(json{{"kernel", row.kernel},
                               {"shape", row.shape},
                               {"dtype", row.dtype},
                               {"fingerprint", row.fingerprint},
                               {"source_hash", row.source_hash},
                               {"kept", take ? side(row, "import") : side(*base, "store")},
                               {"dropped", take ? side(*base, "store") : side(row, "import")},
                               {"why", decision.why}});
  }
  return take ? Verdict::take : Verdict::keep;
}

Result<void> ImportRun::step(Store& store, std::size_t max_rows,
                             std::vector<WinnerRecord>* upserted) {
  const std::size_t end = std::min(m_table.rows.size(), m_next + max_rows);
  for (; m_next < end; ++m_next) {
    const std::size_t index = m_next;
    TableRow row = m_table.rows[index];
    auto order = param_order(store, row);
    if (!order) return row_error(index, row, order.error());
    row.config = tableio::reorder_config(row.config, *order);
    auto verdict = weigh(store, row);
    if (!verdict) return row_error(index, row, verdict.error());
    if (*verdict == Verdict::unchanged) continue;
    if (m_known_devices.insert(row.fingerprint).second) {
      if (auto r = remember_device(store, row); !r) return row_error(index, row, r.error());
    }
    auto history = store_history(store, row);
    if (!history) return row_error(index, row, history.error());
    m_jobs.push_back(history->first);
    if (*verdict != Verdict::take) continue;
    if (auto r = store_winner(store, row, history->first, history->second, upserted); !r) {
      return row_error(index, row, r.error());
    }
  }
  return {};
}

json ImportRun::reply() const {
  return json{{"rows", m_table.rows.size()}, {"imported", m_imported}, {"replaced", m_replaced},
              {"kept", m_kept},              {"unchanged", m_unchanged},
              {"policy", tableio::to_string(m_policy)},
              {"jobs", m_jobs},              {"conflicts", m_conflicts}};
}

Result<json> import_table(Store& store, const Table& table, Policy policy,
                          std::vector<WinnerRecord>* upserted) {
  ImportRun run(table, policy);
  if (auto r = run.prepare(store); !r) return r.error();
  if (auto r = run.step(store, table.rows.size(), upserted); !r) return r.error();
  return run.reply();
}

Result<ImportRun> decode_import(const json& body) {
  auto table_it = body.find("table");
  if (table_it == body.end() || !table_it->is_object()) {
    return make_error(ErrorCode::bad_request,
                      "import: field 'table' must be an object (the json export schema, "
                      "docs/export-format.md)");
  }
  Policy policy = Policy::faster;
  auto policy_it = body.find("policy");
  if (policy_it != body.end() && !policy_it->is_null()) {
    const auto parsed = policy_it->is_string()
                            ? tableio::parse_policy(policy_it->get<std::string>())
                            : std::nullopt;
    if (!parsed) {
      return make_error(ErrorCode::bad_request,
                        "import: field 'policy' must be \"faster\", \"newer\" or \"keep\", found " +
                            policy_it->dump());
    }
    policy = *parsed;
  }
  auto table = tableio::table_from_json(nlohmann::ordered_json(*table_it), "import: table");
  if (!table) return make_error(ErrorCode::bad_request, table.error().message);
  return ImportRun(std::move(*table), policy);
}

} // namespace ktune::daemon
