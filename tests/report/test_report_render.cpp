// `ktune report` end to end: a real store with finished jobs, the command writing the page, and
// the page rendered in headless Chromium (--dump-dom after its scripts ran, and a screenshot).
// The page records how many charts it created (body[data-charts]), how many hold pixels
// (body[data-drawn]) and every script error or console.error (body[data-errors], <pre id=status>).
// Set KTUNE_REPORT_SCREENSHOT=<file.png> to keep the screenshot (docs/report-example.png), and
// KTUNE_REPORT_PAGE=<file.html> to keep the page.
#include "cli/report_command.hpp"
#include "tests/cuda/skip.hpp"
#include "tests/report/sample_jobs.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

using namespace ktune;
using ktune::test::must;

namespace {

struct Run {
  int code = 0;
  std::string out, err;
};

// `ktune report ARGS...` through the command's own CLI11 registration.
Run ktune_report(std::vector<std::string> args) {
  CLI::App app{"ktune", "ktune"};
  cli::ReportCommand command;
  cli::add_report_command(app, command);
  args.insert(args.begin(), {"ktune", "report"});
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  cli::Output io{out, err, false};
  Run run;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    run.code = cli::run_report_command(command, io).value_or(-1);
  } catch (const CLI::ParseError& e) {
    run.code = cli::k_exit_usage;
    err << e.what();
  }
  run.out = out.str();
  run.err = err.str();
  return run;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// $KTUNE_CHROMIUM, else chromium or chromium-browser on PATH; "" when none.
std::string find_chromium() {
  if (const char* env = std::getenv("KTUNE_CHROMIUM"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    for (const char* name : {"chromium", "chromium-browser"}) {
      const auto candidate = std::filesystem::path(dir) / name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return {};
}

// Runs headless Chromium on `page` with `extra` arguments (stdout to `out`), at most 120 s.
int chromium(const std::string& binary, const ktune::test::TempDir& dir, const std::string& extra,
             const std::filesystem::path& page, const std::filesystem::path& out) {
  const std::string command =
      "timeout 120 " + quoted(binary) +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --disable-crash-reporter --hide-scrollbars --user-data-dir=" +
      quoted((dir.path() / "profile").string()) + " " + extra + " " +
      quoted("file://" + page.string()) + " >" + quoted(out.string()) + " 2>>" +
      quoted((dir.path() / "chromium.log").string());
  return std::system(command.c_str());
}

std::string body_attribute(const std::string& dom, const std::string& name) {
  std::smatch match;
  const std::regex body_tag("<body[^>]*>");
  if (!std::regex_search(dom, match, body_tag)) return "<no body>";
  const std::string tag = match.str();
  const std::regex attribute(name + "=\"([^\"]*)\"");
  if (!std::regex_search(tag, match, attribute)) return "<no " + name + ">";
  return match[1].str();
}

} // namespace

TEST_CASE("ktune report refuses bad input with the documented exit codes", "[report]") {
  ktune::test::TempDir dir;
  const std::string db = (dir.path() / "ktune.db").string();
  const std::string page = (dir.path() / "r.html").string();

  SECTION("no database") {
    const Run run = ktune_report({"1", "-o", page, "--db", db});
    CHECK(run.code == cli::k_exit_error);
    CHECK_THAT(run.err, Catch::Contains("no database at " + db));
  }
  {
    auto store = must(Store::open(db, OpenMode::read_write));
    (void)ktune::test::write_sample_jobs(store);
  }
  SECTION("a bad job list is a usage error") {
    const Run run = ktune_report({"3-1", "-o", page, "--db", db});
    CHECK(run.code == cli::k_exit_usage);
    CHECK_THAT(run.err, Catch::Contains("3-1"));
  }
  SECTION("an unknown job") {
    const Run run = ktune_report({"1,77", "-o", page, "--db", db});
    CHECK(run.code == cli::k_exit_error);
    CHECK_THAT(run.err, Catch::Contains("unknown_job") && Catch::Contains("job 77"));
    CHECK_FALSE(std::filesystem::exists(page));
  }
  SECTION("an output directory that does not exist") {
    const Run run = ktune_report({"1", "-o", (dir.path() / "missing" / "r.html").string(), "--db", db});
    CHECK(run.code == cli::k_exit_error);
    CHECK_THAT(run.err, Catch::Contains("io_error"));
  }
  SECTION("the database is only read") {
    const auto before = std::filesystem::last_write_time(db);
    const Run run = ktune_report({"1", "-o", page, "--db", db});
    REQUIRE(run.code == cli::k_exit_ok);
    CHECK(std::filesystem::last_write_time(db) == before);
    CHECK_THAT(run.err, Catch::Contains("1 job(s), 18 result(s)"));
  }
}

TEST_CASE("ktune report's page draws every chart in headless Chromium", "[report][chromium]") {
  const std::string binary = find_chromium();
  if (binary.empty()) {
    ktune::test::skip_test("chromium is not installed (scripts/install-deps.sh installs it)");
  }
  ktune::test::TempDir dir;
  const std::string db = (dir.path() / "ktune.db").string();
  ktune::test::SampleJobs ids;
  {
    auto store = must(Store::open(db, OpenMode::read_write));
    ids = ktune::test::write_sample_jobs(store);
    // A third job still queued: no results, so no parameters, yet its three charts draw.
    const auto queued = must(store.create_job(ktune::test::sample_job("M=64,N=64,K=64", 9)));
    REQUIRE(queued == ids.second + 1);
  }
  const auto page = dir.path() / "sweep.html";
  const std::string jobs = std::to_string(ids.first) + "-" + std::to_string(ids.second + 1);
  const Run run = ktune_report({jobs, "-o", page.string(), "--db", db});
  INFO(run.err);
  REQUIRE(run.code == cli::k_exit_ok);

  const auto dom_file = dir.path() / "dom.html";
  const int code = chromium(binary, dir, "--virtual-time-budget=5000 --dump-dom", page, dom_file);
  INFO("chromium log:\n" << read_file(dir.path() / "chromium.log"));
  REQUIRE(code == 0);
  const std::string dom = read_file(dom_file);
  INFO("status: " << dom.substr(std::min(dom.size(), dom.rfind("<pre id=\"status\"")), 400));

  // Per job: progress, histogram, statuses, and one chart per parameter (3, 3 and none); then
  // the winner time and GFLOP/s across the jobs. No error means no axis repeated a tick label
  // either (the page checks every numeric axis's labels after drawing).
  CHECK(body_attribute(dom, "data-errors") == "0");
  CHECK(body_attribute(dom, "data-charts") == "17");
  CHECK(body_attribute(dom, "data-drawn") == "17");
  CHECK(dom.find("drew 17 of 17 charts") != std::string::npos);
  // Log-scale time axes: progress and the three parameters of the two jobs with results, and the
  // winner time across jobs (the queued job's progress has no time, so a linear axis).
  CHECK(body_attribute(dom, "data-log-axes") == "9");
  CHECK(dom.find("Example CPU @ 3.0GHz &lt;fast&gt;") != std::string::npos);
  CHECK(dom.find("BM=64 BN=16 UNROLL=4") != std::string::npos);  // the winner

  // The failures table of the first job: one row per failed candidate, with its config, status,
  // reason and the command that rebuilds it.
  const auto table_of = [&](const std::string& id) {
    const std::size_t at = dom.find("id=\"" + id + "\"");
    if (at == std::string::npos) return std::string();
    return dom.substr(at, dom.find("</table>", at) - at);
  };
  const std::string failures = table_of("failures-" + std::to_string(ids.first));
  REQUIRE_FALSE(failures.empty());
  std::size_t rows = 0;
  for (std::size_t at = failures.find("class=\"failure\""); at != std::string::npos;
       at = failures.find("class=\"failure\"", at + 1)) {
    ++rows;
  }
  CHECK(rows == 4);
  const auto store = must(Store::open(db, OpenMode::read_only));
  std::size_t failed = 0;
  for (const auto& r : must(store.job_results(ids.first))) {
    if (r.status == CandidateStatus::ok) continue;
    ++failed;
    INFO("result " << r.id << " " << r.config);
    const auto text = nlohmann::json::parse(r.config);
    const std::string shown = "BM=" + text["BM"].dump() + " BN=" + text["BN"].dump() +
                              " UNROLL=" + text["UNROLL"].dump();
    const std::size_t row_at = failures.find("data-result=\"" + std::to_string(r.id) + "\"");
    REQUIRE(row_at != std::string::npos);
    const std::string row = failures.substr(row_at, failures.find("</tr>", row_at) - row_at);
    CHECK(row.find(shown) != std::string::npos);
    CHECK(row.find(std::string(to_string(r.status))) != std::string::npos);
    std::string reason = std::regex_replace(r.reason, std::regex("<"), "&lt;");
    reason = std::regex_replace(reason, std::regex(">"), "&gt;");
    CHECK(row.find(reason) != std::string::npos);
    const std::string id = std::to_string(r.id);
    CHECK(row.find("ktune repro " + id + " -o repro-" + id) != std::string::npos);
    if (!r.log.empty()) CHECK(row.find("kernel.cpp:12:5") != std::string::npos);
  }
  CHECK(failed == 4);
  // The per-parameter views: the heat map of BM and UNROLL; and the view across the jobs.
  const std::string heatmap = table_of("heatmap-" + std::to_string(ids.first));
  CHECK(heatmap.find("UNROLL \\ BM") != std::string::npos);
  CHECK(heatmap.find("background") != std::string::npos);
  CHECK(dom.find("id=\"across-jobs\"") != std::string::npos);
  CHECK(table_of("failures-" + std::to_string(ids.second)).empty());  // no failure, no table

  const auto png = dir.path() / "report.png";
  REQUIRE(chromium(binary, dir, "--virtual-time-budget=5000 --window-size=1400,1800 --screenshot=" +
                                    quoted(png.string()),
                   page, dir.path() / "screenshot.out") == 0);
  const std::string image = read_file(png);
  REQUIRE(image.size() > 10'000);
  CHECK(image.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  if (const char* keep = std::getenv("KTUNE_REPORT_PAGE"); keep && *keep) {
    std::filesystem::copy_file(page, keep, std::filesystem::copy_options::overwrite_existing);
  }
  if (const char* keep = std::getenv("KTUNE_REPORT_SCREENSHOT"); keep && *keep) {
    std::filesystem::copy_file(png, keep, std::filesystem::copy_options::overwrite_existing);
  }
}

TEST_CASE("ktune report's time axes are logarithmic with distinct tick labels", "[report][chromium]") {
  const std::string binary = find_chromium();
  if (binary.empty()) {
    ktune::test::skip_test("chromium is not installed (scripts/install-deps.sh installs it)");
  }
  ktune::test::TempDir dir;
  const std::string db = (dir.path() / "ktune.db").string();
  // Times packed into 2% of a decade (where 3-digit ticks repeat), and a cluster near 0.09 ms
  // with one 0.83 ms outlier (which flattens the cluster on a linear axis from zero).
  const std::vector<std::vector<double>> runs = {
      {0.02712, 0.02718, 0.02721, 0.02723, 0.02727, 0.02731},
      {0.0901, 0.0913, 0.0922, 0.0934, 0.0951, 0.83},
  };
  std::vector<std::int64_t> ids;
  {
    auto store = must(Store::open(db, OpenMode::read_write));
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const std::string shape = "M=" + std::to_string(64 << k) + ",N=64,K=64";
      const auto id = must(store.create_job(ktune::test::sample_job(shape, 7)));
      ids.push_back(id);
      for (std::size_t i = 0; i <= runs[k].size(); ++i) {
        ResultRecord r;
        r.job_id = id;
        r.kernel = "gemm";
        r.source_hash = "5f0c3a9e77d14b2c9a1e0d3b6c8f2e41";
        r.shape = shape;
        r.dtype = "f32";
        r.fingerprint = "c3b1f0e2d4a59687";
        r.config = "{\"BM\":" + std::to_string(16 << (i % 3)) + ",\"UNROLL\":" +
                   std::to_string(1 + i / 3) + "}";
        r.config_index = static_cast<std::int64_t>(i);
        if (i == runs[k].size()) {
          r.status = CandidateStatus::crash;
          r.reason = "worker exited with signal 11";
          r.log = "SIGSEGV in gemm_kernel";
        } else {
          r.stats.n = 10;
          r.stats.median_ms = r.stats.q1_ms = r.stats.q3_ms = runs[k][i];
          r.gflops = 2.0 * 64 * 64 * (64 << k) / (runs[k][i] * 1e6);
        }
        must(store.insert_result(r));
      }
      must(store.update_job_progress(id, static_cast<std::int64_t>(runs[k].size() + 1), 1));
      must(store.set_job_state(id, JobState::done));
    }
  }
  const auto page = dir.path() / "ticks.html";
  const Run run = ktune_report({std::to_string(ids.front()) + "-" + std::to_string(ids.back()), "-o",
                                page.string(), "--db", db});
  INFO(run.err);
  REQUIRE(run.code == cli::k_exit_ok);
  const auto dom_file = dir.path() / "dom.html";
  REQUIRE(chromium(binary, dir, "--virtual-time-budget=5000 --dump-dom", page, dom_file) == 0);
  const std::string dom = read_file(dom_file);
  INFO("status: " << dom.substr(std::min(dom.size(), dom.rfind("<pre id=\"status\"")), 400));
  // Per job: progress, histogram, statuses, BM and UNROLL; then the two across the jobs. A
  // repeated tick label would be an error of the page.
  CHECK(body_attribute(dom, "data-errors") == "0");
  CHECK(body_attribute(dom, "data-charts") == "12");
  CHECK(body_attribute(dom, "data-drawn") == "12");
  CHECK(body_attribute(dom, "data-log-axes") == "7");
  for (const auto id : ids) {
    CHECK(dom.find("id=\"failures-" + std::to_string(id) + "\"") != std::string::npos);
  }
  CHECK(dom.find("worker exited with signal 11") != std::string::npos);
}
