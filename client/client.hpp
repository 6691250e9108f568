#pragma once
// Connection: a blocking NDJSON client over the daemon's Unix socket (docs/protocol.md).
// Used by the CLI and the tests. Move-only; not thread-safe.
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace ktune {

class Connection {
public:
  // Errors: "not_running" when nothing listens at `socket_path` (ENOENT/ECONNREFUSED),
  // "io_error" otherwise, naming the path.
  [[nodiscard]] static Result<Connection> connect(const std::string& socket_path,
                                                  std::chrono::milliseconds timeout =
                                                      std::chrono::milliseconds(2000));

  using EventHandler = std::function<void(const nlohmann::json& event)>;
  using OrderedEventHandler = std::function<void(const nlohmann::ordered_json& event)>;

  // Sends `request` (adds "v":1 and a fresh numeric "id" when absent) and returns the whole reply
  // object ({"ok":true,"result":...} or {"ok":false,"error":...}). Event lines carrying the same id
  // that arrive before the reply go to `on_event`. timeout 0 = wait forever.
  // Errors: "io_error" (connection closed, timeout "timed out after N ms", bad JSON from the daemon).
  [[nodiscard]] Result<nlohmann::json> request(nlohmann::json request,
                                               const EventHandler& on_event = {},
                                               std::chrono::milliseconds timeout =
                                                   std::chrono::milliseconds(0));

  // The same, with the reply's objects in the order ktuned wrote them (a config's parameters in
  // the kernel spec's order), for what is shown to people.
  [[nodiscard]] Result<nlohmann::ordered_json> request_ordered(
      nlohmann::json request, const OrderedEventHandler& on_event = {},
      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // Raw access for tests of malformed input.
  [[nodiscard]] Result<void> send_raw(std::string_view bytes);
  [[nodiscard]] Result<std::string> read_line(std::chrono::milliseconds timeout);

  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  ~Connection();

private:
  template <class Json>
  [[nodiscard]] Result<Json> request_as(nlohmann::json request,
                                        const std::function<void(const Json&)>& on_event,
                                        std::chrono::milliseconds timeout);
  explicit Connection(int fd) : m_fd(fd) {}
  int m_fd = -1;
  std::string m_buffer;
  std::int64_t m_next_id = 1;
};

} // namespace ktune
