// Scheduler driven in-process: real store (SQLite in a temp dir), real kernel families and
// planner, fake worker endpoints answered by the test. Two lanes busy at once, priorities, fair
// compile hand-out, cancel in every state, joining, a tune next to a compile check.
#include "tests/support/paths.hpp"
#include "jobs/compile_job.hpp"
#include "jobs/kernel_registry.hpp"
#include "daemon/batch_sizer.hpp"
#include "daemon/planner.hpp"
#include "daemon/replies.hpp"
#include "daemon/scheduler.hpp"
#include "tests/daemon/fake_workers.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

using namespace ktune;
using namespace ktune::daemon;
using ktune::test::FakeWorkers;
using ktune::test::TempDir;
using nlohmann::json;

namespace {

DeviceInfo device(const std::string& name) {
  return DeviceInfo{name, "fp-" + name, {{"kind", name == "cpu" ? "cpu" : "test"}}, ""};
}

// One scheduler over fake workers: `compile_workers` compile workers, lanes cpu and lane2.
struct Rig {
  explicit Rig(std::size_t compile_workers = 1, std::size_t compile_ahead = 2, bool serial = false)
      : store(open_store(home)),
        writer(io, store), fakes(io), pool(io, fakes.spawner(), compile_workers), planner(store, writer),
        scheduler(io, store, writer, pool, settings(compile_workers, compile_ahead, serial)) {
    pool.add_lane("lane2");
    registry.load({ktune::test::source_path("/kernels_src")});
    scheduler.set_job_end_hook([this](std::int64_t id, JobState state) { ended[id] = state; });
  }

  static Store open_store(const TempDir& dir) {
    auto opened = Store::open((dir.path() / "ktune.db").string(), OpenMode::read_write);
    REQUIRE(opened);
    Store store = std::move(opened.value());
    return store;
  }

  static SchedulerSettings settings(std::size_t compile_workers, std::size_t compile_ahead,
                                    bool serial) {
    SchedulerSettings s;
    s.serial = serial;
    s.cache_dir = "/nonexistent-cache";
    s.compile_workers = compile_workers;
    s.compile_ahead = compile_ahead;
    s.measure.finalists = 0;   // no finals: the tests count requests
    s.measure.prune_factor = 0;
    return s;
  }

  // A committed plan: `kernel` (cpu family) at `shape` on `lane`, exhaustive within `budget`.
  JobPlan plan(const std::string& kernel, const std::string& shape, const std::string& lane,
               std::int64_t budget, int priority = 0, bool remeasure = false,
               const std::string& strategy = "exhaustive") {
    auto loaded = registry.find(kernel, Language::cpp);
    REQUIRE(loaded);
    PlanRequest request;
    request.kernel = std::move(*loaded);
    auto parsed = Shape::parse(shape);
    REQUIRE(parsed);
    auto conformed = conform_shape(*parsed, request.kernel.spec.shape_dims, kernel);
    REQUIRE(conformed);
    request.shape = std::move(*conformed);
    request.dtype = "f32";
    request.device = device(lane);
    request.budget = budget;
    request.options.priority = priority;
    request.options.remeasure = remeasure;
    request.strategy = strategy;
    auto planned = planner.plan(std::move(request));
    REQUIRE(planned);
    REQUIRE(planner.commit(*planned));
    return std::move(*planned);
  }

  std::int64_t enqueue(JobPlan plan) {
    const auto id = plan.record.id;
    scheduler.enqueue(std::move(plan));
    return id;
  }

  // A compile's outcome: an artifact of its own, compiled in a run of `batch` configs.
  CompileOutcome compiled(const json& compile_job, std::size_t batch) {
    CompileOutcome outcome;
    outcome.artifact_path = "/fake/" + std::to_string(++artifacts) + ".so";
    outcome.entry_symbol = "entry_" + std::to_string(artifacts);
    outcome.compile_ms = 1;
    defines_of[outcome.artifact_path] = compile_job.value("defines", json::object());
    if (shape_compile) shape_compile(outcome, batch);
    return outcome;
  }

  // Answers the oldest pending request of `lane` ("" = compile pool) with success. The kernel
  // of a compile request is returned (compile jobs name it); "" when nothing was pending.
  std::string answer(const std::string& lane) {
    if (fakes.count(lane) == 0) return {};
    const auto& request = *std::find_if(fakes.pending.begin(), fakes.pending.end(),
                                        [&](const auto& r) { return r.lane == lane; });
    const bool batch = request.op == k_compile_batch;
    std::string what = request.op == "compile" ? request.job.value("kernel", "?")
                       : batch                  ? request.job.at(0).value("kernel", "?")
                                                : request.op;
    json reply;
    if (request.op == "compile") {
      reply = compiled(request.job, 1).to_json();
    } else if (batch) {
      reply = {{"outcomes", json::array()}};
      for (const auto& job : request.job) {
        reply["outcomes"].push_back(compiled(job, request.job.size()).to_json());
      }
    } else {
      BenchOutcome outcome;
      outcome.stats.n = 10;
      outcome.stats.median_ms = outcome.stats.mean_ms = outcome.stats.min_ms =
          outcome.stats.max_ms = outcome.stats.q1_ms = outcome.stats.q3_ms =
              bench_ms ? bench_ms(defines_of.at(request.job.at("artifact_path").get<std::string>()))
                       : 1.0 + artifacts;
      reply = outcome.to_json();
    }
    REQUIRE(fakes.reply(lane, request.op, std::move(reply)));
    ktune::test::poll(io);
    return what;
  }

  // Answers requests one at a time, the lanes in turn, until `done` holds or nothing is pending.
  bool drive(const std::function<bool()>& done, int limit = 2000) {
    ktune::test::poll(io);
    const std::string lanes[] = {"", "cpu", "lane2"};
    for (int i = 0; i < limit; ++i) {
      if (done()) return true;
      bool any = false;
      for (int k = 0; k < 3 && !any; ++k) any = !answer(lanes[(i + k) % 3]).empty();
      if (!any) {
        ktune::test::poll(io);
        if (fakes.pending.empty()) return done();
      }
    }
    return done();
  }

  [[nodiscard]] JobState state(std::int64_t id) {
    auto job = store.get_job(id);
    REQUIRE(job);
    REQUIRE(job->has_value());
    return (*job)->state;
  }

  TempDir home;
  boost::asio::io_context io;
  Store store;
  StoreWriter writer;
  FakeWorkers fakes;
  WorkerPool pool;
  Planner planner;
  KernelRegistry registry;
  Scheduler scheduler;
  std::map<std::int64_t, JobState> ended;
  int artifacts = 0;
  std::map<std::string, json> defines_of;          // fake artifact -> its compile's defines
  std::function<double(const json& defines)> bench_ms; // a candidate's median; unset: 1 + artifacts
  // Sets what a fake compile reports of its run (batch_size, compile_ms); unset: 1 ms, and no
  // batch size, so that the scheduler never batches.
  std::function<void(CompileOutcome& outcome, std::size_t batch)> shape_compile;
};

} // namespace

TEST_CASE("two jobs on two lanes measure at the same time", "[daemon][scheduler]") {
  Rig rig(2);
  const auto a = rig.enqueue(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3));
  const auto b = rig.enqueue(rig.plan("reduce_sum", "N=4096", "lane2", 3));
  REQUIRE(rig.drive([&] { return rig.fakes.count("cpu", "bench") && rig.fakes.count("lane2", "bench"); }));
  CHECK(rig.scheduler.running() == 2);
  CHECK(rig.scheduler.running_on("cpu") == a);
  CHECK(rig.scheduler.running_on("lane2") == b);
  REQUIRE(rig.drive([&] { return rig.ended.size() == 2; }));
  CHECK(rig.state(a) == JobState::done);
  CHECK(rig.state(b) == JobState::done);
}

TEST_CASE("one job per lane at a time, the highest priority first", "[daemon][scheduler]") {
  Rig rig;
  const auto low = rig.enqueue(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 2, -5));
  const auto high = rig.enqueue(rig.plan("gemm", "M=128,N=128,K=128", "cpu", 2, 5));
  const auto other = rig.enqueue(rig.plan("gemm", "M=32,N=32,K=32", "lane2", 2, -50));
  ktune::test::poll(rig.io);
  CHECK(rig.scheduler.running_on("cpu") == high);
  CHECK(rig.scheduler.running_on("lane2") == other); // another lane is not blocked by priority
  CHECK(rig.state(low) == JobState::queued);
  REQUIRE(rig.drive([&] { return rig.ended.count(high) > 0; }));
  ktune::test::poll(rig.io);
  CHECK(rig.scheduler.running_on("cpu") == low);
  REQUIRE(rig.drive([&] { return rig.ended.size() == 3; }));
  CHECK(rig.state(low) == JobState::done);
}

TEST_CASE("compiles are handed out fairly across active jobs", "[daemon][scheduler]") {
  Rig rig(1);
  rig.enqueue(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 6));
  rig.enqueue(rig.plan("reduce_sum", "N=4096", "lane2", 6));
  // Compiles only (benches stay unanswered): each job keeps compile_ahead = 2 in flight.
  std::vector<std::string> order;
  for (int i = 0; i < 8; ++i) {
    ktune::test::poll(rig.io);
    const std::string kernel = rig.answer("");
    if (kernel.empty()) break;
    order.push_back(kernel);
  }
  REQUIRE(order.size() >= 6);
  // After the two references, never the same job three times in a row while the other waits.
  int run = 1;
  for (std::size_t i = 1; i < order.size(); ++i) {
    run = order[i] == order[i - 1] ? run + 1 : 1;
    CHECK(run <= 2);
  }
  CHECK(std::count(order.begin(), order.end(), "gemm") >= 2);
  CHECK(std::count(order.begin(), order.end(), "reduce_sum") >= 2);
}

TEST_CASE("cancel works on a queued job, a compiling job and a measuring job",
          "[daemon][scheduler]") {
  Rig rig(1);
  const auto running = rig.enqueue(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 4));
  const auto queued = rig.enqueue(rig.plan("gemm", "M=32,N=32,K=32", "cpu", 4));
  ktune::test::poll(rig.io);
  REQUIRE(rig.scheduler.running_on("cpu") == running);

  SECTION("queued: ends at once, never reaches a worker") {
    CHECK(rig.scheduler.cancel(queued));
    CHECK(rig.state(queued) == JobState::cancelled);
    CHECK(rig.ended.at(queued) == JobState::cancelled);
    CHECK_FALSE(rig.scheduler.cancel(queued));
  }
  SECTION("compiling: queued compiles withdrawn, ends once its request in flight is answered") {
    rig.answer("");   // the reference
    ktune::test::poll(rig.io);
    REQUIRE(rig.fakes.count("") == 1); // one compile in flight, one waiting in the pool
    CHECK(rig.pool.waiting("") == 1);
    CHECK(rig.scheduler.cancel(running));
    ktune::test::poll(rig.io);
    CHECK(rig.pool.waiting("") == 0);
    CHECK(rig.ended.count(running) == 0);
    rig.answer("");
    ktune::test::poll(rig.io);
    CHECK(rig.state(running) == JobState::cancelled);
    // The lane goes to the next job.
    CHECK(rig.scheduler.running_on("cpu") == queued);
  }
  SECTION("measuring: the measurement in flight is kept, then the job ends") {
    REQUIRE(rig.drive([&] { return rig.fakes.count("cpu", "bench") > 0; }));
    auto before = rig.store.job_results(running);
    REQUIRE(before);
    CHECK(rig.scheduler.cancel(running));
    rig.answer("cpu");
    while (!rig.answer("").empty()) {
    }
    ktune::test::poll(rig.io);
    CHECK(rig.state(running) == JobState::cancelled);
    auto rows = rig.store.job_results(running);
    REQUIRE(rows);
    CHECK(rows->size() == before->size() + 1);
  }
  SECTION("a job that ended cannot be cancelled") {
    REQUIRE(rig.drive([&] { return rig.ended.count(running) > 0; }));
    CHECK_FALSE(rig.scheduler.cancel(running));
  }
}

TEST_CASE("identical requests join the queued or running job", "[daemon][scheduler]") {
  Rig rig;
  JobPlan first = rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3);
  JobRecord same = first.record;
  const auto id = rig.enqueue(std::move(first));
  CHECK(rig.scheduler.find_same(same) == id);       // queued
  ktune::test::poll(rig.io);
  CHECK(rig.scheduler.find_same(same) == id);       // running
  JobRecord other_device = same;
  other_device.fingerprint = "fp-lane2";
  CHECK_FALSE(rig.scheduler.find_same(other_device));
  JobRecord retry = same;
  retry.options.retry_failed = true;
  CHECK_FALSE(rig.scheduler.find_same(retry));      // runs quarantined configs: another job
  // A tune-on-miss plan (lowest priority) of the same key joins as well.
  JobRecord background = same;
  background.options.priority = k_background_priority;
  CHECK(rig.scheduler.find_same(background) == id);
}

TEST_CASE("a tune submitted during a compile check finishes", "[daemon][scheduler]") {
  Rig rig(1);
  CheckPlan check;
  check.record.kernel = "gemm";
  check.record.strategy = "compile_check";
  check.record.device = "sm_90";
  auto id = rig.store.create_job(check.record);
  REQUIRE(id);
  check.record.id = *id;
  for (int i = 0; i < 40; ++i) check.compiles.push_back({{"kernel", "check"}, {"n", i}});
  int answered = 0;
  std::optional<JobState> check_end;
  check.on_compiled = [&](std::size_t, Result<json>) { ++answered; };
  check.on_end = [&](JobState state) { check_end = state; };
  rig.scheduler.enqueue(std::move(check));
  ktune::test::poll(rig.io);
  const auto tune = rig.enqueue(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3));
  REQUIRE(rig.drive([&] { return rig.ended.count(tune) > 0; }));
  CHECK(rig.state(tune) == JobState::done);
  CHECK(answered < 40); // the tune did not wait for the whole check
  REQUIRE(rig.drive([&] { return check_end.has_value(); }));
  CHECK(*check_end == JobState::done);
  CHECK(answered == 40);
}

TEST_CASE("a compile check can be cancelled while it runs", "[daemon][scheduler]") {
  Rig rig(1);
  CheckPlan check;
  check.record.kernel = "gemm";
  check.record.strategy = "compile_check";
  auto id = rig.store.create_job(check.record);
  REQUIRE(id);
  check.record.id = *id;
  for (int i = 0; i < 10; ++i) check.compiles.push_back({{"kernel", "check"}});
  std::optional<JobState> check_end;
  check.on_compiled = [](std::size_t, Result<json>) {};
  check.on_end = [&](JobState state) { check_end = state; };
  rig.scheduler.enqueue(std::move(check));
  ktune::test::poll(rig.io);
  rig.answer("");
  CHECK(rig.scheduler.cancel(*id));
  ktune::test::poll(rig.io);
  CHECK_FALSE(check_end);   // one compile still in flight
  rig.answer("");
  ktune::test::poll(rig.io);
  REQUIRE(check_end);
  CHECK(*check_end == JobState::cancelled);
  CHECK(rig.state(*id) == JobState::cancelled);
  CHECK(rig.fakes.history.size() == 2);
}

TEST_CASE("stop interrupts queued and running jobs", "[daemon][scheduler]") {
  Rig rig(1);
  const auto a = rig.enqueue(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3));
  const auto b = rig.enqueue(rig.plan("gemm", "M=32,N=32,K=32", "cpu", 3));
  ktune::test::poll(rig.io);
  bool stopped = false;
  rig.scheduler.stop(std::chrono::milliseconds(10000), [&] { stopped = true; });
  CHECK(rig.state(b) == JobState::interrupted);
  CHECK_FALSE(stopped);      // the reference compile is in flight
  rig.answer("");
  ktune::test::poll(rig.io);
  CHECK(stopped);
  CHECK(rig.state(a) == JobState::interrupted);
}

TEST_CASE("the winner is the incumbent when it ties, else the fastest tie, a re-run keeps it",
          "[daemon][scheduler]") {
  Rig rig;
  // The first three gemm configs (a budget of 3, exhaustive), timed by the test; tie_margin (3%)
  // decides the group without finals.
  JobPlan first_plan = rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3);
  REQUIRE(first_plan.configs.size() >= 3);
  const JobRecord key = first_plan.record;
  std::vector<std::string> texts;
  std::vector<json> configs;
  for (std::size_t i = 0; i < 3; ++i) {
    texts.push_back(config_json_text(first_plan.configs[i]));
    configs.push_back(json::parse(texts.back()));
  }
  std::vector<double> times;
  rig.bench_ms = [&](const json& defines) {
    for (std::size_t i = 0; i < configs.size(); ++i) {
      bool same = true;
      for (const auto& [name, value] : configs[i].items()) same = same && defines.value(name, json()) == value;
      if (same) return times.at(i);
    }
    FAIL("a bench of an unknown config: " << defines.dump());
    return 0.0;
  };
  auto run = [&](JobPlan plan) {
    const auto id = rig.enqueue(std::move(plan));
    REQUIRE(rig.drive([&] { return rig.ended.count(id) > 0; }));
    REQUIRE(rig.state(id) == JobState::done);
    auto summary = job_summary(rig.store, id, WithResults::no);
    REQUIRE(summary);
    return summary->at("winner");
  };

  // No incumbent: the fastest of the group wins, not the lowest index.
  times = {1.02, 1.00, 1.50};
  json winner = run(std::move(first_plan));
  CHECK(winner.at("config_index") == 1);
  CHECK(winner.at("tie_group") == json::array({0, 1}));

  // Measured again, config 0 now a little faster: config 1 is still in the group and stays.
  times = {1.00, 1.02, 1.50};
  winner = run(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3, 0, true));
  CHECK(winner.at("config_index") == 1);
  CHECK(winner.at("tie_group") == json::array({0, 1}));

  // A re-run that measures nothing (every row reused) names the same winner.
  auto benches = [&] {
    return std::count_if(rig.fakes.history.begin(), rig.fakes.history.end(),
                         [](const auto& r) { return r.op != "compile"; });
  };
  const auto measured = benches();
  winner = run(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3));
  CHECK(benches() == measured);
  CHECK(winner.at("config_index") == 1);

  // The incumbent out of the group: the fastest wins.
  times = {1.00, 1.10, 1.50};
  winner = run(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 3, 0, true));
  CHECK(winner.at("config_index") == 0);
  CHECK(winner.at("tie_group") == json::array({0}));
  auto stored = rig.store.find_winner(key.kernel, key.source_hash, key.shape, key.dtype,
                                      key.fingerprint);
  REQUIRE(stored);
  REQUIRE(stored->has_value());
  CHECK((*stored)->config == texts[0]);
}

namespace {

// The SGEMM's compile times on the 2-core machine: 82 ms alone, 45 / B + 37 ms per config in a
// batch of B.
void sgemm_like_compiles(Rig& rig) {
  rig.shape_compile = [](CompileOutcome& outcome, std::size_t batch) {
    outcome.batch_size = static_cast<int>(batch);
    outcome.compile_ms = 45.0 / static_cast<double>(batch) + 37;
  };
}

// The configs of each compile request sent so far, in order.
std::vector<std::size_t> compile_sizes(const Rig& rig) {
  std::vector<std::size_t> sizes;
  for (const auto& request : rig.fakes.history) {
    if (request.op == "compile") sizes.push_back(1);
    if (request.op == k_compile_batch) sizes.push_back(request.job.size());
  }
  return sizes;
}

} // namespace

TEST_CASE("a job's compiles grow into batches as their times are measured, each artifact is "
          "called by its own symbol", "[daemon][scheduler][batch]") {
  Rig rig(1, 0);  // compile_ahead follows the batch size
  sgemm_like_compiles(rig);
  const auto id = rig.enqueue(rig.plan("gemm", "M=256,N=256,K=256", "cpu", 40));
  REQUIRE(rig.drive([&] { return rig.ended.count(id) > 0; }));
  CHECK(rig.state(id) == JobState::done);

  const auto sizes = compile_sizes(rig);
  REQUIRE(sizes.size() >= 3);
  CHECK(sizes[0] == 1);  // the reference, alone: the time of a single compile
  CHECK(sizes[1] == 2);  // the probe that measures a batch
  CHECK(*std::max_element(sizes.begin(), sizes.end()) == BatchSizer::k_max_size);
  CHECK(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}) == 1 + 40);
  const auto batches = std::count_if(sizes.begin(), sizes.end(), [](auto n) { return n > 1; });
  CHECK(rig.scheduler.counters().compile_batches == static_cast<std::uint64_t>(batches));

  // The reference was the first artifact (entry_1); every candidate is called by its own.
  int benches = 0;
  for (const auto& request : rig.fakes.history) {
    if (request.op != "bench") continue;
    ++benches;
    const std::string artifact = request.job.at("artifact_path");
    const std::string number = artifact.substr(6, artifact.size() - 9);  // "/fake/N.so"
    CHECK(request.job.at("entry") == "entry_" + number);
    CHECK(request.job.at("reference_entry") == "entry_1");
  }
  CHECK(benches == 40);
}

TEST_CASE("a batch that fails as a whole is compiled again config by config",
          "[daemon][scheduler][batch]") {
  Rig rig(1, 0);
  sgemm_like_compiles(rig);
  const auto id = rig.enqueue(rig.plan("gemm", "M=256,N=256,K=256", "cpu", 6));
  ktune::test::poll(rig.io);
  rig.answer("");  // the reference
  REQUIRE(rig.fakes.count("", k_compile_batch) == 1);
  const json failed = rig.fakes.pending.front().job;
  REQUIRE(rig.fakes.reply("", k_compile_batch,
                          make_error(ktune::ErrorCode::worker_timeout, "killed after its 120000 ms deadline")));
  ktune::test::poll(rig.io);
  REQUIRE(rig.drive([&] { return rig.ended.count(id) > 0; }));
  CHECK(rig.state(id) == JobState::done);
  // Its configs were compiled again, each alone; none was filed as a compile_timeout.
  for (const auto& job : failed) {
    const auto alone = std::count_if(rig.fakes.history.begin(), rig.fakes.history.end(), [&](const auto& r) {
      return r.op == "compile" && r.job.at("defines") == job.at("defines");
    });
    CHECK(alone == 1);
  }
  auto rows = rig.store.job_results(id);
  REQUIRE(rows);
  CHECK(rows->size() == 6);
  for (const auto& row : *rows) CHECK(row.status == CandidateStatus::ok);
}

TEST_CASE("a source whose batches fail though each config compiles goes back to single compiles",
          "[daemon][scheduler][batch]") {
  Rig rig(1, 0);
  rig.shape_compile = [](CompileOutcome& outcome, std::size_t batch) {
    outcome.batch_size = 1;
    outcome.compile_ms = 82;
    if (batch > 1) {
      outcome.batch_error = "a batch of " + std::to_string(batch) +
                            " configs failed though each compiles without the others: "
                            "error: redefinition of 'int helper()'";
    }
  };
  const auto id = rig.enqueue(rig.plan("gemm", "M=256,N=256,K=256", "cpu", 20));
  REQUIRE(rig.drive([&] { return rig.ended.count(id) > 0; }));
  CHECK(rig.state(id) == JobState::done);
  const auto sizes = compile_sizes(rig);
  // The probes sent before the first answer came back (compile_ahead, 2 x (1 + 1) x 2, holds
  // four), then never a batch again.
  CHECK(std::count_if(sizes.begin(), sizes.end(), [](auto n) { return n > 1; }) <= 4);
  CHECK(std::all_of(sizes.end() - 10, sizes.end(), [](auto n) { return n == 1; }));
}

TEST_CASE("a strategy's batch of proposals is spread over the compile workers, then batched",
          "[daemon][scheduler][batch]") {
  for (const std::size_t workers : {std::size_t{1}, std::size_t{4}}) {
    INFO(workers << " compile worker(s)");
    Rig rig(workers, 0);
    sgemm_like_compiles(rig);
    const auto id = rig.enqueue(rig.plan("gemm", "M=256,N=256,K=256", "cpu", 24, 0, false, "random"));
    REQUIRE(rig.drive([&] { return rig.ended.count(id) > 0; }));
    CHECK(rig.state(id) == JobState::done);
    const auto sizes = compile_sizes(rig);
    // search_batch = 4 proposals at a time: one request of 4 on one worker, 4 singles on four.
    CHECK(*std::max_element(sizes.begin(), sizes.end()) == (workers == 1 ? 4u : 1u));
    CHECK(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}) == 1 + 24);
  }
}

TEST_CASE("serial: one candidate at a time, never a compile beside a measurement",
          "[daemon][scheduler]") {
  Rig rig(2, 2, true);
  const auto id = rig.enqueue(rig.plan("gemm", "M=64,N=64,K=64", "cpu", 6));
  std::size_t most_at_once = 0, benches = 0;
  ktune::test::poll(rig.io);
  for (int i = 0; i < 100 && rig.ended.count(id) == 0; ++i) {
    const std::size_t compiles = rig.fakes.count(""), measuring = rig.fakes.count("cpu");
    most_at_once = std::max(most_at_once, compiles + measuring);
    if (measuring > 0) {
      rig.answer("cpu");
      ++benches;
    } else if (compiles > 0) {
      rig.answer("");
    } else {
      ktune::test::poll(rig.io);
    }
  }
  REQUIRE(rig.ended.count(id) == 1);
  CHECK(rig.state(id) == JobState::done);
  CHECK(benches == 6);
  CHECK(most_at_once == 1);  // two compile workers, and still one request at a time
}

TEST_CASE("a CUDA job's compiles name its device's arch: the plan's, or the stored device's "
          "when the plan carries none", "[daemon][scheduler]") {
  Rig rig;
  auto loaded = rig.registry.find("gemm", Language::cuda);
  REQUIRE(loaded);
  PlanRequest request;
  request.kernel = std::move(*loaded);
  auto parsed = Shape::parse("M=64,N=64,K=64");
  REQUIRE(parsed);
  auto conformed = conform_shape(*parsed, request.kernel.spec.shape_dims, "gemm");
  REQUIRE(conformed);
  request.shape = std::move(*conformed);
  request.dtype = "f32";
  request.device = DeviceInfo{"lane2", "fp-gpu", {{"kind", "cuda"}, {"arch", "sm_90"}}, ""};
  request.budget = 2;
  request.strategy = "exhaustive";
  auto planned = rig.planner.plan(std::move(request));
  REQUIRE(planned);
  REQUIRE(rig.planner.commit(*planned));
  JobPlan plan = std::move(*planned);
  SECTION("planned: the plan's device") {}
  SECTION("resumed (no device in the plan): the one stored under its fingerprint") {
    plan.device = DeviceInfo{};
  }
  const auto id = rig.enqueue(std::move(plan));
  REQUIRE(rig.drive([&] { return rig.ended.count(id) > 0; }));
  int compiles = 0;
  for (const auto& r : rig.fakes.history) {
    if (r.op != "compile") continue;
    ++compiles;
    CHECK(r.job.at("arch") == "sm_90");
  }
  CHECK(compiles == 3);  // the reference and the two candidates
  CHECK(rig.state(id) == JobState::done);
}
