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

#include <csignal>
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
  // `table`: the winner table to answer from first (nullptr: the one next to the socket);
  // "" (the default here) leaves it out, for the cases about the other rungs.
  Handle(const std::string& socket, const std::string& db, int cache_ttl_ms, bool tune_on_miss,
         const char* table = "") {
    ktune_options o;
    ktune_options_init(&o);
    o.socket_path = socket.c_str();
    o.db_path = db.c_str();
    o.kernel_dirs = m_kernel_dirs.c_str();
    o.timeout_us = k_test_timeout_us;
    o.cache_ttl_ms = cache_ttl_ms;
    o.tune_on_miss = tune_on_miss ? 1 : 0;
    REQUIRE(ktune_connect(&o, &client) == KTUNE_OK);
    REQUIRE(ktune_set_table(client, table) == KTUNE_OK);
  }
  ~Handle() { ktune_close(client); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  ktune_answer lookup(const char* shape, const char* dtype = "f32", const char* device = "cpu") {
    ktune_answer a{};
    const ktune_status status = ktune_lookup(client, "gemm", shape, dtype, device, &a);
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
      ktune::Client::Options options;
      options.socket_path = daemon.socket();
      options.db_path = db;
      options.kernel_dirs = ktune::test::source_path("/kernels_src");
      options.timeout_us = k_test_timeout_us;
      options.cache_ttl_ms = 60'000;
      options.use_table = false;
      ktune::Client cached(options);
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

TEST_CASE("lookup client: the winner table answers first, the same as ktuned, also with ktuned "
          "stopped or killed") {
  TempDir home;
  home.write("ktuned.toml", k_tiny_measure);
  const std::string db = (home.path() / "ktune.db").string();
  const std::string socket = (home.path() / "ktuned.sock").string();
  const std::vector<std::string> args = {"--config", (home.path() / "ktuned.toml").string(),
                                         "--kernel-dir", ktune::test::source_path("/kernels_src")};
  const std::string tuned = "M=32,N=32,K=32";
  // Keys over every rung: exact, the same shape written otherwise, nearest, other dtype.
  const std::vector<std::pair<std::string, std::string>> keys = {
      {tuned, "f32"}, {"K=32, N=32, M=32", "f32"}, {"M=40,N=32,K=32", "f32"},
      {"M=4096,N=8,K=8", "f32"}, {tuned, "f64"}};
  struct Seen {
    ktune_rung rung;
    std::string config, from_shape, reason;
    double median_ms;
    std::int64_t job;
  };
  std::vector<Seen> from_daemon;
  auto seen = [](const ktune_answer& a) {
    return Seen{a.rung, a.config_json, a.from_shape, a.reason, a.median_ms, a.job};
  };
  auto same = [](const Seen& a, const Seen& b) {
    CHECK(a.rung == b.rung);
    CHECK(a.config == b.config);
    CHECK(a.from_shape == b.from_shape);
    CHECK(a.reason == b.reason);
    CHECK(a.median_ms == b.median_ms);
    CHECK(a.job == b.job);
  };

  Handle mapped(socket, db, -1, false, nullptr);
  {
    DaemonProcess daemon(home.str(), args);
    REQUIRE(daemon.wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon.socket());
    REQUIRE(conn.ok());
    Handle asked(socket, db, -1, false);

    // Published at start, before anything is tuned: the default, as ktuned says it.
    auto first = mapped.lookup(tuned.c_str());
    for (int i = 0; i < 200 && first.source != KTUNE_SOURCE_MAP; ++i) {
      std::this_thread::sleep_for(10ms);
      first = mapped.lookup(tuned.c_str());
    }
    CHECK(first.source == KTUNE_SOURCE_MAP);
    same(seen(first), seen(asked.lookup(tuned.c_str())));
    CHECK(std::string(first.reason) == "device_never_tuned");

    json summary = ok_result(*conn, {{"op", "tune"}, {"kernel", "gemm"}, {"shape", tuned},
                                     {"wait", true}},
                             k_tune_timeout);
    REQUIRE(summary.at("job").at("state") == "done");
    const std::int64_t job = summary.at("job").at("id").get<std::int64_t>();
    // Visible in the table within moments of the job's end (the publisher coalesces for 1 ms).
    ktune_answer exact = mapped.lookup(tuned.c_str());
    for (int i = 0; i < 500 && exact.rung != KTUNE_RUNG_EXACT; ++i) {
      std::this_thread::sleep_for(2ms);
      exact = mapped.lookup(tuned.c_str());
    }
    REQUIRE(exact.rung == KTUNE_RUNG_EXACT);
    CHECK(exact.source == KTUNE_SOURCE_MAP);
    CHECK(exact.job == job);
    CHECK(json::parse(std::string(exact.config_json)) == summary.at("winner").at("config"));
    for (const auto& [shape, dtype] : keys) {
      INFO(shape << " " << dtype);
      const ktune_answer a = mapped.lookup(shape.c_str(), dtype.c_str());
      CHECK(a.source == KTUNE_SOURCE_MAP);
      from_daemon.push_back(seen(asked.lookup(shape.c_str(), dtype.c_str())));
      same(seen(a), from_daemon.back());
    }
    // What the table cannot answer goes to ktuned, which says why.
    ktune_answer ignored{};
    CHECK(ktune_lookup(mapped.client, "no_such_kernel", tuned.c_str(), nullptr, nullptr,
                       &ignored) == KTUNE_E_REJECTED);
    CHECK(ktune_lookup(mapped.client, "gemm", "M=32", nullptr, nullptr, &ignored) ==
          KTUNE_E_REJECTED);
    CHECK(std::string(ktune_last_error(mapped.client)).find("bad_shape") != std::string::npos);
    // Tune-on-miss: the miss is ktuned's to see; it answers with the job.
    Handle eager(socket, db, -1, true, nullptr);
    const ktune_answer missed = eager.lookup("M=16,N=16,K=16");
    CHECK(missed.source == KTUNE_SOURCE_DAEMON);
    CHECK(missed.tune_job > 0);
    ok_result(*conn, {{"op", "cancel"}, {"job", missed.tune_job}});

    ok_result(*conn, {{"op", "shutdown"}});
    REQUIRE(daemon.wait_exit(30s) == std::optional<int>(0));
  }
  auto all_from_table = [&](Handle& h) {
    for (std::size_t k = 0; k < keys.size(); ++k) {
      INFO(keys[k].first << " " << keys[k].second);
      const ktune_answer a = h.lookup(keys[k].first.c_str(), keys[k].second.c_str());
      CHECK(a.source == KTUNE_SOURCE_MAP);
      same(seen(a), from_daemon[k]);
    }
  };
  // Stopped: the last table answers, nearest included, through the handle that mapped it and
  // through a new one.
  all_from_table(mapped);
  {
    Handle fresh(socket, db, -1, false, nullptr);
    all_from_table(fresh);
    // With tune-on-miss and no ktuned, the table's answer stands.
    Handle eager(socket, db, -1, true, nullptr);
    const ktune_answer near = eager.lookup("M=40,N=32,K=32");
    CHECK(near.source == KTUNE_SOURCE_MAP);
    CHECK(near.rung == KTUNE_RUNG_NEAREST);
  }
  // Started again, then killed: the new daemon's table replaces the old one under the mapped
  // handle, and stays after SIGKILL.
  {
    DaemonProcess daemon(home.str(), args);
    REQUIRE(daemon.wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon.socket());
    REQUIRE(conn.ok());
    json before = ok_result(*conn, {{"op", "stats"}}).at("table");
    for (int i = 0; i < 500 && before.at("generation") == 0; ++i) {
      std::this_thread::sleep_for(10ms);
      before = ok_result(*conn, {{"op", "stats"}}).at("table");
    }
    const auto generation = before.at("generation").get<std::uint64_t>();
    CHECK(before.at("winners") == 1);
    CHECK(before.at("path") == (home.path() / "ktuned.table").string());
    CHECK(generation > 1);   // counted on from the table the first daemon left
    daemon.signal(SIGKILL);
    REQUIRE(daemon.wait_exit(30s).has_value());
  }
  all_from_table(mapped);
  {
    ktune::Client::Options options;
    options.socket_path = socket;
    options.db_path = db;
    options.timeout_us = k_test_timeout_us;
    ktune::Client cpp(options);
    ktune::LookupAnswer answer;
    ktune::LookupError error;
    REQUIRE(cpp.lookup("gemm", tuned, answer, &error));
    CHECK(answer.source == KTUNE_SOURCE_MAP);
    CHECK(answer.exact);
    CHECK(answer.config_json == from_daemon.front().config);
    CHECK(answer.param("BM").has_value());
  }
  // The table is private to the daemon's user, like the socket.
  CHECK((std::filesystem::status(home.path() / "ktuned.table").permissions() &
         std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
}
