#pragma once
// Fake worker endpoints for driving WorkerPool and Scheduler in-process: every request a fake
// endpoint receives is kept, and the test answers it when it wants (reply()), so the order of
// events is the test's. Endpoints are made by a WorkerSpawner over a shared FakeWorkers registry.
#include "daemon/worker_pool.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace ktune::test {

// Runs every ready handler, also after an earlier poll found none (which stops an io_context).
inline void poll(boost::asio::io_context& io) {
  io.restart();
  io.poll();
}

struct FakeRequest {
  std::string lane;
  std::string op;
  nlohmann::json job;
  daemon::WorkerProcess::ReplyHandler on_reply;
};

class FakeWorkers;

class FakeEndpoint final : public daemon::WorkerEndpoint {
public:
  FakeEndpoint(FakeWorkers& owner, std::string lane, std::function<void()> on_exit)
      : m_owner(owner), m_lane(std::move(lane)), m_on_exit(std::move(on_exit)) {}
  void request(std::string_view op, nlohmann::json job,
               daemon::WorkerProcess::ReplyHandler on_reply,
               std::chrono::milliseconds deadline) override;
  [[nodiscard]] bool idle() const override { return !m_busy && !m_closing; }
  [[nodiscard]] const std::string& stderr_tail() const override { return m_tail; }
  void terminate() override { exit_now(); }
  void kill_group() override { exit_now(); }
  void pause() override {
    if (m_busy) m_paused = true;
  }
  void resume() override { m_paused = false; }
  [[nodiscard]] std::chrono::milliseconds paused_time() const override { return {}; }
  [[nodiscard]] bool paused() const { return m_paused; }
  // The worker announces it exits after this reply (a lost CUDA context): from now on it
  // takes no request, and it exits once the io loop runs again.
  void close_after_reply() { m_closing = true; }
  void exit_now();
  [[nodiscard]] const std::string& lane() const { return m_lane; }
  bool m_busy = false;

private:
  FakeWorkers& m_owner;
  std::string m_lane;
  std::function<void()> m_on_exit;
  std::string m_tail;
  bool m_closing = false;
  bool m_exited = false;
  bool m_paused = false;
};

class FakeWorkers {
public:
  explicit FakeWorkers(boost::asio::io_context& io) : m_io(io) {}

  [[nodiscard]] daemon::WorkerSpawner spawner() {
    return [this](const daemon::WorkerSlot& slot, std::function<void()> on_exit)
               -> Result<std::shared_ptr<daemon::WorkerEndpoint>> {
      if (m_fail_spawn) return make_error(ktune::ErrorCode::spawn_failed, "cannot start a fake worker");
      auto endpoint = std::make_shared<FakeEndpoint>(*this, slot.lane, std::move(on_exit));
      endpoints.push_back(endpoint);
      borrowed.push_back(slot.borrowed);
      ++spawned;
      return std::shared_ptr<daemon::WorkerEndpoint>(endpoint);
    };
  }

  // Answers the oldest pending request matching `lane` and `op` ("" = any) with `reply`.
  // Returns false when there is none.
  bool reply(const std::string& lane, const std::string& op, Result<nlohmann::json> reply) {
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->lane != lane || (!op.empty() && it->op != op)) continue;
      FakeRequest request = std::move(*it);
      pending.erase(it);
      boost::asio::post(m_io, [request = std::move(request), reply = std::move(reply)]() mutable {
        request.on_reply(std::move(reply));
      });
      return true;
    }
    return false;
  }
  [[nodiscard]] std::size_t count(const std::string& lane, const std::string& op = {}) const {
    std::size_t n = 0;
    for (const auto& r : pending) n += r.lane == lane && (op.empty() || r.op == op);
    return n;
  }

  boost::asio::io_context& io() { return m_io; }
  std::deque<FakeRequest> pending;           // sent, not answered yet, in sending order
  std::vector<FakeRequest> history;          // every request sent (without handlers)
  std::vector<std::shared_ptr<FakeEndpoint>> endpoints;
  std::vector<bool> borrowed;                // per spawned endpoint: WorkerSlot::borrowed
  int spawned = 0;
  bool m_fail_spawn = false;

private:
  boost::asio::io_context& m_io;
};

inline void FakeEndpoint::request(std::string_view op, nlohmann::json job,
                                  daemon::WorkerProcess::ReplyHandler on_reply,
                                  std::chrono::milliseconds) {
  m_busy = true;
  m_owner.history.push_back(FakeRequest{m_lane, std::string(op), job, {}});
  m_owner.pending.push_back(FakeRequest{
      m_lane, std::string(op), std::move(job),
      [this, on_reply = std::move(on_reply)](Result<nlohmann::json> reply) {
        m_busy = false;
        on_reply(std::move(reply));
        if (m_closing) boost::asio::post(m_owner.io(), [this] { exit_now(); });
      }});
}

inline void FakeEndpoint::exit_now() {
  if (m_exited) return;
  m_exited = true;
  m_closing = true;
  if (m_on_exit) m_on_exit();
}

} // namespace ktune::test
