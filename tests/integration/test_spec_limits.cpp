// Bounded spec cost (core/kernel_spec.hpp SpecLimits, jobs/kernel_registry.hpp): a kernel.toml
// of 100k params and a family whose source is 200 MB are refused with spec_too_large naming the
// limit, at once and without reading them; a family edited while ktuned runs is read again off
// the event loop. Meanwhile lookups on another connection keep being answered in milliseconds.
#include "tests/support/paths.hpp"
#include "client/client.hpp"
#include "tests/integration/daemon_process.hpp"
#include "tests/integration/tool_run.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <optional>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace std::chrono_literals;
using ktune::Connection;
using ktune::test::DaemonProcess;
using ktune::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::string family_spec(const std::string& name, int params, int constraints = 0) {
  std::string text = "[kernel]\nname = \"" + name +
                     "\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\nentry = \"big\"\n"
                     "shape = [\"N\"]\ndtypes = [\"f32\"]\n[params]\n";
  for (int i = 0; i < params; ++i) text += "P" + std::to_string(i) + " = [1, 2, 3, 4]\n";
  if (constraints > 0) {
    text += "[space]\nconstraints = [";
    for (int i = 0; i < constraints; ++i) {
      text += (i ? ", " : "") + std::string("\"P") + std::to_string(i % params) + " + P" +
              std::to_string((i + 1) % params) + " <= " + std::to_string(i % 7 + 2) + "\"";
    }
    text += "]\n";
  }
  text += "[[args]]\nname = \"OUT\"\nkind = \"out\"\ncount = \"N\"\n[default]\n";
  for (int i = 0; i < params; ++i) text += "P" + std::to_string(i) + " = 1\n";
  return text;
}

const std::string k_source = "extern \"C\" void big(void** args) { (void)args; }\n";

// Lookups back to back on their own connection, each one's round trip kept, until stopped.
class LookupProbe {
public:
  LookupProbe(const std::string& socket, std::string kernel) : m_kernel(std::move(kernel)) {
    auto conn = Connection::connect(socket);
    REQUIRE(conn.ok());
    m_conn.emplace(std::move(*conn));
    m_thread = std::thread([this] { run(); });
  }
  ~LookupProbe() { stop(); }
  LookupProbe(const LookupProbe&) = delete;
  LookupProbe& operator=(const LookupProbe&) = delete;

  // Stops and returns the round trips in ms, sorted; failures counted in failed().
  std::vector<double> stop() {
    m_stop = true;
    if (m_thread.joinable()) m_thread.join();
    std::sort(m_ms.begin(), m_ms.end());
    return m_ms;
  }
  [[nodiscard]] int failed() const { return m_failed; }

private:
  void run() {
    const json request = {{"op", "lookup"}, {"kernel", m_kernel}, {"shape", "N=4096"},
                          {"dtype", "f32"}, {"device", "cpu"}};
    while (!m_stop) {
      const auto start = Clock::now();
      auto reply = m_conn->request(request, {}, 60s);
      m_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      if (!reply || !reply->value("ok", false)) ++m_failed;
      std::this_thread::sleep_for(1ms);
    }
  }

  std::string m_kernel;
  std::optional<Connection> m_conn;
  std::atomic<bool> m_stop{false};
  std::vector<double> m_ms;
  int m_failed = 0;
  std::thread m_thread;
};

json reply_of(Connection& c, const json& request) {
  auto reply = c.request(request, {}, 60s);
  INFO((reply ? reply->dump() : reply.error().message));
  REQUIRE(reply.ok());
  return *reply;
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(p * sorted.size()))];
}

} // namespace

TEST_CASE("huge specs and sources are refused at once with spec_too_large while lookups go on",
          "[integration][hostile][spec]") {
  TempDir home;
  home.write("ktuned.toml", "");
  // Present from the start: the daemon must come up quickly all the same.
  home.write("kernels/huge/kernel.toml", family_spec("huge", 100'000));
  home.write("kernels/huge/kernel.cpp", k_source);
  const auto started = Clock::now();
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--only-kernel-dir", ktune::test::source_path("/kernels_src"),
                                    "--kernel-dir", (home.path() / "kernels").string()});
  REQUIRE(daemon.wait_ready(60s));
  const double startup_s = std::chrono::duration<double>(Clock::now() - started).count();
  WARN("ktuned with a 100k-param kernel.toml in its kernel directory: ready in " << startup_s << " s");

  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  LookupProbe probe(daemon.socket(), "reduce_sum");

  SECTION("100k params") {
    // Asked again and again for two seconds (each time its files are checked, never parsed).
    for (const auto until = Clock::now() + 2s; Clock::now() < until;) {
      const auto asked = Clock::now();
      const json reply = reply_of(c, {{"op", "lookup"}, {"kernel", "huge"}, {"shape", "N=8"}});
      const double answered_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - asked).count();
      INFO(reply.dump());
      CHECK(reply.at("error").at("code") == "spec_too_large");
      CHECK_THAT(reply.at("error").at("message").get<std::string>(),
                 Catch::Contains("max_spec_bytes"));
      CHECK(reply.dump().size() < 4096);
      CHECK(answered_ms < 1000);
      const json kernels = reply_of(c, {{"op", "kernels"}});
      CHECK(kernels.dump().find("max_spec_bytes") != std::string::npos);
      std::this_thread::sleep_for(50ms);
    }
  }
  SECTION("a 200 MB source") {
    home.write("kernels/fat/kernel.toml", family_spec("fat", 2));
    {
      std::ofstream(home.path() / "kernels/fat/kernel.cpp") << k_source;
    }
    fs::resize_file(home.path() / "kernels/fat/kernel.cpp", 200ull << 20);
    for (const auto until = Clock::now() + 2s; Clock::now() < until;) {
      std::this_thread::sleep_for(50ms);
      const json reply = reply_of(c, {{"op", "lookup"}, {"kernel", "fat"}, {"shape", "N=8"}});
      INFO(reply.dump());
      CHECK(reply.at("error").at("code") == "spec_too_large");
      CHECK_THAT(reply.at("error").at("message").get<std::string>(),
                 Catch::Contains("max_source_bytes"));
    }
  }
  SECTION("a family at the limits edited while it is looked up") {
    home.write("kernels/wide/kernel.toml", family_spec("wide", 128, 1000));
    home.write("kernels/wide/kernel.cpp", k_source);
    REQUIRE(reply_of(c, {{"op", "lookup"}, {"kernel", "wide"}, {"shape", "N=8"}}).value("ok", false));
    LookupProbe wide(daemon.socket(), "wide");
    for (int edit = 0; edit < 5; ++edit) {
      std::this_thread::sleep_for(1100ms);
      home.write("kernels/wide/kernel.cpp", k_source + "// edit " + std::to_string(edit) + "\n");
    }
    std::this_thread::sleep_for(1500ms);
    const auto ms = wide.stop();
    CHECK(wide.failed() == 0);
    WARN("lookups of a family read again 5 times meanwhile: " << ms.size() << ", p50 "
                                                               << percentile(ms, 0.5) << " ms, max "
                                                               << ms.back() << " ms");
    CHECK(percentile(ms, 0.5) < 10);
  }
  const auto ms = probe.stop();
  REQUIRE(ms.size() > 10);
  CHECK(probe.failed() == 0);
  WARN("lookups meanwhile: " << ms.size() << ", p50 " << percentile(ms, 0.5) << " ms, p99 "
                             << percentile(ms, 0.99) << " ms, max " << ms.back() << " ms");
  CHECK(percentile(ms, 0.5) < 10);
  CHECK(ms.back() < 1000);
}

TEST_CASE("ktune check-kernel refuses a 100k-param kernel.toml naming the limit",
          "[integration][hostile][spec]") {
  TempDir dir;
  dir.write("huge/kernel.toml", family_spec("huge", 100'000));
  dir.write("huge/kernel.cpp", k_source);
  const auto run = ktune::test::run_tool(
      {ktune::test::bin_path("/ktune"), "check-kernel", (dir.path() / "huge").string()},
      {"PATH=/usr/bin:/bin", "KTUNE_HOME=" + dir.str()}, 60s);
  INFO(run.output);
  CHECK(run.code != 0);
  CHECK_THAT(run.output, Catch::Contains("spec_too_large") || Catch::Contains("max_spec_bytes"));
}

TEST_CASE("#include <...> cannot reach outside the include path, and a compiler's memory is "
          "bounded",
          "[integration][hostile][spec]") {
  TempDir home;
  home.write("ktuned.toml", "[daemon]\ncompile_workers = 1\n[limits]\ncompile_memory_mb = 300\n"
                            "[measure]\nmin_samples = 3\nmax_samples = 10\nmax_time_s = 0.01\n"
                            "min_time_s = 0\nwarmup_ms = 0\nflush_cache = false\n");
  home.write("kernels/zero/kernel.toml", family_spec("zero", 1));
  home.write("kernels/zero/kernel.cpp", "#include </dev/zero>\n" + k_source);
  home.write("kernels/shadow/kernel.toml", family_spec("shadow", 1));
  home.write("kernels/shadow/kernel.cpp", "#include <../../../etc/shadow>\n" + k_source);
  // A computed include is past any reading of the text: the compiler's memory bound stops it.
  home.write("kernels/computed/kernel.toml", family_spec("computed", 1));
  home.write("kernels/computed/kernel.cpp",
             "#define ENDLESS </dev/zero>\n#include ENDLESS\n" + k_source);
  DaemonProcess daemon(home.str(), {"--config", (home.path() / "ktuned.toml").string(),
                                    "--only-kernel-dir", (home.path() / "kernels").string()});
  REQUIRE(daemon.wait_ready(60s));
  auto conn = Connection::connect(daemon.socket());
  REQUIRE(conn.ok());
  Connection& c = *conn;
  for (const char* name : {"zero", "shadow"}) {
    const json reply = reply_of(c, {{"op", "lookup"}, {"kernel", name}, {"shape", "N=8"}});
    INFO(reply.dump());
    CHECK(reply.at("error").at("code") == "spec_error");
    CHECK_THAT(reply.at("error").at("message").get<std::string>(),
               Catch::Contains("outside the include path"));
  }
  const auto started = Clock::now();
  auto done = c.request({{"op", "tune"}, {"kernel", "computed"}, {"shape", "N=8"}, {"wait", true}},
                        {}, 300s);
  REQUIRE(done.ok());
  INFO(done->dump());
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  WARN("a compile reading /dev/zero under compile_memory_mb = 300 ended after " << seconds << " s");
  const json job = done->at("result").at("job");
  CHECK(job.at("state") == "failed");
  CHECK_THAT(job.at("error").get<std::string>(), Catch::Contains("failed to compile"));
}
