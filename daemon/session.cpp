#include "daemon/session.hpp"

#include "core/protocol.hpp"
#include "daemon/log.hpp"

#include <boost/asio/write.hpp>

#include <algorithm>
#include <optional>
#include <sstream>

namespace ktune::daemon {

namespace {

// Replies a client has not read yet, in bytes, above which the session stops reading its
// requests until the backlog is written: a client that pipelines without reading cannot make
// the daemon hold an unbounded backlog.
constexpr std::size_t k_max_backlog_bytes = 8u << 20;
// How long the error line that ends a connection may take to be written before the socket is
// closed anyway (a client that reads nothing).
constexpr auto k_flush_grace = std::chrono::seconds(2);

std::string seconds_text(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << static_cast<double>(duration.count()) / 1000.0 << " s";
  return out.str();
}

} // namespace

bool is_reply_message(std::string_view message) {
  constexpr std::string_view prefix = "{\"v\":1,\"id\":";
  if (message.substr(0, prefix.size()) != prefix) return true;
  std::size_t i = prefix.size();
  if (i < message.size() && message[i] == '"') {
    ++i;
    while (i < message.size() && message[i] != '"') i += message[i] == '\\' ? 2 : 1;
    ++i;
  } else {
    while (i < message.size() && message[i] != ',') ++i;
  }
  if (i >= message.size()) return true;
  return message.substr(i, 9) != ",\"event\":";
}

Session::Session(asio::local::stream_protocol::socket socket, SessionLimits limits,
                 PeerCredentials peer, Dispatch dispatch, OnClosed on_closed)
    : m_socket(std::move(socket)), m_limits(limits), m_peer(peer),
      m_dispatch(std::move(dispatch)), m_on_closed(std::move(on_closed)),
      m_last_activity(Clock::now()), m_timer(m_socket.get_executor()) {}

void Session::start() {
  read_next();
  schedule_timer();
}

void Session::read_next() {
  if (m_closing || m_closed) return;
  m_socket.async_read_some(
      asio::buffer(m_chunk),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (self->m_closed || self->m_closing) return;
        if (ec == asio::error::eof) {
          // The client sent all it will send (it may have shut down only its writing side):
          // answer the requests it sent, then close.
          self->m_peer_done = true;
          self->m_pending.clear();
          if (self->m_in_flight == 0) self->close_after_flush();
          return;
        }
        if (ec) {
          // Reset: the client is gone; replies still queued cannot be delivered.
          if (ec != asio::error::operation_aborted) {
            KTUNE_LOG(debug) << "client connection (uid " << self->m_peer.uid
                             << "): " << ec.message();
          }
          self->close_now();
          return;
        }
        self->on_read(n);
      });
}

void Session::on_read(std::size_t n) {
  const auto now = Clock::now();
  if (m_pending.empty()) m_line_deadline = now + m_limits.message_timeout;
  m_pending.append(m_chunk.data(), n);
  m_last_activity = now;
  take_lines();
  if (m_closing || m_closed) return;
  schedule_timer();
  if (m_out_bytes > k_max_backlog_bytes) {
    m_read_paused = true; // write_next() resumes reading once the backlog is written
    return;
  }
  read_next();
}

void Session::take_lines() {
  const auto self = shared_from_this(); // a dispatch may close the session
  std::size_t start = 0;
  for (;;) {
    const std::size_t newline = m_pending.find('\n', std::max(start, m_scanned));
    if (newline == std::string::npos) break;
    if (newline - start + 1 > m_limits.max_message_bytes) {
      refuse(ErrorCode::message_too_large,
             "message of " + std::to_string(newline - start + 1) + " bytes exceeds the limit of " +
                 std::to_string(m_limits.max_message_bytes) +
                 " bytes (newline included); closing the connection");
      return;
    }
    std::string_view line(m_pending.data() + start, newline - start);
    start = newline + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    ++m_in_flight;
    m_dispatch(self, line);
    if (m_closing || m_closed) return;
  }
  m_pending.erase(0, start);
  m_scanned = m_pending.size();
  if (m_pending.size() >= m_limits.max_message_bytes) {
    refuse(ErrorCode::message_too_large,
           "message exceeds the limit of " + std::to_string(m_limits.max_message_bytes) +
               " bytes (newline included; " + std::to_string(m_pending.size()) +
               " bytes received without one); closing the connection");
    return;
  }
  // The bytes left over start the next line now.
  if (start > 0 && !m_pending.empty()) m_line_deadline = Clock::now() + m_limits.message_timeout;
}

void Session::refuse(ErrorCode code, const std::string& message) {
  KTUNE_LOG(warn) << "client connection (uid " << m_peer.uid << ", pid " << m_peer.pid
                  << "): " << code << ": " << message;
  send(protocol::encode_error(nullptr, code, message));
  close_after_flush();
  if (m_closed) return;
  // The client may not read: close after a grace period whether the line went out or not.
  ++m_timer_generation;
  m_timer_armed = true;
  m_timer.expires_after(k_flush_grace);
  m_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->close_now();
  });
}

void Session::send(std::string message) {
  if (m_closed) return;
  if (m_in_flight > 0 && is_reply_message(message)) {
    --m_in_flight;
    if (m_in_flight == 0) {
      m_last_activity = Clock::now();
      schedule_timer();
    }
  }
  if (message.empty() || message.back() != '\n') message += '\n';
  m_out_bytes += message.size();
  m_out.push_back(std::move(message));
  if (!m_writing) write_next();
  if (m_peer_done && m_in_flight == 0) close_after_flush();
}

void Session::write_next() {
  if (m_out.empty()) {
    m_writing = false;
    if (m_closing) close_now();
    return;
  }
  m_writing = true;
  asio::async_write(m_socket, asio::buffer(m_out.front()),
                    [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                      if (self->m_closed) return;
                      if (ec) {
                        self->close_now();
                        return;
                      }
                      self->m_out_bytes -= self->m_out.front().size();
                      self->m_out.pop_front();
                      // Reading paused for a backlog resumes once it is written.
                      if (self->m_out.empty() && self->m_read_paused && !self->m_closing) {
                        self->m_read_paused = false;
                        // The time a line waited while the daemon did not read is not the
                        // client's: its deadline starts again.
                        if (!self->m_pending.empty()) {
                          self->m_line_deadline = Clock::now() + self->m_limits.message_timeout;
                        }
                        self->read_next();
                        self->schedule_timer();
                      }
                      self->write_next();
                    });
}

void Session::schedule_timer() {
  if (m_closed || m_closing) return;
  std::optional<Clock::time_point> next;
  // While reading is paused for a backlog the client is not late: no line deadline runs.
  if (!m_pending.empty() && !m_read_paused && m_limits.message_timeout.count() > 0) {
    next = m_line_deadline;
  }
  if (m_in_flight == 0 && !m_peer_done && m_limits.idle_timeout.count() > 0) {
    const auto idle_at = m_last_activity + m_limits.idle_timeout;
    if (!next || idle_at < *next) next = idle_at;
  }
  // Without a deadline a pending wait is left alone: it finds nothing to do when it fires.
  if (!next || (m_timer_armed && m_timer_at <= *next)) return;
  const std::uint64_t generation = ++m_timer_generation;
  m_timer_armed = true;
  m_timer_at = *next;
  m_timer.expires_at(*next);
  m_timer.async_wait(
      [self = shared_from_this(), generation](const boost::system::error_code& ec) {
        if (ec || generation != self->m_timer_generation || self->m_closed || self->m_closing) {
          return;
        }
        self->m_timer_armed = false;
        self->on_timer();
      });
}

void Session::on_timer() {
  const auto now = Clock::now();
  if (!m_pending.empty() && !m_read_paused && m_limits.message_timeout.count() > 0 &&
      now >= m_line_deadline) {
    refuse(ErrorCode::timeout,
           "a request line was started and not finished within " +
               seconds_text(m_limits.message_timeout) + " (" + std::to_string(m_pending.size()) +
               " bytes received without a newline); closing the connection");
    return;
  }
  if (m_in_flight == 0 && m_limits.idle_timeout.count() > 0 &&
      now >= m_last_activity + m_limits.idle_timeout) {
    refuse(ErrorCode::idle_timeout, "no request for " + seconds_text(m_limits.idle_timeout) +
                                         "; closing the idle connection");
    return;
  }
  schedule_timer();
}

void Session::close_after_flush() {
  if (m_closed || m_closing) return;
  m_closing = true; // no further reads are started; a pending one ends when the socket closes
  if (!m_writing) close_now();
}

void Session::close_now() {
  if (m_closed) return;
  m_closed = true;
  m_out.clear();
  m_out_bytes = 0;
  boost::system::error_code ignored;
  m_timer.cancel();
  m_socket.shutdown(asio::socket_base::shutdown_both, ignored);
  m_socket.close(ignored);
  if (m_on_closed) m_on_closed(shared_from_this());
}

std::shared_ptr<Client> start_session(asio::local::stream_protocol::socket socket, SessionLimits limits,
                                      PeerCredentials peer, Dispatch dispatch, OnClosed on_closed) {
  auto session = std::make_shared<Session>(std::move(socket), limits, peer, std::move(dispatch),
                                           std::move(on_closed));
  session->start();
  return session;
}

} // namespace ktune::daemon
