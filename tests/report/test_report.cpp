// ktune_report: the job list, the winner, the chart data computed for the page, and the page.
#include "report/report.hpp"
#include "tests/report/sample_jobs.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace ktune;
using namespace ktune::report;
using ktune::test::must;

TEST_CASE("parse_job_list reads ids, comma lists and ranges", "[report]") {
  SECTION("one id") { CHECK(must(parse_job_list("12")) == std::vector<std::int64_t>{12}); }
  SECTION("a list and ranges, duplicates dropped in first-appearance order") {
    CHECK(must(parse_job_list("9, 3-5,4,1")) == std::vector<std::int64_t>{9, 3, 4, 5, 1});
  }
  SECTION("bad items name themselves") {
    for (const char* text : {"", "0", "x", "3-", "-3", "5-2", "1,,2", "2.5", "1-2-3"}) {
      auto r = parse_job_list(text);
      REQUIRE_FALSE(r);
      CHECK(r.error().code == ktune::ErrorCode::bad_job_list);
    }
    CHECK_THAT(parse_job_list("1,5-2").error().message, Catch::Contains("5-2"));
  }
  SECTION("too many jobs is refused, not truncated") {
    auto r = parse_job_list("1-100000");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("1000"));
    CHECK(must(parse_job_list("1-1000")).size() == 1000);
    CHECK_FALSE(parse_job_list("1-1000,2000"));
  }
}

TEST_CASE("histogram bins ok times linearly or on a log scale", "[report]") {
  SECTION("linear: every time in one bin, pruned counted apart") {
    const Histogram h = histogram({1.0, 1.5, 2.0, 2.5, 3.0, 3.0}, {false, false, false, true, false, true});
    REQUIRE(h.measured.size() == 5);
    CHECK_FALSE(h.log);
    CHECK(h.edges.size() == h.measured.size() + 1);
    CHECK(h.edges.front() == 1.0);
    CHECK(h.edges.back() == 3.0);
    std::int64_t measured = 0, pruned = 0;
    for (std::size_t i = 0; i < h.measured.size(); ++i) {
      measured += h.measured[i];
      pruned += h.pruned[i];
    }
    CHECK(measured == 4);
    CHECK(pruned == 2);
    CHECK(h.measured.front() == 1);
    CHECK(h.pruned.back() == 1);  // the maximum lands in the last bin
  }
  SECTION("a wide range gets log-spaced bins") {
    const Histogram h = histogram({0.01, 0.1, 1.0, 10.0}, {});
    CHECK(h.log);
    CHECK(std::abs(h.edges[1] / h.edges[0] - h.edges[2] / h.edges[1]) < 1e-9);
  }
  SECTION("one outlier does not squeeze the bulk into a bin or two") {
    std::vector<double> times;
    for (int i = 0; i < 40; ++i) times.push_back(0.1 + 0.005 * i);
    times.push_back(20.0);
    const Histogram h = histogram(times, {});
    CHECK(h.log);
    const auto filled = std::count_if(h.measured.begin(), h.measured.end(),
                                      [](std::int64_t c) { return c > 0; });
    CHECK(filled >= 5);
    CHECK(h.measured.back() == 1);
  }
  SECTION("one distinct time, and nothing at all") {
    const Histogram one = histogram({2.0, 2.0}, {});
    REQUIRE_FALSE(one.edges.empty());
    CHECK(one.edges.front() < 2.0);
    CHECK(one.edges.back() > 2.0);
    CHECK(histogram({}, {}).edges.empty());
  }
}

TEST_CASE("job_winner follows the job op's rule", "[report]") {
  JobData data;
  data.job.id = 4;
  auto add = [&](std::int64_t index, double median, CandidateStatus status = CandidateStatus::ok) {
    ResultRecord r;
    r.id = 100 + index;
    r.job_id = 4;
    r.config_index = index;
    r.status = status;
    r.stats.median_ms = median;
    data.results.push_back(r);
  };
  add(0, 3.0);
  add(1, 2.0);
  add(2, 1.0, CandidateStatus::crash);
  add(3, 2.0);
  SECTION("lowest ok median, ties to the lower index") { CHECK(job_winner(data) == 1u); }
  SECTION("pruned ones only when all were pruned") {
    data.results[1].pruned = true;
    data.results[3].pruned = true;
    CHECK(job_winner(data) == 0u);
    data.results[0].pruned = true;
    CHECK(job_winner(data) == 1u);
  }
  SECTION("among declared ties the lowest median wins, not the lower index or fewer registers") {
    data.results[0].tied = data.results[1].tied = data.results[3].tied = true;
    data.results[3].stats.median_ms = 1.95;
    data.results[1].registers = 32;
    data.results[3].registers = 40;
    CHECK(job_winner(data) == 3u);
  }
  SECTION("the key's winner row, when it is this job's") {
    WinnerRecord w;
    w.job_id = 4;
    w.result_id = 100;
    data.key_winner = w;
    CHECK(job_winner(data) == 0u);
    data.key_winner->job_id = 3;
    CHECK(job_winner(data) == 1u);
  }
  SECTION("none when nothing succeeded") {
    data.results = {data.results[2]};
    CHECK_FALSE(job_winner(data).has_value());
  }
}

TEST_CASE("report_data computes what the charts draw from a stored job", "[report]") {
  ktune::test::TempDir dir;
  const std::string db = (dir.path() / "ktune.db").string();
  ktune::test::SampleJobs ids;
  {
    auto store = must(Store::open(db, OpenMode::read_write));
    ids = ktune::test::write_sample_jobs(store);
  }
  const auto store = must(Store::open(db, OpenMode::read_only));

  SECTION("an unknown job names the id and the database") {
    auto r = load_jobs(store, {ids.first, 999});
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ktune::ErrorCode::unknown_job);
    CHECK_THAT(r.error().message, Catch::Contains("999") && Catch::Contains(db));
  }

  const auto jobs = must(load_jobs(store, {ids.first, ids.second}));
  const auto data = report_data(jobs, 1'763'779'800'000);
  REQUIRE(data["jobs"].size() == 2);
  const auto& j = data["jobs"][0];

  SECTION("header: the job, its device and its timing") {
    CHECK(j["job"]["id"] == ids.first);
    CHECK(j["job"]["state"] == "done");
    CHECK(j["job"]["device"]["model"] == "Example CPU @ 3.0GHz <fast>");
    CHECK(j["job"]["timing"]["compile_ms"] == 1510.25);
    CHECK(j["job"]["timing"]["compiles"] == 18);
    CHECK(j["results"] == 18);
  }
  SECTION("progress: insertion order and a best-so-far that never rises") {
    const auto& progress = j["progress"];
    REQUIRE(progress.size() == 18);
    CHECK(progress[0]["config_index"] == 7);  // the first result stored
    CHECK(progress[1]["config_index"] == 2);
    double previous = 1e30;
    double lowest = 1e30;
    for (const auto& p : progress) {
      if (p["status"] == "ok") {
        lowest = std::min(lowest, p["median_ms"].get<double>());
      } else {
        CHECK(p["median_ms"].is_null());
      }
      REQUIRE_FALSE(p["best_ms"].is_null());  // the first result stored is ok
      CHECK(p["best_ms"].get<double>() == lowest);
      CHECK(p["best_ms"].get<double>() <= previous);
      previous = p["best_ms"].get<double>();
    }
  }
  SECTION("winner: the stored winner's config") {
    REQUIRE(j["winner"].is_object());
    const double best = j["progress"].back()["best_ms"].get<double>();
    CHECK(j["winner"]["median_ms"].get<double>() == best);
    CHECK(j["winner"]["config"].contains("UNROLL"));
    CHECK(j["winner"]["tied"] == true);
  }
  SECTION("statuses: ok first, then the failures that occurred") {
    const auto& s = j["statuses"];
    REQUIRE(s.size() == 4);
    CHECK(s[0] == nlohmann::ordered_json{{"status", "ok"}, {"count", 14}});
    CHECK(s[1] == nlohmann::ordered_json{{"status", "compile_error"}, {"count", 2}});
    CHECK(s[2] == nlohmann::ordered_json{{"status", "mismatch"}, {"count", 1}});
    CHECK(s[3] == nlohmann::ordered_json{{"status", "timeout"}, {"count", 1}});
  }
  SECTION("histogram: every ok candidate counted once") {
    std::int64_t total = 0;
    for (const auto& c : j["histogram"]["measured"]) total += c.get<std::int64_t>();
    for (const auto& c : j["histogram"]["pruned"]) total += c.get<std::int64_t>();
    CHECK(total == 14);
  }
  SECTION("sensitivity: params in config order, values numerically, medians of ok times") {
    const auto& s = j["sensitivity"];
    REQUIRE(s.size() == 3);
    CHECK(s[0]["param"] == "BM");
    CHECK(s[1]["param"] == "BN");
    CHECK(s[2]["param"] == "UNROLL");
    const auto& unroll = s[2]["values"];
    REQUIRE(unroll.size() == 3);
    CHECK(unroll[0]["value"] == "1");
    CHECK(unroll[2]["value"] == "4");
    // UNROLL=4: configs 2, 5 (compile error), 8, 11 (compile error), 14, 17.
    CHECK(unroll[2]["ok"] == 4);
    CHECK(unroll[2]["failed"] == 2);
    std::vector<double> times = {ktune::test::sample_time_ms(16, 8, 4), ktune::test::sample_time_ms(32, 8, 4),
                                 ktune::test::sample_time_ms(64, 8, 4), ktune::test::sample_time_ms(64, 16, 4)};
    std::sort(times.begin(), times.end());
    CHECK(unroll[2]["median_ms"].get<double>() == Approx((times[1] + times[2]) / 2));
  }
  SECTION("failures: every failed candidate with its config, reason, log and repro command") {
    const auto& f = j["failures"];
    REQUIRE(f.size() == 4);
    std::vector<std::int64_t> indices;
    for (const auto& row : f) {
      indices.push_back(row["config_index"].get<std::int64_t>());
      CHECK(row["status"] != "ok");
      CHECK_FALSE(row["reason"].get<std::string>().empty());
      CHECK(row["config"].contains("BM"));
      const std::string id = std::to_string(row["result_id"].get<std::int64_t>());
      CHECK(row["repro"] == "ktune repro " + id + " -o repro-" + id);
    }
    CHECK(indices == std::vector<std::int64_t>{11, 9, 16, 5});  // insertion order
    CHECK(f[0]["status"] == "compile_error");
    CHECK_THAT(f[0]["log"].get<std::string>(), Catch::Contains("kernel.cpp:12:5"));
    CHECK(f[1]["status"] == "timeout");
    CHECK(f[2]["reason"] == "element 17: 3.5 vs 3.25");
    CHECK(data["jobs"][1]["failures"].empty());
  }
  SECTION("sensitivity: the best time per value") {
    const auto& unroll = j["sensitivity"][2]["values"];
    CHECK(unroll[2]["best_ms"].get<double>() == Approx(ktune::test::sample_time_ms(64, 16, 4)));
    CHECK(unroll[0]["best_ms"].get<double>() <= unroll[0]["median_ms"].get<double>());
  }
  SECTION("heat map: the best time per pair of the two parameters with the most values") {
    const auto& h = j["heatmap"];
    REQUIRE(h.is_object());
    CHECK(h["x"] == "BM");  // BM and UNROLL have three values, BN two
    CHECK(h["y"] == "UNROLL");
    CHECK(h["x_values"] == nlohmann::ordered_json{"16", "32", "64"});
    CHECK(h["y_values"] == nlohmann::ordered_json{"1", "2", "4"});
    REQUIRE(h["cells"].size() == 3);
    // BM=64, UNROLL=4: configs 14 (BN=8) and 17 (BN=16), both ok.
    const auto& cell = h["cells"][2][2];
    CHECK(cell["ok"] == 2);
    CHECK(cell["best_ms"].get<double>() == Approx(ktune::test::sample_time_ms(64, 16, 4)));
    // BM=16, UNROLL=4: config 2 ok, config 5 a compile error.
    CHECK(h["cells"][2][0]["failed"] == 1);
    CHECK(h["cells"][2][0]["ok"] == 1);
  }
  SECTION("the second job of the sweep") {
    const auto& second = data["jobs"][1];
    CHECK(second["job"]["shape"] == "M=512,N=512,K=512");
    CHECK(second["statuses"].size() == 1);
    CHECK(second["winner"]["config_index"].is_number());
  }
}

TEST_CASE("render_html inlines the library and data that cannot end its script", "[report]") {
  nlohmann::ordered_json data = {{"written_at", 1}, {"chart_library", "Chart.js"},
                                 {"jobs", {{{"note", "</script><script>alert(1)</script>"}}}}};
  const std::string html = render_html(data);
  CHECK(html.find("@KTUNE_REPORT_DATA@") == std::string::npos);
  CHECK(html.find("@KTUNE_CHART_JS@") == std::string::npos);
  CHECK(html.find("Chart.js v" + std::string(chart_library_version())) != std::string::npos);
  CHECK(html.find("\\u003c/script>\\u003cscript>alert(1)") != std::string::npos);
  CHECK(html.find("alert(1)</script>") == std::string::npos);
  // Nothing is fetched when the page is viewed.
  CHECK(html.find("src=\"http") == std::string::npos);
  CHECK(html.find("href=\"http") == std::string::npos);
}

TEST_CASE("report_data names a CUDA device by its GPU", "[report]") {
  JobData data;
  data.job.id = 2;
  data.job.device = "cuda:0";
  data.job.fingerprint = "fp";
  DeviceInfo device;
  device.name = "cuda:0";
  device.fingerprint = "fp";
  device.details = {{"kind", "cuda"}, {"name", "NVIDIA H100"}, {"arch", "sm_90"}, {"sm_count", 132}};
  data.device = device;
  const auto header = report_data({data}, 0)["jobs"][0]["job"]["device"];
  CHECK(header["name"] == "cuda:0");
  CHECK(header["model"] == "NVIDIA H100");
  CHECK(header["arch"] == "sm_90");
  CHECK_FALSE(header.contains("sm_count"));
}

TEST_CASE("report_data keeps the start of a long failure log and says how much it left out", "[report]") {
  JobData data;
  data.job.id = 3;
  ResultRecord crash;
  crash.id = 41;
  crash.job_id = 3;
  crash.config = "{\"BM\":16}";
  crash.status = CandidateStatus::crash;
  crash.reason = "worker exited with signal 11";
  crash.log = "first line\n" + std::string(4989, 'x');  // 5000 characters
  data.results.push_back(crash);
  const auto failures = report_data({data}, 0)["jobs"][0]["failures"];
  REQUIRE(failures.size() == 1);
  const std::string log = failures[0]["log"];
  CHECK(log.rfind("first line\n", 0) == 0);
  CHECK_THAT(log, Catch::EndsWith("(3000 more characters)"));
  CHECK(log.size() < 2100);
  CHECK(failures[0]["status"] == "crash");
  CHECK(failures[0]["repro"] == "ktune repro 41 -o repro-41");
  CHECK(report_data({data}, 0)["jobs"][0]["heatmap"].is_null());  // one parameter
}
