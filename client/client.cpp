#include "client/client.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace ktune {

namespace {

using Clock = std::chrono::steady_clock;

// Replies larger than this are treated as a broken daemon rather than buffered without bound.
constexpr std::size_t k_max_reply_bytes = std::size_t{64} << 20;
constexpr std::size_t k_read_chunk_bytes = 64 * 1024;

// A deadline derived from a timeout; a zero timeout never expires.
class Deadline {
public:
  explicit Deadline(std::chrono::milliseconds timeout) : m_timeout(timeout) {
    if (timeout.count() > 0) m_at = Clock::now() + timeout;
  }

  // Milliseconds left for poll(): -1 = forever, 0 = expired.
  [[nodiscard]] int poll_ms() const {
    if (!m_at) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*m_at - Clock::now()).count();
    if (left <= 0) return 0;
    return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
  }
  [[nodiscard]] bool expired() const { return m_at && Clock::now() >= *m_at; }
  [[nodiscard]] std::chrono::milliseconds timeout() const { return m_timeout; }

private:
  std::chrono::milliseconds m_timeout;
  std::optional<Clock::time_point> m_at;
};

[[nodiscard]] std::string errno_text(int err) { return std::strerror(err); }

[[nodiscard]] Error io_error(std::string message) { return make_error(ErrorCode::io_error, std::move(message)); }

[[nodiscard]] Error timed_out(const Deadline& deadline, const std::string& what) {
  return io_error(std::string("timed out after ") + std::to_string(deadline.timeout().count()) +
                  " ms " + what);
}

// Waits until `fd` is ready for `events`. Returns false on timeout.
[[nodiscard]] Result<bool> wait_for(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, deadline.poll_ms());
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return io_error("poll on the daemon connection failed: " + errno_text(errno));
  }
}

[[nodiscard]] Result<void> send_all(int fd, std::string_view bytes, const Deadline& deadline) {
  if (fd < 0) return io_error("send on a closed connection");
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto ready = wait_for(fd, POLLOUT, deadline);
      if (!ready) return ready.error();
      if (!*ready) return timed_out(deadline, "sending to the daemon");
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET)
      return io_error("connection closed by the daemon while sending (" + errno_text(errno) + ")");
    return io_error("send to the daemon failed: " + errno_text(errno));
  }
  return {};
}

// Returns the next complete line (without its newline) from `buffer`, reading more from `fd`
// until one arrives, the peer closes, or `deadline` passes (`waiting_for` names the wait).
[[nodiscard]] Result<std::string> read_line_until(int fd, std::string& buffer,
                                                  const Deadline& deadline,
                                                  const std::string& waiting_for) {
  if (fd < 0) return io_error("read on a closed connection");
  std::size_t scanned = 0;
  for (;;) {
    if (auto nl = buffer.find('\n', scanned); nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    scanned = buffer.size();
    if (buffer.size() > k_max_reply_bytes)
      return io_error("the daemon sent a line longer than " +
                      std::to_string(k_max_reply_bytes >> 20) + " MiB");

    char chunk[k_read_chunk_bytes];
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0)
      return io_error(buffer.empty()
                          ? "connection closed by the daemon"
                          : "connection closed by the daemon in the middle of a line (" +
                                std::to_string(buffer.size()) + " bytes without a newline)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto ready = wait_for(fd, POLLIN, deadline);
      if (!ready) return ready.error();
      if (!*ready) return timed_out(deadline, waiting_for);
      continue;
    }
    if (errno == ECONNRESET) return io_error("connection reset by the daemon");
    return io_error("receive from the daemon failed: " + errno_text(errno));
  }
}

[[nodiscard]] std::string describe(const nlohmann::json& j) {
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

} // namespace

Result<Connection> Connection::connect(const std::string& socket_path,
                                       std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty()) return io_error("socket path is empty");
  if (socket_path.size() >= sizeof(addr.sun_path))
    return io_error("socket path is " + std::to_string(socket_path.size()) +
                    " bytes, the limit is " + std::to_string(sizeof(addr.sun_path) - 1) + ": " +
                    socket_path);
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return io_error("cannot create a Unix socket: " + errno_text(errno));
  Connection conn(fd);

  Deadline deadline(timeout);
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return conn;
    int err = errno;
    if (err == EISCONN) return conn;  // an interrupted attempt completed meanwhile
    if (err == EINTR) continue;
    if (err == ENOENT || err == ECONNREFUSED)
      return make_error(ErrorCode::not_running, "nothing listens at " + socket_path + " (" +
                                           errno_text(err) + ")");
    if (err == EAGAIN) {
      // The listen backlog is full: the daemon is alive but busy. Retry until the deadline.
      if (deadline.expired()) return timed_out(deadline, "connecting to " + socket_path);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    if (err == EINPROGRESS || err == EALREADY) {
      auto ready = wait_for(fd, POLLOUT, deadline);
      if (!ready) return ready.error();
      if (!*ready) return timed_out(deadline, "connecting to " + socket_path);
      int so_error = 0;
      socklen_t len = sizeof(so_error);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
      if (so_error == 0) return conn;
      if (so_error == ENOENT || so_error == ECONNREFUSED)
        return make_error(ErrorCode::not_running, "nothing listens at " + socket_path + " (" +
                                             errno_text(so_error) + ")");
      return io_error("cannot connect to " + socket_path + ": " + errno_text(so_error));
    }
    return io_error("cannot connect to " + socket_path + ": " + errno_text(err));
  }
}

Result<nlohmann::json> Connection::request(nlohmann::json request, const EventHandler& on_event,
                                           std::chrono::milliseconds timeout) {
  return request_as<nlohmann::json>(std::move(request), on_event, timeout);
}

namespace {

// ktuned's replies carry configs as JSON objects (whose members a reader may sort) next to
// "params": the kernel's parameter names in spec order. Puts the members of every "config" and
// "best_config" object under such an object in that order (names not listed keep theirs, last).
void apply_param_order(nlohmann::ordered_json& value, const nlohmann::ordered_json* order) {
  if (value.is_array()) {
    for (auto& item : value) apply_param_order(item, order);
    return;
  }
  if (!value.is_object()) return;
  if (const auto it = value.find("params"); it != value.end() && it->is_array() &&
                                             std::all_of(it->begin(), it->end(),
                                                         [](const auto& n) { return n.is_string(); })) {
    order = &*it;
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (order != nullptr && it->is_object() && (it.key() == "config" || it.key() == "best_config")) {
      nlohmann::ordered_json sorted = nlohmann::ordered_json::object();
      for (const auto& name : *order) {
        const auto& key = name.template get_ref<const std::string&>();
        if (const auto found = it->find(key); found != it->end()) sorted[key] = *found;
      }
      for (auto member = it->begin(); member != it->end(); ++member) {
        if (!sorted.contains(member.key())) sorted[member.key()] = member.value();
      }
      *it = std::move(sorted);
    } else if (it.key() != "params") {
      apply_param_order(*it, order);
    }
  }
}

} // namespace

Result<nlohmann::ordered_json> Connection::request_ordered(nlohmann::json request,
                                                           const OrderedEventHandler& on_event,
                                                           std::chrono::milliseconds timeout) {
  OrderedEventHandler ordered_events;
  if (on_event) {
    ordered_events = [&on_event](const nlohmann::ordered_json& event) {
      nlohmann::ordered_json copy = event;
      apply_param_order(copy, nullptr);
      on_event(copy);
    };
  }
  auto reply = request_as<nlohmann::ordered_json>(std::move(request), ordered_events, timeout);
  if (reply) apply_param_order(*reply, nullptr);
  return reply;
}

template <class Json>
Result<Json> Connection::request_as(nlohmann::json request,
                                    const std::function<void(const Json&)>& on_event,
                                    std::chrono::milliseconds timeout) {
  if (!request.is_object())
    return make_error(ErrorCode::bad_request, "a request must be a JSON object, found " + describe(request));
  if (!request.contains("v")) request["v"] = 1;
  if (!request.contains("id")) request["id"] = m_next_id++;
  const nlohmann::json id = request["id"];

  Deadline deadline(timeout);
  std::string line = request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  if (auto sent = send_all(m_fd, line, deadline); !sent) return sent.error();

  const nlohmann::json& op = request["op"];
  const std::string waiting_for =
      "waiting for the reply to '" + (op.is_string() ? op.get<std::string>() : describe(op)) + "'";
  for (;;) {
    auto text = read_line_until(m_fd, m_buffer, deadline, waiting_for);
    if (!text) return text.error();
    auto reply = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (reply.is_discarded() || !reply.is_object()) {
      std::string shown = text->size() > 200 ? text->substr(0, 200) + "..." : *text;
      return io_error("the daemon sent a line that is not a JSON object: " + shown);
    }
    auto found_id = reply.find("id");
    bool same_id = found_id != reply.end() && nlohmann::json(*found_id) == id;
    if (reply.contains("event")) {
      if (same_id && on_event) on_event(reply);
      continue;
    }
    // A reply without a usable id is the daemon's answer to a line it could not attribute; on a
    // connection with one request in flight that can only be ours.
    bool unattributed = found_id == reply.end() || found_id->is_null();
    if (same_id || unattributed) return reply;
  }
}

Result<void> Connection::send_raw(std::string_view bytes) {
  return send_all(m_fd, bytes, Deadline(std::chrono::milliseconds(0)));
}

Result<std::string> Connection::read_line(std::chrono::milliseconds timeout) {
  return read_line_until(m_fd, m_buffer, Deadline(timeout), "waiting for a line from the daemon");
}

Connection::Connection(Connection&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)),
      m_buffer(std::move(other.m_buffer)),
      m_next_id(other.m_next_id) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = std::exchange(other.m_fd, -1);
    m_buffer = std::move(other.m_buffer);
    m_next_id = other.m_next_id;
  }
  return *this;
}

Connection::~Connection() {
  if (m_fd >= 0) ::close(m_fd);
}

} // namespace ktune
