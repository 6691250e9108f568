#pragma once
// Session: one client connection, the one implementation of Client (daemon/client.hpp), which
// is all the rest of ktuned sees of it. Reads newline-delimited requests (at most `max_message_bytes`
// per line, newline included), hands each line to the server's dispatcher in order, and writes
// replies and events in the order they are sent. Owned by shared_ptr (enable_shared_from_this):
// the pending asynchronous operations and the server's registry keep it alive. io thread only.
//
// Limits (docs/protocol.md § Limits); each ends with one error line, then the connection is
// closed after its queued replies are written:
// - a line over `max_message_bytes`: message_too_large;
// - a line started (at least one byte received) and not finished within `message_timeout`:
//   timeout (a client dribbling bytes cannot hold the connection);
// - no bytes received and no request in flight for `idle_timeout`: idle_timeout. A request is
//   in flight from its dispatch until its reply is sent (events do not end it), so a client
//   waiting on a job (tune with "wait") is never idle.
// A zero duration turns that limit off. A client that shuts down its writing side gets the
// replies to every request it sent, then the connection is closed. Nothing else closes a
// connection from this side except a daemon stop.
#include "core/error_code.hpp"
#include "daemon/client.hpp"

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace ktune::daemon {

namespace asio = boost::asio;

class Session final : public Client, public std::enable_shared_from_this<Session> {
public:
  Session(asio::local::stream_protocol::socket socket, SessionLimits limits, PeerCredentials peer,
          Dispatch dispatch, OnClosed on_closed);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start();
  // Queues one message (a trailing newline is added when missing). Ignored once closed. A reply
  // (a message with "ok") ends one request in flight; an event does not.
  void send(std::string message) override;
  // Stops reading, writes what is queued, then closes.
  void close_after_flush() override;
  [[nodiscard]] bool open() const { return !m_closed; }
  [[nodiscard]] const PeerCredentials& peer() const override { return m_peer; }
  // Requests dispatched and not yet answered.
  [[nodiscard]] std::size_t in_flight() const { return m_in_flight; }

private:
  using Clock = std::chrono::steady_clock;

  void read_next();
  void on_read(std::size_t n);
  void take_lines();
  void refuse(ErrorCode code, const std::string& message);
  void write_next();
  void close_now();
  void schedule_timer();
  void on_timer();

  asio::local::stream_protocol::socket m_socket;
  SessionLimits m_limits;
  PeerCredentials m_peer;
  Dispatch m_dispatch;
  OnClosed m_on_closed;
  std::array<char, 16384> m_chunk{};
  std::string m_pending;                 // bytes received after the last complete line
  std::size_t m_scanned = 0;             // m_pending[0, m_scanned) holds no newline
  std::deque<std::string> m_out;
  std::size_t m_out_bytes = 0;           // queued in m_out, not yet written
  std::size_t m_in_flight = 0;
  Clock::time_point m_last_activity;     // last byte received or last reply sent
  Clock::time_point m_line_deadline;     // meaningful while m_pending is not empty
  asio::steady_timer m_timer;
  Clock::time_point m_timer_at;
  std::uint64_t m_timer_generation = 0;  // a wait whose generation is stale does nothing
  bool m_timer_armed = false;
  bool m_writing = false;
  bool m_read_paused = false;           // a reply backlog stopped reading
  bool m_peer_done = false;             // end of input: close once every request is answered
  bool m_closing = false;
  bool m_closed = false;
};

// True when `message` (as encoded by protocol::encode_ok/encode_error/encode_event) is a reply,
// false for an event.
[[nodiscard]] bool is_reply_message(std::string_view message);

} // namespace ktune::daemon
