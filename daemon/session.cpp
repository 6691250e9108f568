#include "daemon/session.hpp"

#include "core/protocol.hpp"
#include "daemon/log.hpp"

#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

namespace ktune::daemon {

Session::Session(asio::local::stream_protocol::socket socket, std::size_t max_message_bytes,
                 Dispatch dispatch, OnClosed on_closed)
    : m_socket(std::move(socket)), m_in(max_message_bytes), m_max_message_bytes(max_message_bytes),
      m_dispatch(std::move(dispatch)), m_on_closed(std::move(on_closed)) {}

void Session::start() { read_next(); }

void Session::read_next() {
  if (m_closing || m_closed) return;
  asio::async_read_until(
      m_socket, m_in, '\n',
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (self->m_closed || self->m_closing) return;
        if (ec == asio::error::not_found) {
          KTUNE_LOG(warn) << "client sent a message over " << self->m_max_message_bytes
                          << " bytes; closing the connection";
          self->send(protocol::encode_error(
              nullptr, protocol::code::message_too_large,
              "message exceeds the limit of " + std::to_string(self->m_max_message_bytes) +
                  " bytes (newline included); closing the connection"));
          self->close_after_flush();
          return;
        }
        if (ec) {
          // EOF or reset: the client is gone; replies still queued cannot be delivered.
          if (ec != asio::error::eof && ec != asio::error::operation_aborted) {
            KTUNE_LOG(debug) << "client connection: " << ec.message();
          }
          self->close_now();
          return;
        }
        std::string line(asio::buffers_begin(self->m_in.data()),
                         asio::buffers_begin(self->m_in.data()) + static_cast<std::ptrdiff_t>(n - 1));
        self->m_in.consume(n);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") != std::string::npos) self->m_dispatch(self, line);
        self->read_next();
      });
}

void Session::send(std::string message) {
  if (m_closed) return;
  if (message.empty() || message.back() != '\n') message += '\n';
  m_out.push_back(std::move(message));
  if (!m_writing) write_next();
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
                      self->m_out.pop_front();
                      self->write_next();
                    });
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
  boost::system::error_code ignored;
  m_socket.shutdown(asio::socket_base::shutdown_both, ignored);
  m_socket.close(ignored);
  if (m_on_closed) m_on_closed(shared_from_this());
}

} // namespace ktune::daemon
