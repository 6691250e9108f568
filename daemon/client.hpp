#pragma once
// Client: one client connection as the rest of ktuned sees it -- something to send encoded
// messages to, with the credentials of the process at the other end. Session (daemon/session)
// is the only implementation; the Server starts one per accepted connection through
// start_session(), so no other file needs the Session class. io thread only.
#include "core/error_code.hpp"

#include <boost/asio/local/stream_protocol.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace ktune::daemon {

namespace asio = boost::asio;

struct SessionLimits {
  std::size_t max_message_bytes = 1 << 20;
  std::chrono::milliseconds message_timeout{10'000}; // 0 = no deadline
  std::chrono::milliseconds idle_timeout{600'000};   // 0 = never idle out
};

// The peer's credentials (SO_PEERCRED), read once when the connection is accepted.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class Client {
public:
  virtual ~Client() = default;
  // Queues one message (a trailing newline is added when missing). Ignored once closed. A reply
  // (a message with "ok") ends one request in flight; an event does not.
  virtual void send(std::string message) = 0;
  [[nodiscard]] virtual const PeerCredentials& peer() const = 0;
  // Stops reading, writes what is queued, then closes.
  virtual void close_after_flush() = 0;
};

// Each complete request line of `client`, in order.
using Dispatch = std::function<void(const std::shared_ptr<Client>& client, std::string_view line)>;
using OnClosed = std::function<void(const std::shared_ptr<Client>& client)>;

// Starts serving one accepted connection (daemon/session.hpp: limits, replies in order).
[[nodiscard]] std::shared_ptr<Client> start_session(boost::asio::local::stream_protocol::socket socket,
                                                    SessionLimits limits, PeerCredentials peer,
                                                    Dispatch dispatch, OnClosed on_closed);

} // namespace ktune::daemon
