#pragma once
// Session: one client connection. Reads newline-delimited requests (at most `max_message_bytes`
// per line, newline included), hands each line to the server's dispatcher in order, and writes
// replies and events in the order they are sent. A line over the limit gets a message_too_large
// error and the connection is closed after it is written; nothing else closes a connection from
// this side except a daemon stop. Owned by shared_ptr (enable_shared_from_this): the pending
// asynchronous operations and the server's registry keep it alive. io thread only.
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/streambuf.hpp>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ktune::daemon {

namespace asio = boost::asio;

class Session : public std::enable_shared_from_this<Session> {
public:
  using Dispatch = std::function<void(const std::shared_ptr<Session>& session, std::string_view line)>;
  using OnClosed = std::function<void(const std::shared_ptr<Session>& session)>;

  Session(asio::local::stream_protocol::socket socket, std::size_t max_message_bytes,
          Dispatch dispatch, OnClosed on_closed);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start();
  // Queues one message (a trailing newline is added when missing). Ignored once closed.
  void send(std::string message);
  // Stops reading, writes what is queued, then closes.
  void close_after_flush();
  [[nodiscard]] bool open() const { return !m_closed; }

private:
  void read_next();
  void write_next();
  void close_now();

  asio::local::stream_protocol::socket m_socket;
  asio::streambuf m_in;
  std::size_t m_max_message_bytes;
  Dispatch m_dispatch;
  OnClosed m_on_closed;
  std::deque<std::string> m_out;
  bool m_writing = false;
  bool m_closing = false;
  bool m_closed = false;
};

} // namespace ktune::daemon
