// ImportService over real parts (service_rig.hpp): a table file's text is decoded off the loop
// and written through the store writer in steps of k_import_step_rows rows; every winner reaches
// the lookup side (`learn`) and its device the registry; a locked database makes the steps wait
// and the import completes once it takes writes again; a malformed request is a bad_request.
#include <catch2/catch.hpp>

#include "daemon/import_service.hpp"
#include "tableio/formats.hpp"
#include "tests/daemon/service_rig.hpp"
#include "tests/tableio/fixtures.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace ktune;
using namespace ktune::daemon;
using nlohmann::json;

namespace {

const std::string k_fingerprint = "00112233445566778899aabbccddeeff";

struct Rig : ktune::test::ServiceRig {
  ImportContext context() {
    return ImportContext{io, offload, writer, store, devices,
                         [this](const WinnerRecord& w) { learnt.push_back(w); }};
  }
  // A table of `rows` gemm keys (distinct shapes), as the json text ktune export writes.
  static std::string table_text(int rows) {
    std::vector<tableio::TableRow> list;
    for (int i = 0; i < rows; ++i) {
      const std::string n = std::to_string(64 * (i + 1));
      list.push_back(ktune::test::make_row("M=" + n + ",N=64,K=64", ktune::test::k_config_a,
                                           1.0 + i, 100'000 + i, k_fingerprint));
    }
    auto table = ktune::test::make_table(std::move(list));
    table.kernels.push_back({"gemm", ktune::test::k_gemm_hash, ktune::test::gemm_spec()});
    return tableio::write_json(table);
  }
  std::optional<Result<json>> import(ImportService& service, std::string text) {
    std::optional<Result<json>> reply;
    service.import_text(std::move(text), "table.json", tableio::Policy::faster,
                        [&reply](Result<json> r) { reply = std::move(r); });
    run_until([&] { return reply.has_value(); }, 4000);
    return reply;
  }
  std::vector<WinnerRecord> learnt;
};

} // namespace

TEST_CASE("ImportService: a table is written in steps and every winner is learnt",
          "[daemon][import_service]") {
  Rig rig;
  ImportService service(rig.context());
  const int rows = static_cast<int>(2 * k_import_step_rows + 5);  // three steps
  auto reply = rig.import(service, Rig::table_text(rows));
  REQUIRE(reply);
  REQUIRE(*reply);
  CHECK((**reply).at("rows") == rows);
  CHECK((**reply).at("imported") == rows);
  CHECK((**reply).at("jobs").size() == static_cast<std::size_t>(rows));
  CHECK(rig.learnt.size() == static_cast<std::size_t>(rows));
  auto winners = rig.store.all_winners();
  REQUIRE(winners);
  CHECK(winners->size() == static_cast<std::size_t>(rows));
  // The imported device is known by fingerprint from now on.
  auto device = rig.devices.resolve(k_fingerprint);
  REQUIRE(device);
  CHECK(device->name == "cpu");  // the table's name for it, not the fingerprint
  CHECK_FALSE(device->local);

  // The same table again changes nothing.
  auto again = rig.import(service, Rig::table_text(rows));
  REQUIRE(again);
  REQUIRE(*again);
  CHECK((**again).at("unchanged") == rows);
}

TEST_CASE("ImportService: a locked database makes the steps wait and nothing is lost",
          "[daemon][import_service]") {
  Rig rig;
  ImportService service(rig.context());
  auto lock = std::make_unique<ktune::test::DatabaseLock>(rig.config.db);
  std::optional<Result<json>> reply;
  service.import_text(Rig::table_text(40), "table.json", tableio::Policy::faster,
                      [&reply](Result<json> r) { reply = std::move(r); });
  // Retries pass without an answer while the lock is held: the kernel specs' write and the
  // rows' steps alike wait for it.
  rig.run_until([] { return false; }, 400);
  CHECK_FALSE(reply);
  lock.reset();
  REQUIRE(rig.run_until([&] { return reply.has_value(); }, 4000));
  REQUIRE(*reply);
  CHECK((**reply).at("imported") == 40);
  auto winners = rig.store.all_winners();
  REQUIRE(winners);
  CHECK(winners->size() == 40);
}

TEST_CASE("ImportService: the import op answers a malformed body with bad_request",
          "[daemon][import_service]") {
  Rig rig;
  ImportService service(rig.context());
  auto client = std::make_shared<ktune::test::RecordingClient>();
  service.request(client, Rig::request("import", {{"table", 5}}, 9));
  REQUIRE(rig.run_until([&] { return !client->sent.empty(); }));
  const json& sent = client->sent.front();
  CHECK(sent.at("id") == 9);
  CHECK(sent.at("ok") == false);
  CHECK(sent.at("error").at("code") == "bad_request");
}
