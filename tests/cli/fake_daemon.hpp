#pragma once
// FakeDaemon: a real Unix socket server on a thread, standing in for ktuned in the client and
// command tests. Connections are served one at a time; every received line goes to the handler,
// whose lines are written back in order. Requests are recorded for the test to inspect.
#include <nlohmann/json.hpp>

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ktune::test {

struct FakeResponse {
  std::vector<std::string> lines;  // written back, each followed by '\n'
  bool close = false;              // close the connection after writing
};

class FakeDaemon {
public:
  using Handler = std::function<FakeResponse(const std::string& line)>;

  // Binds and listens at `socket_path` before returning; throws std::runtime_error when it can't.
  FakeDaemon(std::string socket_path, Handler handler);
  ~FakeDaemon();  // stops the thread and removes the socket file
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  [[nodiscard]] const std::string& socket() const { return m_socket; }
  [[nodiscard]] std::vector<std::string> received() const;

  // Helpers for handlers: the request's id, and reply/event lines echoing it.
  [[nodiscard]] static nlohmann::json id_of(const std::string& line);
  [[nodiscard]] static std::string ok(const std::string& request_line,
                                      const nlohmann::json& result);
  [[nodiscard]] static std::string error(const std::string& request_line, const std::string& code,
                                         const std::string& message);
  [[nodiscard]] static std::string event(const std::string& request_line,
                                         const nlohmann::json& data);

private:
  void serve();
  void serve_connection(int fd);

  std::string m_socket;
  Handler m_handler;
  int m_listen_fd = -1;
  int m_wake[2] = {-1, -1};
  mutable std::mutex m_mutex;
  std::vector<std::string> m_received;
  std::thread m_thread;
};

} // namespace ktune::test
