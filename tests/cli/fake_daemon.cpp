#include "tests/cli/fake_daemon.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace ktune::test {

FakeDaemon::FakeDaemon(std::string socket_path, Handler handler)
    : m_socket(std::move(socket_path)), m_handler(std::move(handler)) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (m_socket.size() >= sizeof(addr.sun_path))
    throw std::runtime_error("socket path too long: " + m_socket);
  std::memcpy(addr.sun_path, m_socket.c_str(), m_socket.size());
  m_listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (m_listen_fd < 0 || ::pipe2(m_wake, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("socket/pipe: ") + std::strerror(errno));
  if (::bind(m_listen_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(m_listen_fd, 8) != 0)
    throw std::runtime_error("bind/listen " + m_socket + ": " + std::strerror(errno));
  m_thread = std::thread([this] { serve(); });
}

FakeDaemon::~FakeDaemon() {
  char byte = 'x';
  [[maybe_unused]] auto n = ::write(m_wake[1], &byte, 1);
  if (m_thread.joinable()) m_thread.join();
  for (int fd : {m_listen_fd, m_wake[0], m_wake[1]})
    if (fd >= 0) ::close(fd);
  ::unlink(m_socket.c_str());
}

std::vector<std::string> FakeDaemon::received() const {
  std::lock_guard lock(m_mutex);
  return m_received;
}

void FakeDaemon::serve() {
  for (;;) {
    pollfd fds[2] = {{m_listen_fd, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    int fd = ::accept4(m_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    serve_connection(fd);
    ::close(fd);
  }
}

void FakeDaemon::serve_connection(int fd) {
  std::string buffer;
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    char chunk[4096];
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return;
    buffer.append(chunk, static_cast<std::size_t>(n));
    for (auto nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      {
        std::lock_guard lock(m_mutex);
        m_received.push_back(line);
      }
      FakeResponse response = m_handler(line);
      for (const auto& out : response.lines) {
        std::string bytes = out + "\n";
        if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
          return;
      }
      if (response.close) return;
    }
  }
}

nlohmann::json FakeDaemon::id_of(const std::string& line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  return j.is_object() && j.contains("id") ? j["id"] : nlohmann::json();
}

std::string FakeDaemon::ok(const std::string& request_line, const nlohmann::json& result) {
  return nlohmann::json{{"v", 1}, {"id", id_of(request_line)}, {"ok", true}, {"result", result}}
      .dump();
}

std::string FakeDaemon::error(const std::string& request_line, const std::string& code,
                              const std::string& message) {
  return nlohmann::json{{"v", 1},
                        {"id", id_of(request_line)},
                        {"ok", false},
                        {"error", {{"code", code}, {"message", message}}}}
      .dump();
}

std::string FakeDaemon::event(const std::string& request_line, const nlohmann::json& data) {
  return nlohmann::json{{"v", 1}, {"id", id_of(request_line)}, {"event", "progress"}, {"data", data}}
      .dump();
}

} // namespace ktune::test
