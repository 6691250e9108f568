// LookupService: the winners of a real store answered on the ladder (exact, nearest, default)
// alike by the plain-line path and the decoded request; a winner learnt reaches the index and
// its one "winner changed" hook; bad lookups get the protocol's errors; counters by rung.
#include <catch2/catch.hpp>

#include "daemon/devices.hpp"
#include "daemon/lookup_service.hpp"
#include "daemon/worker_pool.hpp"
#include "tests/daemon/fake_workers.hpp"
#include "tests/daemon/service_rig.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/temp_dir.hpp"

#include <unistd.h>

#include <string>
#include <vector>

using namespace ktune;
using namespace ktune::daemon;
using nlohmann::json;

namespace {

const std::string k_remote = "0123456789abcdef0123456789abcdef";

// A connection that keeps what it is sent.
class RecordingClient final : public Client {
public:
  void send(std::string message) override { sent.push_back(std::move(message)); }
  [[nodiscard]] const PeerCredentials& peer() const override { return m_peer; }
  void close_after_flush() override {}
  std::vector<std::string> sent;

private:
  PeerCredentials m_peer{::getpid(), ::getuid(), ::getgid()};
};

// The services over real parts (service_rig.hpp); tune-on-miss goes to a real JobService.
struct Rig : ktune::test::ServiceRig {
  LookupContext context() {
    return LookupContext{io, offload, store, registry, devices, targets, jobs};
  }
  // A winner of reduce_sum at `shape` on a fingerprint this ktuned has never seen (k_remote):
  // a lookup there answers from the CUDA family (the current source).
  WinnerRecord winner(const std::string& shape, const std::string& config) {
    auto kernel = registry.find("reduce_sum", Language::cuda);
    REQUIRE(kernel);
    WinnerRecord w;
    w.kernel = "reduce_sum";
    w.source_hash = kernel->source_hash;
    w.shape = shape;
    w.dtype = "f32";
    w.fingerprint = k_remote;
    w.config = config;
    w.median_ms = 1.5;
    return w;
  }

  JobService jobs{job_context()};
};

json line_answer(LookupService& service, const std::string& line) {
  RecordingClient client;
  REQUIRE(service.answer_line(client, line));
  REQUIRE(client.sent.size() == 1);
  return json::parse(client.sent.front());
}

} // namespace

TEST_CASE("LookupService: stored winners answer on the ladder, alike on both paths",
          "[daemon][lookup_service]") {
  Rig rig;
  const WinnerRecord stored = rig.winner("N=4096", R"({"BLOCK":64})");
  // The store's winners at start are in the index.
  REQUIRE(rig.store.upsert_winner(stored).ok());
  LookupService service(rig.context());
  CHECK(service.winners().size() == 1);

  const auto request_for = [](const std::string& shape) {
    return json{{"v", 1}, {"id", 7}, {"op", "lookup"}, {"kernel", "reduce_sum"},
                {"shape", shape}, {"device", k_remote}, {"tune_on_miss", true}};
  };
  for (const std::string shape : {"N=4096", "N=8192"}) {
    INFO(shape);
    const json request = request_for(shape);
    const json fast = line_answer(service, request.dump());
    REQUIRE(fast.at("ok") == true);
    CHECK(fast.at("id") == 7);
    auto decoded = protocol::decode_request(request.dump());
    REQUIRE(decoded);
    auto general = service.lookup(*decoded, ::getuid());
    REQUIRE(general);
    CHECK(*general == fast.at("result"));
    CHECK(fast.at("result").at("config") == json::parse(stored.config));
    CHECK(fast.at("result").at("rung") == (shape == "N=4096" ? "exact" : "nearest"));
    CHECK_FALSE(fast.at("result").contains("tune_job"));  // a remote device never tunes on miss
  }
  auto jobs = rig.store.list_jobs(10);
  REQUIRE(jobs);
  CHECK(jobs->empty());
  CHECK(service.pending_tunes() == 0);

  // Another kernel has no winner: its default.
  const json other = line_answer(service, R"({"v":1,"id":"x","op":"lookup","kernel":"gemm",)"
                                          R"("shape":"M=64,N=64,K=64","device":")" + k_remote + R"("})");
  CHECK(other.at("id") == "x");
  CHECK(other.at("result").at("rung") == "default");
  CHECK(other.at("result").at("exact") == false);
  CHECK(other.at("result").at("config") != json::parse(stored.config));

  const LookupCounters& counters = service.counters();
  CHECK(counters.exact == 2);
  CHECK(counters.nearest == 2);
  CHECK(counters.fallback_default == 1);
}

TEST_CASE("LookupService: a winner learnt is answered and heard by the winner-changed hook",
          "[daemon][lookup_service]") {
  Rig rig;
  LookupService service(rig.context());
  const std::string line = R"({"v":1,"id":1,"op":"lookup","kernel":"reduce_sum","shape":"N=1024",)"
                           R"("device":")" + k_remote + R"("})";
  CHECK(line_answer(service, line).at("result").at("rung") == "default");

  std::vector<std::string> heard;
  service.winners().set_observer([&](const WinnerRecord& w) { heard.push_back(w.shape); });
  service.learn(rig.winner("N=1024", R"({"BLOCK":128})"));
  CHECK(heard == std::vector<std::string>{"N=1024"});
  CHECK(service.winners().size() == 1);
  const json answer = line_answer(service, line).at("result");
  CHECK(answer.at("rung") == "exact");
  CHECK(answer.at("config") == json{{"BLOCK", 128}});
}

TEST_CASE("LookupService: bad lookups get the protocol's errors, other lines are not taken",
          "[daemon][lookup_service]") {
  Rig rig;
  LookupService service(rig.context());

  const json unknown = line_answer(
      service, R"({"v":1,"id":3,"op":"lookup","kernel":"no_such_kernel","shape":"N=1"})");
  CHECK(unknown.at("ok") == false);
  CHECK(unknown.at("id") == 3);
  CHECK(unknown.at("error").at("code") == "unknown_kernel");

  const json bad_device = line_answer(
      service, R"({"v":1,"id":4,"op":"lookup","kernel":"reduce_sum","shape":"N=1","device":"gpu"})");
  CHECK(bad_device.at("error").at("code") == "unknown_device");

  const json bad_dtype = line_answer(
      service,
      R"({"v":1,"id":5,"op":"lookup","kernel":"reduce_sum","shape":"N=1","dtype":"i8","device":")" +
          k_remote + R"("})");
  CHECK(bad_dtype.at("error").at("code") == "bad_dtype");

  // Not the plain shape: nothing sent, the caller decodes the line.
  RecordingClient client;
  CHECK_FALSE(service.answer_line(client, R"({"v":1,"id":1,"op":"stats"})"));
  CHECK_FALSE(service.answer_line(client, R"({"v":1,"id":1,"op":"lookup","kernel":"reduce_sum"})"));
  CHECK_FALSE(service.answer_line(
      client, R"({"v":1,"id":1,"op":"lookup","kernel":"reduce_sum","shape":"N=1","tune_on_miss":"yes"})"));
  CHECK(client.sent.empty());

  // The decoded path checks tune_on_miss's type.
  auto decoded = protocol::decode_request(
      R"({"v":1,"id":1,"op":"lookup","kernel":"reduce_sum","shape":"N=1","tune_on_miss":"yes"})");
  REQUIRE(decoded);
  auto refused = service.lookup(*decoded, ::getuid());
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == ErrorCode::bad_request);
  // The ladder's errors count as misses; a request refused before the ladder is not counted.
  CHECK(service.counters().miss == 3);
}

TEST_CASE("LookupService: a miss on a local device queues one tune-on-miss job through the job service",
          "[daemon][lookup_service]") {
  Rig rig;
  LookupService service(rig.context());
  const std::string line = R"({"v":1,"id":3,"op":"lookup","kernel":"reduce_sum","shape":"N=4096",)"
                           R"("device":"cpu","tune_on_miss":true})";
  const json first = line_answer(service, line);
  REQUIRE(first.at("ok") == true);
  CHECK(first.at("result").at("rung") == "default");
  REQUIRE(first.at("result").contains("tune_job"));
  const std::int64_t job = first.at("result").at("tune_job").get<std::int64_t>();
  CHECK(service.pending_tunes() == 1);

  // The job is stored (through the writer), queued at the background priority, and charged.
  auto stored = rig.store.get_job(job);
  REQUIRE(stored);
  REQUIRE(stored->has_value());
  CHECK((*stored)->kernel == "reduce_sum");
  CHECK((*stored)->fingerprint == ktune::test::k_rig_cpu_fingerprint);
  CHECK((*stored)->options.priority == k_background_priority);

  // The same miss again joins it: no second job.
  const json again = line_answer(service, line);
  CHECK(again.at("result").at("tune_job") == job);
  auto jobs = rig.store.list_jobs(10);
  REQUIRE(jobs);
  CHECK(jobs->size() == 1);

  // Its end forgets the key; a later miss queues anew.
  service.job_ended(job, JobState::cancelled);
  CHECK(service.pending_tunes() == 0);
}
