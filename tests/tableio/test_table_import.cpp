#include "daemon/table_import.hpp"

#include "tableio/formats.hpp"
#include "tests/tableio/fixtures.hpp"

#include <catch2/catch.hpp>

using namespace ktune;
using namespace ktune::test;
using nlohmann::json;
using tableio::Policy;

namespace {

constexpr const char* k_small = "M=256,N=256,K=256";
constexpr const char* k_big = "M=512,N=512,K=512";
constexpr const char* k_fp = "fp-Test CPU 3000";

Store open_store(const TempDir& dir, const std::string& name = "ktune.db") {
  auto store = Store::open(dir.str() + "/" + name, OpenMode::read_write);
  REQUIRE(store.ok());
  return std::move(store).value();
}

std::optional<WinnerRecord> winner_of(const Store& store, const char* shape) {
  auto winner = store.find_winner("gemm", k_gemm_hash, shape, "f32", k_fp);
  REQUIRE(winner.ok());
  return *winner;
}

// The store's winners: small (A, 2.0 ms, measured at 100 s), big (A, 5.0 ms, at 100 s).
void seed(Store& store) {
  REQUIRE(store.upsert_kernel("gemm", k_gemm_hash, gemm_spec()).ok());
  tune_key(store, "gemm", k_gemm_hash, k_small, "f32", cpu_device(), k_config_a, 2.0, 100'000);
  tune_key(store, "gemm", k_gemm_hash, k_big, "f32", cpu_device(), k_config_a, 5.0, 100'000);
}

// Incoming: small (B, 1.0 ms: faster, measured earlier), big (B, 6.0 ms: slower, later).
tableio::Table incoming() {
  return make_table({make_row(k_small, k_config_b, 1.0, 50'000),
                     make_row(k_big, k_config_b, 6.0, 200'000)});
}

} // namespace

TEST_CASE("import_table into an empty store creates winners, jobs, results and devices",
          "[tableio][import]") {
  TempDir dir;
  Store store = open_store(dir);
  auto table = incoming();
  table.kernels.push_back({"gemm", k_gemm_hash, gemm_spec()});
  std::vector<WinnerRecord> upserted;
  auto reply = daemon::import_table(store, table, Policy::faster, &upserted);
  REQUIRE(reply.ok());
  REQUIRE((*reply)["rows"] == 2);
  REQUIRE((*reply)["imported"] == 2);
  REQUIRE((*reply)["replaced"] == 0);
  REQUIRE((*reply)["kept"] == 0);
  REQUIRE((*reply)["conflicts"].empty());
  REQUIRE((*reply)["jobs"].size() == 2);
  REQUIRE(upserted.size() == 2);

  const auto small = winner_of(store, k_small);
  REQUIRE(small);
  REQUIRE(small->config == k_config_b);
  REQUIRE(small->median_ms == 1.0);
  REQUIRE(small->result_id != 0);

  auto job = store.get_job(small->job_id);
  REQUIRE(job.ok());
  REQUIRE(*job);
  REQUIRE((*job)->strategy == "import");
  REQUIRE((*job)->state == JobState::done);
  REQUIRE((*job)->finished_at != 0);
  auto results = store.job_results(small->job_id);
  REQUIRE(results.ok());
  REQUIRE(results->size() == 1);
  REQUIRE((*results)[0].id == small->result_id);
  REQUIRE((*results)[0].status == CandidateStatus::ok);
  REQUIRE((*results)[0].stats.n == 10);
  REQUIRE((*results)[0].created_at == 50'000);
  REQUIRE((*results)[0].reason == "imported from build-host");

  auto device = store.get_device(k_fp);
  REQUIRE(device.ok());
  REQUIRE(*device);
  REQUIRE((*device)->name == "cpu");
  REQUIRE((*device)->details.at("model") == "Test CPU 3000");
  auto spec = store.kernel_spec("gemm", k_gemm_hash);
  REQUIRE(spec.ok());
  REQUIRE(*spec == gemm_spec());

  SECTION("importing the same table again changes nothing") {
    auto again = daemon::import_table(store, table, Policy::newer);
    REQUIRE(again.ok());
    REQUIRE((*again)["unchanged"] == 2);
    REQUIRE((*again)["jobs"].empty());
    REQUIRE(winner_of(store, k_small)->result_id == small->result_id);
  }
}

TEST_CASE("import_table picks winners by policy and reports conflicts", "[tableio][import]") {
  TempDir dir;
  Store store = open_store(dir);
  seed(store);

  SECTION("faster") {
    auto reply = daemon::import_table(store, incoming(), Policy::faster);
    REQUIRE(reply.ok());
    REQUIRE((*reply)["replaced"] == 1);
    REQUIRE((*reply)["kept"] == 1);
    REQUIRE(winner_of(store, k_small)->config == k_config_b);
    REQUIRE(winner_of(store, k_small)->median_ms == 1.0);
    REQUIRE(winner_of(store, k_big)->config == k_config_a);
    REQUIRE((*reply)["conflicts"].size() == 2);
    const json& c = (*reply)["conflicts"][1];
    REQUIRE(c["shape"] == k_big);
    REQUIRE(c["kept"]["from"] == "store");
    REQUIRE(c["kept"]["config"] == json::parse(k_config_a));
    REQUIRE(c["dropped"]["from"] == "import");
    REQUIRE_THAT(c["why"].get<std::string>(), Catch::StartsWith("faster: existing 5 ms"));
  }
  SECTION("newer") {
    auto reply = daemon::import_table(store, incoming(), Policy::newer);
    REQUIRE(reply.ok());
    REQUIRE(winner_of(store, k_small)->config == k_config_a);  // stored one measured later
    REQUIRE(winner_of(store, k_big)->config == k_config_b);
    REQUIRE(winner_of(store, k_big)->median_ms == 6.0);
  }
  SECTION("keep") {
    auto reply = daemon::import_table(store, incoming(), Policy::keep);
    REQUIRE(reply.ok());
    REQUIRE((*reply)["kept"] == 2);
    REQUIRE(winner_of(store, k_small)->config == k_config_a);
    REQUIRE(winner_of(store, k_big)->config == k_config_a);
    // The dropped rows are still recorded as history.
    auto history = store.results_for_key("gemm", k_gemm_hash, k_small, "f32", k_fp);
    REQUIRE(history.ok());
    REQUIRE(history->size() == 3);
    REQUIRE(history->back().config == k_config_b);
  }
}

TEST_CASE("import_table puts configs in the spec's params order", "[tableio][import]") {
  TempDir dir;
  Store store = open_store(dir);
  REQUIRE(store.upsert_kernel("gemm", k_gemm_hash, gemm_spec()).ok());
  // What the daemon decodes from a request: nlohmann::json sorts keys (BK first).
  auto table = make_table({make_row(k_small, k_config_a, 1.0, 1)});
  const json wire = json(tableio::table_to_json(table));
  auto decoded = tableio::table_from_json(nlohmann::ordered_json(wire), "request");
  REQUIRE(decoded.ok());
  REQUIRE(decoded->rows[0].config.begin().key() == "BK");
  REQUIRE(daemon::import_table(store, *decoded, Policy::faster).ok());
  REQUIRE(winner_of(store, k_small)->config == k_config_a);
}

TEST_CASE("export from one store and import into another gives the same winners",
          "[tableio][import]") {
  TempDir dir;
  Store source = open_store(dir, "a.db");
  fill_store(source);
  auto exported = tableio::load_table(source, {}, "host-a");
  REQUIRE(exported.ok());
  auto parsed = tableio::read_json(tableio::write_json(*exported), "a.json");
  REQUIRE(parsed.ok());

  Store target = open_store(dir, "b.db");
  auto reply = daemon::import_table(target, *parsed, Policy::faster);
  REQUIRE(reply.ok());
  REQUIRE((*reply)["imported"] == 4);

  auto again = tableio::load_table(target, {}, "host-a");
  REQUIRE(again.ok());
  REQUIRE(again->rows.size() == exported->rows.size());
  for (std::size_t i = 0; i < again->rows.size(); ++i) {
    require_same_row(again->rows[i], exported->rows[i]);
  }
  REQUIRE(again->kernels.size() == 1);
}

TEST_CASE("import_table into a read-only store fails naming the row", "[tableio][import]") {
  TempDir dir;
  { Store created = open_store(dir); }
  auto store = Store::open(dir.str() + "/ktune.db", OpenMode::read_only);
  REQUIRE(store.ok());
  auto reply = daemon::import_table(*store, incoming(), Policy::faster);
  REQUIRE_FALSE(reply.ok());
  REQUIRE(reply.error().code == ktune::ErrorCode::db_error);
  REQUIRE_THAT(reply.error().message, Catch::StartsWith("import: row 0 (gemm M=256,N=256,K=256"));
}

namespace {

// The import op as ktuned runs it: the body decoded, then written one row per step.
Result<json> run_import(Store& store, const json& body,
                        std::vector<WinnerRecord>* upserted = nullptr) {
  auto run = daemon::decode_import(body);
  if (!run) return run.error();
  if (auto r = run->prepare(store); !r) return r.error();
  while (!run->done()) {
    if (auto r = store.in_transaction([&] { return run->step(store, 1, upserted); }); !r) {
      return r.error();
    }
  }
  return run->reply();
}

} // namespace

TEST_CASE("the import op decodes the request body the CLI sends and imports in steps",
          "[tableio][import]") {
  TempDir dir;
  Store store = open_store(dir);
  seed(store);
  const json table = json(tableio::table_to_json(incoming()));

  SECTION("table and policy") {
    std::vector<WinnerRecord> upserted;
    auto reply = run_import(store, json{{"op", "import"}, {"table", table},
                                               {"policy", "newer"}}, &upserted);
    REQUIRE(reply.ok());
    REQUIRE((*reply)["policy"] == "newer");
    REQUIRE(upserted.size() == 1);
    REQUIRE(upserted[0].shape == k_big);
    REQUIRE(upserted[0].config == k_config_b);
  }
  SECTION("policy defaults to faster") {
    auto reply = run_import(store, json{{"op", "import"}, {"table", table}});
    REQUIRE(reply.ok());
    REQUIRE((*reply)["policy"] == "faster");
    REQUIRE(winner_of(store, k_small)->config == k_config_b);
  }
  SECTION("a bad policy") {
    auto reply = run_import(store, json{{"table", table}, {"policy", 3}});
    REQUIRE_FALSE(reply.ok());
    REQUIRE(reply.error().code == ktune::ErrorCode::bad_request);
    REQUIRE_THAT(reply.error().message, Catch::Contains("'policy'"));
  }
  SECTION("no table") {
    auto reply = run_import(store, json{{"op", "import"}});
    REQUIRE_FALSE(reply.ok());
    REQUIRE(reply.error().code == ktune::ErrorCode::bad_request);
    REQUIRE_THAT(reply.error().message, Catch::Contains("'table'"));
  }
  SECTION("a bad row names it") {
    json broken = table;
    broken["rows"][1]["median_ms"] = "slow";
    auto reply = run_import(store, json{{"table", broken}});
    REQUIRE_FALSE(reply.ok());
    REQUIRE(reply.error().code == ktune::ErrorCode::bad_request);
    REQUIRE_THAT(reply.error().message,
                 Catch::StartsWith("import: table: rows[1].median_ms: expected a number"));
  }
}
