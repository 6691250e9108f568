// A poisoned compile cache (jobs/artifact_cache.hpp): cached artifacts truncated, emptied, or
// replaced by another config's valid shared object (fast and correct, the wrong winner it made
// before). Each is found out by its content hash, compiled again and measured as itself: no
// `crash`, no quarantine, no wrong winner, the same statuses and winner as a cold run.
// `ktune cache verify` and `ktune cache prune` see and clean the same damage.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/integration/tool_run.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::run_tool;
using ktune::test::TempDir;
using ktune::test::ToolRun;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_tune_timeout = 300s;

const std::string k_config = R"(
[daemon]
compile_workers = 1
[measure]
min_samples = 5
max_samples = 20
max_time_s = 0.05
min_time_s = 0
warmup_ms = 0
flush_cache = false
)";

// Four configs that compute the same output; P = k spins (k + 1) times as long. "#pragma once"
// keeps each config's entry under its own name (no batch, no renaming), so another config's
// shared object loads in its place, as a poisoned cache would have it. Each artifact carries
// its config in a marker the test finds it by.
const std::string k_spec = R"(
[kernel]
name = "spin"
language = "cpp"
source = "kernel.cpp"
entry = "spin"
shape = ["N"]
dtypes = ["f32"]
[params]
P = [0, 1, 2, 3]
[[args]]
name = "OUT"
kind = "out"
count = "N"
[[args]]
name = "N"
kind = "scalar"
value = "N"
[default]
P = 0
)";

const std::string k_source = R"(#pragma once
#include <cstdint>
#define SPIN_TEXT2(x) #x
#define SPIN_TEXT(x) SPIN_TEXT2(x)
extern "C" __attribute__((used)) const char spin_marker[] = "spin-marker-P=" SPIN_TEXT(P) ";";
extern "C" void spin(void** args) {
  KTUNE_DTYPE* out = static_cast<KTUNE_DTYPE*>(args[0]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[1]);
  volatile std::uint64_t sink = 0;
  for (std::uint64_t i = 0; i < (P + 1) * 300000ull; ++i) sink = sink + i;
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<KTUNE_DTYPE>(i % 97);
}
)";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

// P -> its artifact in the cache, found by the marker compiled into it.
std::map<int, fs::path> artifacts(const fs::path& cache) {
  std::map<int, fs::path> found;
  for (const auto& entry : fs::recursive_directory_iterator(cache)) {
    if (entry.path().extension() != ".so") continue;
    const std::string bytes = read_bytes(entry.path());
    for (int p = 0; p < 4; ++p) {
      if (bytes.find("spin-marker-P=" + std::to_string(p) + ";") != std::string::npos) {
        found[p] = entry.path();
      }
    }
  }
  return found;
}

json ok_result(Connection& c, json request, std::chrono::milliseconds timeout = 30s) {
  auto reply = c.request(std::move(request), {}, timeout);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

struct Tuned {
  std::map<int, std::string> status;   // P -> status
  std::map<int, double> median_ms;     // P -> median of the ok ones
  int winner = -1;
};

Tuned tune(Connection& c, bool remeasure) {
  const json done = ok_result(c, {{"op", "tune"}, {"kernel", "spin"}, {"shape", "N=1024"},
                                  {"wait", true}, {"remeasure", remeasure}},
                              k_tune_timeout);
  INFO(done.dump());
  REQUIRE(done.at("job").at("state") == "done");
  Tuned t;
  t.winner = done.at("winner").at("config").at("P").get<int>();
  const json job = ok_result(c, {{"op", "job"}, {"job", done.at("job").at("id")}});
  for (const auto& r : job.at("results")) {
    const int p = r.at("config").at("P").get<int>();
    t.status[p] = r.at("status").get<std::string>();
    INFO(r.dump());
    CHECK(r.value("reason", "").find("reused") == std::string::npos);
    if (t.status[p] == "ok") t.median_ms[p] = r.at("median_ms").get<double>();
  }
  return t;
}

} // namespace

TEST_CASE("cached artifacts truncated, emptied or replaced are compiled again, never blamed on "
          "their configs",
          "[integration][cache]") {
  TempDir home;
  home.write("ktuned.toml", k_config);
  home.write("kernels/spin/kernel.toml", k_spec);
  home.write("kernels/spin/kernel.cpp", k_source);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--only-kernel-dir", (home.path() / "kernels").string()});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;

  const Tuned cold = tune(c, false);
  REQUIRE(cold.status.size() == 4);
  for (const auto& [p, status] : cold.status) CHECK(status == "ok");
  CHECK(cold.winner == 0);

  auto found = artifacts(home.path() / "cache");
  REQUIRE(found.size() == 4);
  const std::string fast = read_bytes(found[0]);
  const std::string slow = read_bytes(found[3]);
  const std::string p1 = read_bytes(found[1]);
  write_bytes(found[0], slow);                       // the reference replaced by a slow config
  write_bytes(found[1], p1.substr(0, p1.size() / 2)); // cut short (SIGBUS when loaded, before)
  write_bytes(found[2], "");                         // empty ("cannot load" for good, before)
  write_bytes(found[3], fast);                       // a fast, correct impostor (the wrong winner)

  const ToolRun verify = run_tool({ktune::test::bin_path("/ktune"), "cache", "verify", "--cache-dir",
                                   (home.path() / "cache").string()},
                                  {"PATH=/usr/bin:/bin", "KTUNE_HOME=" + home.str()}, 60s);
  INFO(verify.output);
  CHECK(verify.code != 0);
  CHECK_THAT(verify.output, Catch::Contains("4 damaged"));

  const Tuned again = tune(c, true);
  CHECK(again.status == cold.status);
  CHECK(again.winner == cold.winner);
  REQUIRE(again.median_ms.count(0) == 1);
  REQUIRE(again.median_ms.count(3) == 1);
  // P=3 measured as itself (four times P=0's work), not as the impostor that ran P=0's code.
  CHECK(again.median_ms.at(3) > 2.0 * again.median_ms.at(0));
  // Every artifact was compiled again and holds its own config.
  found = artifacts(home.path() / "cache");
  REQUIRE(found.size() == 4);
  for (const auto& [p, path] : found) {
    INFO("P=" << p << ": " << path);
    CHECK(read_bytes(path).find("spin-marker-P=" + std::to_string(p) + ";") != std::string::npos);
  }
  // Nothing was quarantined: a plain tune of the key plans all four configs (reused rows).
  const json plain = ok_result(c, {{"op", "tune"}, {"kernel", "spin"}, {"shape", "N=1024"},
                                   {"wait", true}},
                               k_tune_timeout);
  CHECK(plain.at("job").at("state") == "done");
  const json job = ok_result(c, {{"op", "job"}, {"job", plain.at("job").at("id")}});
  CHECK(job.at("results").size() == 4);

  const ToolRun clean = run_tool({ktune::test::bin_path("/ktune"), "cache", "verify", "--cache-dir",
                                  (home.path() / "cache").string()},
                                 {"PATH=/usr/bin:/bin", "KTUNE_HOME=" + home.str()}, 60s);
  INFO(clean.output);
  CHECK(clean.code == 0);
  CHECK_THAT(clean.output, Catch::Contains("0 damaged"));
}

TEST_CASE("ktune cache prune removes damaged entries and leaves sound ones", "[integration][cache]") {
  TempDir home;
  home.write("ktuned.toml", k_config);
  home.write("kernels/spin/kernel.toml", k_spec);
  home.write("kernels/spin/kernel.cpp", k_source);
  {
    DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                      "--only-kernel-dir", (home.path() / "kernels").string()});
    REQUIRE(daemon.wait_ready(k_start_timeout));
    auto conn = Connection::connect(daemon.socket());
    REQUIRE(conn.ok());
    (void)tune(*conn, false);
  }
  auto found = artifacts(home.path() / "cache");
  REQUIRE(found.size() == 4);
  write_bytes(found[2], "");
  fs::remove(found[3].string() + ".sum");
  const fs::path orphan = found[1].parent_path() / "0123456789abcdef0123456789abcdef.so.sum";
  write_bytes(orphan, "xxh3-128 00 0\n");
  const std::vector<std::string> env{"PATH=/usr/bin:/bin", "KTUNE_HOME=" + home.str()};
  const ToolRun prune = run_tool({ktune::test::bin_path("/ktune"), "cache", "prune", "--cache-dir",
                                  (home.path() / "cache").string()},
                                 env, 60s);
  INFO(prune.output);
  CHECK(prune.code == 0);
  CHECK_THAT(prune.output, Catch::Contains("removed 3"));
  CHECK(fs::exists(found[0]));
  CHECK(fs::exists(found[1]));
  CHECK_FALSE(fs::exists(found[2]));
  CHECK_FALSE(fs::exists(found[3]));
  CHECK_FALSE(fs::exists(orphan));
  const ToolRun verify = run_tool({ktune::test::bin_path("/ktune"), "cache", "verify", "--cache-dir",
                                   (home.path() / "cache").string()},
                                  env, 60s);
  INFO(verify.output);
  CHECK(verify.code == 0);
}
