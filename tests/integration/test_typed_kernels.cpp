// Bring your own kernel: the blocked SGEMM of tests/kernels/gemm_blocked, an existing typed
// function with #define'd tunables, described by one spec file (its signature and a float64
// reference function), tuned to a winner by the real ktuned and workers with no adapter.
#include "tests/support/paths.hpp"
#include "cli/kernel_commands.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

constexpr auto k_start_timeout = 60s;
constexpr auto k_reply_timeout = 30s;
constexpr auto k_tune_timeout = 300s;

json ok_result(Connection& c, json request, std::chrono::milliseconds timeout = k_reply_timeout) {
  auto reply = c.request(std::move(request), {}, timeout);
  INFO((reply ? std::string() : reply.error().message));
  REQUIRE(reply.ok());
  INFO(reply->dump());
  REQUIRE(reply->value("ok", false));
  return reply->at("result");
}

} // namespace

TEST_CASE("an existing typed SGEMM is tuned to a winner from one spec file, checked against its "
          "float64 reference", "[integration][typed_entry]") {
  TempDir home;
  home.write("ktuned.toml", "[measure]\nmin_samples = 3\nmax_samples = 10\nmax_time_s = 0.02\n"
                            "min_time_s = 0\nwarmup_ms = 1\nflush_cache = false\nfinalists = 0\n");
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--kernel-dir", ktune::test::source_path("/tests/kernels"),
                                    "--log-level", "info"});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto c = Connection::connect(daemon.socket());
  REQUIRE(c.ok());

  // Listed with its params in the order written, and no dtype axis (its one element type).
  const json kernels = ok_result(*c, {{"op", "kernels"}});
  INFO(kernels.dump());
  const json* family = nullptr;
  for (const auto& k : kernels.at("kernels")) {
    if (k.at("name") == "gemm_blocked") family = &k;
  }
  REQUIRE(family != nullptr);
  CHECK(family->at("param_names") == json::array({"BM", "BN", "BK", "UNROLL"}));
  CHECK(family->at("dtypes") == json::array({"f32"}));

  const json summary = ok_result(*c, {{"op", "tune"}, {"kernel", "gemm_blocked"},
                                      {"shape", "M=48,N=40,K=36"}, {"device", "cpu"},
                                      {"wait", true}},
                                 k_tune_timeout);
  REQUIRE(summary.at("job").at("state") == "done");
  const json job = ok_result(*c, {{"op", "job"}, {"job", summary.at("job").at("id")}});
  INFO(job.dump());
  REQUIRE(job.at("results").size() == 16);
  for (const auto& r : job.at("results")) {
    INFO(r.dump());
    CHECK(r.at("status") == "ok");
  }
  REQUIRE(job.at("winner").is_object());

  // A runtime finds the winner under the family's own dtype.
  const json lookup = ok_result(*c, {{"op", "lookup"}, {"kernel", "gemm_blocked"},
                                     {"shape", "M=48,N=40,K=36"}, {"dtype", "f32"},
                                     {"device", "cpu"}});
  INFO(lookup.dump());
  CHECK(lookup.at("rung") == "exact");
  CHECK(lookup.at("config") == job.at("winner").at("config"));
  CHECK(kernels.at("broken").empty());
}

TEST_CASE("the skeleton ktune new-kernel writes tunes to a winner as it is",
          "[integration][typed_entry]") {
  TempDir home;
  std::ostringstream out, err;
  ktune::cli::Output io{out, err};
  REQUIRE(ktune::cli::new_kernel("scale", "cpp", (home.path() / "kernels").string(), io) == 0);
  home.write("ktuned.toml", "[measure]\nmin_samples = 3\nmax_samples = 10\nmax_time_s = 0.02\n"
                            "min_time_s = 0\nwarmup_ms = 1\nflush_cache = false\nfinalists = 0\n");
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--only-kernel-dir", (home.path() / "kernels").string(),
                                    "--log-level", "info"});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto c = Connection::connect(daemon.socket());
  REQUIRE(c.ok());
  const json summary = ok_result(*c, {{"op", "tune"}, {"kernel", "scale"}, {"shape", "N=20000"},
                                      {"device", "cpu"}, {"wait", true}},
                                 k_tune_timeout);
  REQUIRE(summary.at("job").at("state") == "done");
  const json job = ok_result(*c, {{"op", "job"}, {"job", summary.at("job").at("id")}});
  INFO(job.dump());
  CHECK(job.at("results").size() == 12);
  for (const auto& r : job.at("results")) CHECK(r.at("status") == "ok");
  CHECK(job.at("winner").is_object());
}

TEST_CASE("a float64 family without dtypes is tuned and looked up without naming a dtype",
          "[integration][typed_entry]") {
  TempDir home;
  home.write("kernels/dscale/kernel.cpp",
             "#ifndef U\n#define U 1\n#endif\n"
             "void dscale(const double* x, double* y, long n) {\n"
             "  for (long i = 0; i < n; i += U)\n"
             "    for (long u = 0; u < U && i + u < n; ++u) y[i + u] = 2.0 * x[i + u];\n"
             "}\n");
  home.write("kernels/dscale/kernel.toml",
             "[kernel]\nname = \"dscale\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\n"
             "entry = \"dscale\"\nsignature = \"source\"\nshape = [\"N\"]\n"
             "[params]\nU = [1, 4]\n"
             "[[args]]\nname = \"x\"\nkind = \"in\"\ncount = \"N\"\n"
             "[[args]]\nname = \"y\"\nkind = \"out\"\ncount = \"N\"\n"
             "[[args]]\nname = \"n\"\nkind = \"scalar\"\nvalue = \"N\"\n"
             "[metrics]\nbytes = \"2 * elem_bytes * N\"\n"
             "[default]\nU = 1\n");
  home.write("ktuned.toml", "[measure]\nmin_samples = 3\nmax_samples = 10\nmax_time_s = 0.02\n"
                            "min_time_s = 0\nwarmup_ms = 1\nflush_cache = false\nfinalists = 0\n");
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--only-kernel-dir", (home.path() / "kernels").string(),
                                    "--log-level", "info"});
  REQUIRE(daemon.wait_ready(k_start_timeout));
  auto c = Connection::connect(daemon.socket());
  REQUIRE(c.ok());
  const json summary = ok_result(*c, {{"op", "tune"}, {"kernel", "dscale"}, {"shape", "N=4096"},
                                      {"device", "cpu"}, {"wait", true}},
                                 k_tune_timeout);
  REQUIRE(summary.at("job").at("state") == "done");
  const json job = ok_result(*c, {{"op", "job"}, {"job", summary.at("job").at("id")}});
  INFO(job.dump());
  CHECK(job.at("job").at("dtype") == "f64");
  for (const auto& r : job.at("results")) CHECK(r.at("status") == "ok");
  const json lookup = ok_result(*c, {{"op", "lookup"}, {"kernel", "dscale"}, {"shape", "N=4096"},
                                     {"device", "cpu"}});
  INFO(lookup.dump());
  CHECK(lookup.at("rung") == "exact");
}
