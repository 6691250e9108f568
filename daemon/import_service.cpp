#include "daemon/import_service.hpp"

#include "daemon/log.hpp"
#include "daemon/replies.hpp"
#include "daemon/reply.hpp"
#include "tableio/formats.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <set>
#include <utility>

namespace ktune::daemon {

void ImportService::request(const std::shared_ptr<Client>& client, protocol::Request request) {
  const Reply reply(client, request.id);
  Done done = [reply](Result<nlohmann::json> result) { reply.answer(result); };
  // Reading a table of thousands of rows takes a while: it runs on the helper thread (it touches
  // nothing but the request), the store is written back on the io thread.
  asio::post(m_ctx.offload, [this, done = std::move(done), body = std::move(request.body)]() mutable {
    auto run = decode_import(body);
    body = nlohmann::json();
    asio::post(m_ctx.io, [this, run = std::move(run), done = std::move(done)]() mutable {
      start(std::move(run), std::move(done));
    });
  });
}

void ImportService::import_text(std::string text, std::string where, tableio::Policy policy,
                                Done done) {
  asio::post(m_ctx.offload, [this, text = std::move(text), where = std::move(where), policy,
                             done = std::move(done)]() mutable {
    auto table = tableio::read_table(text, where);
    Result<ImportRun> run = table ? Result<ImportRun>(ImportRun(std::move(*table), policy))
                                  : Result<ImportRun>(table.error());
    asio::post(m_ctx.io, [this, run = std::move(run), done = std::move(done)]() mutable {
      start(std::move(run), std::move(done));
    });
  });
}

// One import in progress: its run and whether its kernel specs are written.
struct ImportService::Import {
  explicit Import(ImportRun r) : run(std::move(r)) {}
  ImportRun run;
  bool prepared = false;
};

void ImportService::start(Result<ImportRun> run, Done done) {
  if (m_stopping) return;
  if (!run) return done(run.error());
  step(std::make_shared<Import>(std::move(*run)), std::move(done));
}

void ImportService::step(std::shared_ptr<Import> import, Done done) {
  ImportRun& run = import->run;
  std::vector<WinnerRecord> upserted;
  auto stored = import->prepared
                    ? m_ctx.writer.write_now("a step of an import",
                                             [&](Store& store) {
                                               return run.step(store, k_import_step_rows, &upserted);
                                             })
                    : m_ctx.writer.write_now("the start of an import",
                                             [&](Store& store) { return run.prepare(store); });
  if (!stored) upserted.clear(); // the step was rolled back
  // A database that takes no writes for now (locked by another process, a full disk): the write
  // is tried again later, for up to k_import_wait; the loop goes on serving meanwhile.
  if (!stored && is_transient(stored.error()) && run.waited() < k_import_wait) {
    auto timer = std::make_shared<asio::steady_timer>(m_ctx.io, k_import_retry);
    run.wait(k_import_retry);
    timer->async_wait([this, timer, import = std::move(import),
                       done = std::move(done)](const boost::system::error_code& ec) mutable {
      if (ec || m_stopping) return;
      step(std::move(import), std::move(done));
    });
    return;
  }
  learn(upserted);
  if (!stored && !import->prepared) return done(internal_error(stored.error()));
  if (!stored) {
    KTUNE_LOG(warn) << "import stopped after " << run.rows_done() << " rows: "
                    << stored.error().message;
    return done(make_error(ErrorCode::internal,
                           stored.error().message + " (the rows before this step of " +
                               std::to_string(k_import_step_rows) + " are imported)"));
  }
  if (import->prepared && run.done()) return done(run.reply());
  import->prepared = true;
  asio::post(m_ctx.io, [this, import = std::move(import), done = std::move(done)]() mutable {
    if (m_stopping) return;
    step(std::move(import), std::move(done));
  });
}

void ImportService::learn(const std::vector<WinnerRecord>& upserted) {
  std::set<std::string> fingerprints;
  for (const auto& winner : upserted) {
    m_ctx.learn(winner);
    fingerprints.insert(winner.fingerprint);
  }
  // Imported devices can be named by fingerprint in lookups from now on.
  for (const auto& fingerprint : fingerprints) {
    if (auto device = m_ctx.store.get_device(fingerprint); device && device->has_value()) {
      m_ctx.devices.remember(**device);
    }
  }
}

} // namespace ktune::daemon
