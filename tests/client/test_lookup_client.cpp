// The runtime lookup path end to end: libktune_client's C API (and its C++ wrapper) against a
// real ktuned and database: the fallback ladder, tune-on-miss, pipelining, the in-process cache,
// and the fallbacks when the daemon and then the database are gone.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "ktune/client.h"
#include "ktune/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_tune_timeout = 600s;
// Sanitizer builds answer slowly; the default 5 ms is a runtime's budget, not a test's.
constexpr int k_test_timeout_us = 2'000'000;

const std::string k_tiny_measure = R"(
[measure]
min_samples = 3
max_samples = 20
max_time_s = 0.02
min_time_s = 0
warmup_ms = 1
flush_cache = false
)";

struct Handle {
  ktune_client* client = nullptr;
  std::string m_kernel_dirs = ktune::test::source_path("/kernels_src");
  Handle(const std::string& socket, const std::string& db, int cache_ttl_ms, bool tune_on_miss) {
    ktune_options o;
    ktune_options_init(&o);
    o.socket_path = socket.c_str();
    o.db_path = db.c_str();
    o.kernel_dirs = m_kernel_dirs.c_str();
    o.timeout_us = k_test_timeout_us;
    o.cache_ttl_ms = cache_ttl_ms;
    o.tune_on_miss = tune_on_miss ? 1 : 0;
    REQUIRE(ktune_connect(&o, &client) == KTUNE_OK);
  }
  ~Handle() { ktune_close(client); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  ktune_answer lookup(const char* shape, const char* dtype = "f32") {
    ktune_answer a{};
    const ktune_status status = ktune_lookup(client, "gemm", shape, dtype, "cpu", &a);
    INFO(ktune_last_error(client));
    REQUIRE(status == KTUNE_OK);
    return a;
  }
};

json ok_result(Connection& c, json request, std::chrono::milliseconds timeout = 30s) {
  auto reply = c.request(std::move(request), {}, timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

std::int64_t param(const ktune_answer& a, const std::string& name) {
  for (std::size_t i = 0; i < a.param_count; ++i) {
    if (name == a.params[i].name) return a.params[i].value;
  }
  FAIL("no param " << name << " in " << a.config_json);
  return 0;
}

} // namespace

TEST_CASE("lookup client: ladder, tune-on-miss, daemon and database fallbacks") {
  TempDir home;
  home.write("ktuned.toml", k_tiny_measure);
  const std::string db = (home.path() / "ktune.db").string();
  const std::string tuned = "M=32,N=32,K=32";
  std::string winner_config;
  std::int64_t winner_job = 0;

  {
    DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                      "--kernel-dir", ktune::test::source_path("/kernels_src")});
    REQUIRE(daemon.wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon.socket());
    REQUIRE(conn.ok());
    Handle h(daemon.socket(), db, -1, false);

    {
      const ktune_answer a = h.lookup(tuned.c_str());
      CHECK(a.rung == KTUNE_RUNG_DEFAULT);
      CHECK(a.exact == 0);
      CHECK(a.source == KTUNE_SOURCE_DAEMON);
      CHECK(std::string(a.reason) == "device_never_tuned");
      CHECK(param(a, "BM") == 64);
      CHECK(param(a, "VEC") == 2);
      REQUIRE(a.param_count == 5);
      CHECK(std::string(a.params[0].name) == "BM"); // the spec's order, not sorted
    }

    json summary = ok_result(*conn, {{"op", "tune"}, {"kernel", "gemm"}, {"shape", tuned},
                                     {"wait", true}},
                             k_tune_timeout);
    REQUIRE(summary.at("job").at("state") == "done");
    winner_job = summary.at("job").at("id").get<std::int64_t>();

    const ktune_answer exact = h.lookup(tuned.c_str());
    CHECK(exact.rung == KTUNE_RUNG_EXACT);
    CHECK(exact.exact == 1);
    CHECK(exact.job == winner_job);
    CHECK(std::string(exact.reason).empty());
    CHECK(exact.median_ms > 0);
    winner_config = exact.config_json;
    CHECK(json::parse(winner_config) == summary.at("winner").at("config"));

    // An untuned shape next to the tuned one: the neighbour's winner, saying where it came from.
    const ktune_answer near = h.lookup("M=40,N=32,K=32");
    CHECK(near.rung == KTUNE_RUNG_NEAREST);
    CHECK(near.exact == 0);
    CHECK(std::string(near.from_shape) == tuned);
    CHECK(std::string(near.reason) == "shape_not_tuned");
    CHECK(std::string(near.config_json) == winner_config);

    // Dims in another order name the same shape.
    CHECK(h.lookup("K=32,N=32,M=32").rung == KTUNE_RUNG_EXACT);

    const ktune_answer other_dtype = h.lookup(tuned.c_str(), "f64");
    CHECK(other_dtype.rung == KTUNE_RUNG_DEFAULT);
    CHECK(std::string(other_dtype.reason) == "dtype_not_tuned");

    ktune_answer ignored{};
    CHECK(ktune_lookup(h.client, "no_such_kernel", tuned.c_str(), nullptr, nullptr, &ignored) ==
          KTUNE_E_REJECTED);
    CHECK(std::string(ktune_last_error(h.client)).find("unknown_kernel") != std::string::npos);
    CHECK(ktune_lookup(h.client, "gemm", "M=32", nullptr, nullptr, &ignored) == KTUNE_E_REJECTED);
    CHECK(std::string(ktune_last_error(h.client)).find("bad_shape") != std::string::npos);

    // Pipelined requests on one connection are answered in order.
    std::string batch;
    for (int i = 1; i <= 3; ++i) {
      batch += R"({"v":1,"id":)" + std::to_string(100 + i) +
               R"(,"op":"lookup","kernel":"gemm","shape":")" + tuned + "\"}\n";
    }
    batch += R"({"id":"s","op":"stats"})" "\n";
    REQUIRE(conn->send_raw(batch).ok());
    for (int i = 1; i <= 3; ++i) {
      auto line = conn->read_line(30s);
      REQUIRE(line.ok());
      const json reply = json::parse(*line);
      CHECK(reply.at("id") == 100 + i);
      CHECK(reply.at("result").at("rung") == "exact");
    }
    auto stats_line = conn->read_line(30s);
    REQUIRE(stats_line.ok());
    CHECK(json::parse(*stats_line).at("id") == "s");

    // The in-process cache answers the second lookup.
    {
      ktune::Client cached({daemon.socket(), db, ktune::test::source_path("/kernels_src"),
                            k_test_timeout_us, 60'000, false});
      ktune::LookupAnswer first, second;
      REQUIRE(cached.lookup("gemm", tuned, first));
      REQUIRE(cached.lookup("gemm", tuned, second));
      CHECK(first.source == KTUNE_SOURCE_DAEMON);
      CHECK(second.source == KTUNE_SOURCE_CACHE);
      CHECK(second.config_json == winner_config);
      CHECK(second.param("BM") == first.param("BM"));
    }

    // Tune-on-miss: answered from the ladder at once, a job queued once for the exact key.
    Handle eager(daemon.socket(), db, -1, true);
    const ktune_answer missed = eager.lookup("M=16,N=16,K=16");
    CHECK(missed.exact == 0);
    CHECK(missed.rung == KTUNE_RUNG_NEAREST);
    REQUIRE(missed.tune_job > 0);
    CHECK(eager.lookup("M=16,N=16,K=16").tune_job == missed.tune_job); // deduplicated
    const auto deadline = std::chrono::steady_clock::now() + k_tune_timeout;
    std::string state;
    while (std::chrono::steady_clock::now() < deadline) {
      state = ok_result(*conn, {{"op", "job"}, {"job", missed.tune_job}})
                  .at("job").at("state").get<std::string>();
      if (state != "queued" && state != "running") break;
      std::this_thread::sleep_for(50ms);
    }
    REQUIRE(state == "done");
    const ktune_answer now_exact = h.lookup("M=16,N=16,K=16");
    CHECK(now_exact.exact == 1);
    CHECK(now_exact.job == missed.tune_job);

    ok_result(*conn, {{"op", "shutdown"}});
    REQUIRE(daemon.wait_exit(30s) == std::optional<int>(0));
  }

  // ktuned stopped: exact winners come from a read-only open of the database.
  {
    Handle h((home.path() / "ktuned.sock").string(), db, -1, false);
    const ktune_answer a = h.lookup(tuned.c_str());
    CHECK(a.rung == KTUNE_RUNG_EXACT);
    CHECK(a.source == KTUNE_SOURCE_DATABASE);
    CHECK(std::string(a.config_json) == winner_config);
    CHECK(a.job == winner_job);
    // No nearest rung offline: the [default], from the spec text stored in the database.
    const ktune_answer d = h.lookup("M=40,N=32,K=32");
    CHECK(d.rung == KTUNE_RUNG_DEFAULT);
    CHECK(d.source == KTUNE_SOURCE_DATABASE);
    CHECK(std::string(d.reason) == "daemon_unreachable");
    CHECK(param(d, "BM") == 64);
  }

  // And with the database gone too: the [default] from the kernel's spec file.
  std::filesystem::rename(db, db + ".away");
  {
    Handle h((home.path() / "ktuned.sock").string(), db, -1, false);
    const ktune_answer a = h.lookup(tuned.c_str());
    CHECK(a.rung == KTUNE_RUNG_DEFAULT);
    CHECK(a.source == KTUNE_SOURCE_SPEC);
    CHECK(param(a, "BM") == 64);
    CHECK(param(a, "UNROLL") == 4);
    ktune_answer ignored{};
    CHECK(ktune_lookup(h.client, "no_such_kernel", tuned.c_str(), nullptr, nullptr, &ignored) ==
          KTUNE_E_NO_ANSWER);
  }
}

TEST_CASE("lookup client: the [default] table is read as TOML, as ktuned reads it", "[client]") {
  TempDir dir;
  dir.write("kernels/odd/kernel.toml",
            "[kernel]\nname = \"odd\"\n\n[ default ]   # spaced header\nUNROLL = 0x8\nBM = 1_024\n");
  dir.write("kernels/bad/kernel.toml", "[kernel]\nname = \"bad\"\n[default]\nBM = \"x\"\n");
  const std::string kernels = (dir.path() / "kernels").string();
  const std::string socket = (dir.path() / "none.sock").string();
  const std::string db = (dir.path() / "none.db").string();
  ktune_options options;
  ktune_options_init(&options);
  options.socket_path = socket.c_str();
  options.db_path = db.c_str();
  options.kernel_dirs = kernels.c_str();
  options.cache_ttl_ms = -1;
  ktune_client* client = nullptr;
  REQUIRE(ktune_connect(&options, &client) == KTUNE_OK);
  ktune_answer answer{};
  REQUIRE(ktune_lookup(client, "odd", "N=1", nullptr, nullptr, &answer) == KTUNE_OK);
  CHECK(answer.rung == KTUNE_RUNG_DEFAULT);
  CHECK(answer.source == KTUNE_SOURCE_SPEC);
  CHECK(std::string(answer.config_json) == "{\"UNROLL\":8,\"BM\":1024}");
  REQUIRE(answer.param_count == 2);
  CHECK(std::string(answer.params[0].name) == "UNROLL");
  CHECK(ktune_lookup(client, "bad", "N=1", nullptr, nullptr, &answer) == KTUNE_E_NO_ANSWER);
  // The shipped families are found next to the library without any kernel_dirs.
  CHECK(ktune_lookup(client, "gemm", "M=8,N=8,K=8", nullptr, nullptr, &answer) == KTUNE_OK);
  CHECK(answer.rung == KTUNE_RUNG_DEFAULT);
  ktune_close(client);
}
