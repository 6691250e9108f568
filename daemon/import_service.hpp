#pragma once
// ImportService: the `import` op and the tables of [daemon].table_dirs (daemon/table_watch.hpp).
// A table is decoded on the helper thread, then written through the store writer: its kernel
// specs first (ImportRun::prepare), then steps of k_import_step_rows rows (ImportRun::step,
// daemon/table_import.hpp), each one transaction, with the loop free between them; the reply
// comes after the last one. A write the database does not take for now (busy, full, writes
// waiting) is tried again every k_import_retry for up to k_import_wait in all, then the import
// fails with the cause (the steps before it stay imported). Every
// winner written is handed to `learn` (the lookup service's index) and its device to the device
// registry, so lookups name it by fingerprint. io thread only.
#include "core/protocol.hpp"
#include "core/result.hpp"
#include "daemon/client.hpp"
#include "daemon/devices.hpp"
#include "daemon/store_writer.hpp"
#include "daemon/table_import.hpp"
#include "db/store.hpp"
#include "tableio/merge.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace ktune::daemon {

// Rows of an import written in one step: one transaction, ~3 ms of the loop.
inline constexpr std::size_t k_import_step_rows = 32;
inline constexpr std::chrono::milliseconds k_import_retry{100};
inline constexpr std::chrono::milliseconds k_import_wait{60'000};

// What the import service needs of the daemon. References outlive the service.
struct ImportContext {
  asio::io_context& io;
  asio::thread_pool& offload;     // decodes tables; results come back on `io`
  StoreWriter& writer;            // every step is written through it
  const Store& store;             // an imported winner's device, read back
  DeviceRegistry& devices;        // learns imported devices
  std::function<void(const WinnerRecord&)> learn;  // every winner written
};

class ImportService {
public:
  explicit ImportService(ImportContext context) : m_ctx(std::move(context)) {}

  // The reply of an import or its error; called on the io thread.
  using Done = std::function<void(Result<nlohmann::json>)>;
  // The `import` op: replies on `client` (a client gone by then is not answered; the import
  // still completes).
  void request(const std::shared_ptr<Client>& client, protocol::Request request);
  // Imports the text of a table file (json or T4 written by ktune; `where` names it in errors)
  // the way the op does. `done` is not called when the daemon stops first.
  void import_text(std::string text, std::string where, tableio::Policy policy, Done done);
  // From now on no step is written and no `done` called.
  void set_stopping() { m_stopping = true; }

private:
  struct Import;
  void start(Result<ImportRun> run, Done done);
  // The next write of `import` (its specs, then its rows), then the next step or the reply.
  void step(std::shared_ptr<Import> import, Done done);
  // Hands the winners a step wrote to `learn` and their devices to the registry.
  void learn(const std::vector<WinnerRecord>& upserted);

  ImportContext m_ctx;
  bool m_stopping = false;
};

} // namespace ktune::daemon
