// JobService over real parts (service_rig.hpp): a tune is validated, resolved, planned and stored
// through the store writer, queued in the real Scheduler, joined when identical and refused at
// the quota; job/jobs/cancel answer from the store; a big space is enumerated off the loop; a
// stalled writer refuses new jobs with store_busy and marks queued jobs "stalled".
#include <catch2/catch.hpp>

#include "daemon/job_service.hpp"
#include "tests/daemon/service_rig.hpp"

#include <memory>

using namespace ktune;
using namespace ktune::daemon;
using ktune::test::RecordingClient;
using nlohmann::json;

namespace {

struct Rig : ktune::test::ServiceRig {
  explicit Rig(std::int64_t quota = 4) : ServiceRig(quota) {}
  // Sends `tune` with `body` and returns the one reply (the loop run until it came).
  json tune(json body, int id = 1) {
    auto client = std::make_shared<RecordingClient>();
    jobs.tune(client, request("tune", std::move(body), id));
    REQUIRE(run_until([&] { return !client->sent.empty(); }));
    REQUIRE(client->sent.size() == 1);
    return client->sent.front();
  }
  JobService jobs{job_context()};
};

json reduce_tune() {
  return json{{"kernel", "reduce_sum"}, {"shape", "N=4096"}, {"device", "cpu"}};
}

} // namespace

TEST_CASE("JobService: a tune is stored, queued and joined by an identical one",
          "[daemon][job_service]") {
  Rig rig;
  const json first = rig.tune(reduce_tune());
  REQUIRE(first.at("ok") == true);
  const json& result = first.at("result");
  const std::int64_t id = result.at("job").get<std::int64_t>();
  CHECK(id > 0);
  CHECK(result.at("state") == "queued");
  CHECK(result.at("device") == "cpu");
  CHECK_FALSE(result.contains("joined"));
  CHECK(rig.scheduler.queued() + rig.scheduler.running() == 1);

  auto stored = rig.store.get_job(id);
  REQUIRE(stored);
  REQUIRE(stored->has_value());
  CHECK((*stored)->kernel == "reduce_sum");
  CHECK((*stored)->fingerprint == ktune::test::k_rig_cpu_fingerprint);
  CHECK((*stored)->total == result.at("total").get<std::int64_t>());

  const json second = rig.tune(reduce_tune(), 2);
  REQUIRE(second.at("ok") == true);
  CHECK(second.at("id") == 2);
  CHECK(second.at("result").at("job") == id);
  CHECK(second.at("result").at("joined") == true);

  // job and jobs answer from the store.
  auto job = rig.jobs.job(Rig::request("job", {{"job", id}}));
  REQUIRE(job);
  CHECK(job->at("job").at("state") == "queued");
  CHECK_FALSE(job->at("job").contains("stalled"));
  auto list = rig.jobs.jobs(Rig::request("jobs", json::object()));
  REQUIRE(list);
  CHECK(list->at("jobs").size() == 1);

  // cancel stops it; a second cancel says it is over; an unknown id is unknown_job.
  auto cancelled = rig.jobs.cancel(Rig::request("cancel", {{"job", id}}));
  REQUIRE(cancelled);
  CHECK(cancelled->at("job") == id);
  auto again = rig.jobs.cancel(Rig::request("cancel", {{"job", id}}));
  REQUIRE_FALSE(again);
  CHECK(again.error().code == ErrorCode::bad_request);
  auto unknown = rig.jobs.cancel(Rig::request("cancel", {{"job", id + 100}}));
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code == ErrorCode::unknown_job);
}

TEST_CASE("JobService: tune fields are checked before anything is stored", "[daemon][job_service]") {
  Rig rig;
  struct Case {
    const char* what;
    json body;
    ErrorCode code;
    const char* says;
  };
  const Case cases[] = {
      {"unknown strategy", {{"strategy", "guess"}}, ErrorCode::bad_request, "unknown strategy 'guess'"},
      {"budget 0", {{"budget", 0}}, ErrorCode::bad_request, "'budget' must be an integer in 1.."},
      {"retry_failed not a boolean", {{"retry_failed", "yes"}}, ErrorCode::bad_request,
       "'retry_failed' must be a boolean"},
      {"deadline under the floor", {{"bench_timeout_s", 1}}, ErrorCode::bad_request,
       "under this ktuned's minimum of 10"},
      {"deadline over the limit", {{"compile_timeout_s", 100000}}, ErrorCode::bad_request,
       "over this ktuned's limit"},
      {"deadline not positive", {{"bench_timeout_s", -1}}, ErrorCode::bad_request,
       "must be a positive number of seconds"},
      {"unknown kernel", {{"kernel", "nope"}}, ErrorCode::unknown_kernel, "nope"},
      {"unknown device", {{"device", "tpu"}}, ErrorCode::unknown_device, "tpu"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    json body = reduce_tune();
    body.update(c.body);
    const json reply = rig.tune(body);
    REQUIRE(reply.at("ok") == false);
    CHECK(reply.at("error").at("code") == std::string(to_string(c.code)));
    CHECK_THAT(reply.at("error").at("message").get<std::string>(),
               Catch::Contains(c.says));
  }
  auto jobs = rig.store.list_jobs(10);
  REQUIRE(jobs);
  CHECK(jobs->empty());

  // A deadline within the bounds is the job's.
  json body = reduce_tune();
  body["bench_timeout_s"] = 30;
  body["retry_failed"] = true;
  const json ok = rig.tune(body);
  REQUIRE(ok.at("ok") == true);
  auto stored = rig.store.get_job(ok.at("result").at("job").get<std::int64_t>());
  REQUIRE(stored);
  REQUIRE(stored->has_value());
  CHECK((*stored)->options.bench_timeout_s == 30.0);
  CHECK((*stored)->options.retry_failed);
}

TEST_CASE("JobService: the quota refuses a tune before it joins or plans", "[daemon][job_service]") {
  Rig rig(1);
  const json first = rig.tune(reduce_tune());
  REQUIRE(first.at("ok") == true);
  const json refused = rig.tune(reduce_tune(), 2);
  REQUIRE(refused.at("ok") == false);
  CHECK(refused.at("error").at("code") == "too_many_jobs");
}

TEST_CASE("JobService: enumerate() answers at once for a small space, off the loop for a big one",
          "[daemon][job_service]") {
  Rig rig;
  auto gemm = rig.registry.find("gemm", Language::cpp);
  REQUIRE(gemm);
  PlanRequest small;
  small.kernel = *gemm;
  auto shape = Shape::parse("M=64,N=64,K=64");
  REQUIRE(shape);
  auto conformed = conform_shape(*shape, gemm->spec.shape_dims, "gemm");
  REQUIRE(conformed);
  small.shape = *conformed;
  REQUIRE(cartesian_size(small.kernel.spec) <= k_inline_enumeration);
  bool called = false;
  rig.jobs.enumerate({small}, [&](std::vector<PlanRequest> plans,
                                  std::vector<Result<std::vector<Config>>> spaces) {
    called = true;
    REQUIRE(plans.size() == 1);
    REQUIRE(spaces.size() == 1);
    REQUIRE(spaces.front());
    CHECK(!spaces.front()->empty());
  });
  CHECK(called);  // before enumerate() returned

  // A spec whose space is over the inline limit (its params multiplied up) goes to the helper
  // thread: the callback comes from the io loop later.
  PlanRequest big = small;
  std::vector<std::int64_t> values;
  const std::uint64_t base = cartesian_size(small.kernel.spec);
  for (std::uint64_t v = 1; v <= k_inline_enumeration / base + 1; ++v) {
    values.push_back(static_cast<std::int64_t>(v));
  }
  big.kernel.spec.params.push_back(ParamSpec{"EXTRA", values});
  REQUIRE(cartesian_size(big.kernel.spec) > k_inline_enumeration);
  bool later = false;
  rig.jobs.enumerate({big}, [&](std::vector<PlanRequest>, std::vector<Result<std::vector<Config>>> spaces) {
    later = true;
    CHECK(spaces.size() == 1);
  });
  CHECK_FALSE(later);
  CHECK(rig.run_until([&] { return later; }));
}

TEST_CASE("JobService: while the store writer is stalled a tune is refused with store_busy and "
          "queued jobs say stalled",
          "[daemon][job_service][store_writer]") {
  Rig rig;
  const json first = rig.tune(reduce_tune());
  REQUIRE(first.at("ok") == true);
  const std::int64_t id = first.at("result").at("job").get<std::int64_t>();

  // Another connection holds the database's write lock: a write meets it and the writer stalls.
  ktune::test::DatabaseLock lock(rig.config.db);
  bool written = false;
  rig.writer.submit("a test write",
                    [id](Store& store) { return store.set_job_state(id, JobState::queued); },
                    [&](const Result<void>& r) { written = r.ok(); });
  REQUIRE(rig.writer.stall());

  json body = reduce_tune();
  body["remeasure"] = true;  // not joinable: it needs a new job
  const json refused = rig.tune(body, 2);
  REQUIRE(refused.at("ok") == false);
  CHECK(refused.at("error").at("code") == "store_busy");
  auto job = rig.jobs.job(Rig::request("job", {{"job", id}}));
  REQUIRE(job);
  // The job object of the reply says why (docs/protocol.md § job: `stalled` in job objects).
  CHECK_THAT(job->at("job").value("stalled", ""), Catch::Contains("database busy"));
  auto list = rig.jobs.jobs(Rig::request("jobs", json::object()));
  REQUIRE(list);
  CHECK(list->at("jobs").at(0).contains("stalled"));

  // The lock goes: the waiting write goes through, the stall ends.
  lock.release();
  CHECK(rig.run_until([&] { return written; }));
  CHECK_FALSE(rig.writer.stall());
  const json now = rig.tune(body, 3);
  CHECK(now.at("ok") == true);
}
