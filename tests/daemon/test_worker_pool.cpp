// WorkerPool driven in-process with fake worker endpoints: lanes, the wait queue, hand-out by
// priority and fairness, withdraw, workers that announce their exit, spawn failures.
#include "daemon/worker_pool.hpp"
#include "tests/daemon/fake_workers.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using ktune::daemon::Delivery;
using ktune::daemon::Work;
using ktune::daemon::WorkerPool;
using ktune::test::FakeWorkers;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Work whose reply is appended to `log` as "<tag>:<ok|code>".
Work tagged(const std::string& tag, std::vector<std::string>& log, std::int64_t owner = 0,
            int priority = 0, const std::string& op = "compile") {
  Work work;
  work.op = op;
  work.job = {{"tag", tag}};
  work.owner = owner;
  work.priority = priority;
  work.on_reply = [&log, tag](ktune::Result<json> reply, const Delivery&) {
    log.push_back(tag + ":" + (reply ? std::string("ok") : std::string(ktune::to_string(reply.error().code))));
  };
  return work;
}

// Tags of the requests sent so far, in order.
std::vector<std::string> sent(const FakeWorkers& fakes) {
  std::vector<std::string> out;
  for (const auto& r : fakes.history) out.push_back(r.job.value("tag", ""));
  return out;
}

} // namespace

TEST_CASE("each lane measures one request at a time, and two lanes at once", "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 2);
  pool.add_lane("cuda:0");
  std::vector<std::string> log;
  pool.submit("cpu", tagged("cpu-1", log, 1, 0, "bench"));
  pool.submit("cpu", tagged("cpu-2", log, 1, 0, "bench"));
  pool.submit("cuda:0", tagged("gpu-1", log, 2, 0, "bench"));
  ktune::test::poll(io);
  CHECK(fakes.count("cpu") == 1);
  CHECK(fakes.count("cuda:0") == 1);
  CHECK(pool.waiting("cpu") == 1);
  CHECK(pool.busy("cpu") == 1);
  CHECK(pool.busy("cuda:0") == 1);

  REQUIRE(fakes.reply("cpu", "bench", json::object()));
  ktune::test::poll(io);
  CHECK(log == std::vector<std::string>{"cpu-1:ok"});
  CHECK(fakes.count("cpu") == 1); // cpu-2 went to the same lane worker
  CHECK(sent(fakes) == std::vector<std::string>{"cpu-1", "gpu-1", "cpu-2"});
  CHECK(fakes.spawned == 2);
}

TEST_CASE("waiting work goes out by priority, then fairly across owners", "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 1);
  std::vector<std::string> log;
  pool.submit("", tagged("a1", log, 1));     // taken at once by the only compile worker
  pool.submit("", tagged("a2", log, 1));
  pool.submit("", tagged("a3", log, 1));
  pool.submit("", tagged("b1", log, 2));
  pool.submit("", tagged("b2", log, 2));
  pool.submit("", tagged("c1", log, 3, 5));  // higher priority
  for (int i = 0; i < 6; ++i) {
    ktune::test::poll(io);
    REQUIRE(fakes.reply("", "", json::object()));
  }
  ktune::test::poll(io);
  // c1 first (priority); then the owner served least recently: b before a's second, and so on.
  CHECK(sent(fakes) == std::vector<std::string>{"a1", "c1", "b1", "a2", "b2", "a3"});
  CHECK(log.size() == 6);
}

TEST_CASE("withdraw drops an owner's queued work, its request in flight finishes",
          "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 1);
  std::vector<std::string> log;
  pool.submit("", tagged("x1", log, 7));
  pool.submit("", tagged("x2", log, 7));
  pool.submit("", tagged("y1", log, 8));
  pool.submit("", tagged("x3", log, 7));
  ktune::test::poll(io);
  CHECK(pool.withdraw(7) == 2);
  ktune::test::poll(io);
  CHECK(log == std::vector<std::string>{"x2:withdrawn", "x3:withdrawn"});
  REQUIRE(fakes.reply("", "", json::object()));
  ktune::test::poll(io);
  REQUIRE(fakes.reply("", "", json::object()));
  ktune::test::poll(io);
  CHECK(log == std::vector<std::string>{"x2:withdrawn", "x3:withdrawn", "x1:ok", "y1:ok"});
  CHECK(sent(fakes) == std::vector<std::string>{"x1", "y1"});
}

TEST_CASE("a worker that announced its exit gets no more work, a fresh one takes it",
          "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 1);
  std::vector<std::string> log;
  pool.submit("cpu", tagged("bad", log, 1, 0, "bench"));
  ktune::test::poll(io);
  REQUIRE(fakes.endpoints.size() == 1);
  // The reply that precedes the worker's exit (a lost context): the next bench is submitted from
  // inside that reply's handler, as the scheduler does.
  Work next = tagged("good", log, 1, 0, "bench");
  fakes.endpoints[0]->close_after_reply();
  REQUIRE(fakes.reply("cpu", "bench", ktune::make_error(ktune::ErrorCode::worker_crashed, "context lost")));
  pool.submit("cpu", std::move(next));
  ktune::test::poll(io);
  ktune::test::poll(io);
  CHECK(log == std::vector<std::string>{"bad:worker_crashed"});
  REQUIRE(fakes.endpoints.size() == 2);
  CHECK(fakes.count("cpu", "bench") == 1);
  REQUIRE(fakes.reply("cpu", "bench", json::object()));
  ktune::test::poll(io);
  CHECK(log == std::vector<std::string>{"bad:worker_crashed", "good:ok"});
}

TEST_CASE("an unknown lane answers no_device, a worker that cannot start spawn_failed",
          "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 1);
  std::vector<std::string> log;
  pool.submit("cuda:3", tagged("nowhere", log, 1, 0, "bench"));
  fakes.m_fail_spawn = true;
  pool.submit("", tagged("unstartable", log, 1));
  CHECK(log.empty()); // never inside submit()
  ktune::test::poll(io);
  CHECK(log == std::vector<std::string>{"nowhere:no_device", "unstartable:spawn_failed"});
}

TEST_CASE("shutdown withdraws waiting work and stops every worker", "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 1);
  std::vector<std::string> log;
  pool.submit("", tagged("running", log, 1));
  pool.submit("", tagged("waiting", log, 1));
  ktune::test::poll(io);
  bool done = false;
  pool.shutdown([&] { done = true; });
  ktune::test::poll(io);
  CHECK(done);
  CHECK(log == std::vector<std::string>{"waiting:withdrawn"});
  pool.submit("", tagged("late", log, 1));
  ktune::test::poll(io);
  CHECK(log.back() == "late:withdrawn");
}

TEST_CASE("worker time is booked per slot and per lane, and a replacement counts as a restart",
          "[daemon][pool][metrics]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 2);
  std::vector<std::string> log;
  Work compile = tagged("c1", log, 1);
  compile.device = "cpu";
  pool.submit("", std::move(compile));
  pool.submit("cpu", tagged("b1", log, 1, 0, "bench"));
  ktune::test::poll(io);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(fakes.reply("", "compile", json::object()));
  REQUIRE(fakes.reply("cpu", "bench", json::object()));
  ktune::test::poll(io);

  const auto slots = pool.slots();
  REQUIRE(slots.size() == 2);
  CHECK(slots[0].lane.empty());
  CHECK(slots[0].slot == 0);
  CHECK(slots[0].alive);
  CHECK(slots[0].busy.empty());
  CHECK(slots[0].seconds.compile_s > 0);
  CHECK(slots[0].seconds.bench_s == 0);
  CHECK(slots[1].lane == "cpu");
  CHECK(slots[1].seconds.bench_s > 0);
  CHECK(slots[1].seconds.compile_s == 0);
  const auto lanes = pool.lane_states();
  REQUIRE(lanes.size() == 1);
  CHECK(lanes[0].device == "cpu");
  CHECK(lanes[0].seconds.compile_s == slots[0].seconds.compile_s); // made for the cpu lane's job
  CHECK(lanes[0].seconds.bench_s == slots[1].seconds.bench_s);
  CHECK(lanes[0].restarts == 0);

  // The bench worker dies; the next bench request starts its replacement in the same slot.
  fakes.endpoints[1]->exit_now();
  ktune::test::poll(io);
  CHECK_FALSE(pool.slots()[1].alive);
  pool.submit("cpu", tagged("b2", log, 1, 0, "bench"));
  ktune::test::poll(io);
  const auto after = pool.slots();
  REQUIRE(after.size() == 2);
  CHECK(after[1].alive);
  CHECK(after[1].busy == "bench");
  CHECK(pool.restarts().at("cpu") == 1);
  CHECK(pool.restarts().at("") == 0);
  CHECK(pool.lane_states()[0].restarts == 1);
}

TEST_CASE("compiles borrow the bench CPU while the cpu lane is idle, and a bench pauses them",
          "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 1, 1);  // one compile worker; the cpu lane on CPU 1
  std::vector<std::string> log;
  pool.submit("", tagged("c1", log));
  pool.submit("", tagged("c2", log));
  pool.submit("", tagged("c3", log));
  ktune::test::poll(io);
  // The cpu lane is idle: c2 goes to a second worker, placed on the bench CPU.
  CHECK(fakes.count("") == 2);
  REQUIRE(fakes.spawned == 2);
  CHECK(fakes.borrowed == std::vector<bool>{false, true});
  const auto& lender = *fakes.endpoints[1];

  // A bench arrives while the borrowed worker compiles: the compile stops, the bench goes out.
  pool.submit("cpu", tagged("b1", log, 0, 0, "bench"));
  ktune::test::poll(io);
  CHECK(fakes.count("cpu") == 1);
  CHECK(lender.paused());
  // The regular worker finishes c1 and takes c3; the borrowed one stays paused with c2, and no
  // compile borrows the CPU while it measures.
  REQUIRE(fakes.reply("", "compile", json::object()));
  ktune::test::poll(io);
  CHECK(sent(fakes) == std::vector<std::string>{"c1", "c2", "b1", "c3"});
  pool.submit("", tagged("c4", log));
  ktune::test::poll(io);
  CHECK(pool.waiting("") == 1);
  CHECK(lender.paused());
  // The next bench goes out while the first is answered: the compile stays stopped.
  pool.submit("cpu", tagged("b2", log, 0, 0, "bench"));
  REQUIRE(fakes.reply("cpu", "bench", json::object()));
  ktune::test::poll(io);
  CHECK(fakes.count("cpu") == 1);
  CHECK(lender.paused());
  // The lane is idle again: c2 goes on; once it is done the borrowed worker takes c4.
  REQUIRE(fakes.reply("cpu", "bench", json::object()));
  ktune::test::poll(io);
  CHECK_FALSE(lender.paused());
  CHECK(pool.waiting("") == 1);
  REQUIRE(fakes.reply("", "compile", json::object()));  // c2, the oldest pending
  ktune::test::poll(io);
  CHECK(pool.waiting("") == 0);
  CHECK(fakes.spawned == 3);  // the borrowed worker is reused
  CHECK(sent(fakes).back() == "c4");
}

TEST_CASE("without a pinned bench CPU nothing is borrowed", "[daemon][pool]") {
  boost::asio::io_context io;
  FakeWorkers fakes(io);
  WorkerPool pool(io, fakes.spawner(), 1);
  std::vector<std::string> log;
  pool.submit("", tagged("c1", log));
  pool.submit("", tagged("c2", log));
  ktune::test::poll(io);
  CHECK(fakes.count("") == 1);
  CHECK(pool.waiting("") == 1);
}
