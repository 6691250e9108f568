#pragma once
// MetricsHttp: ktuned's /metrics endpoint ([daemon].metrics; off by default), an HTTP/1.1 server
// built on Boost.Beast that runs on the daemon's io_context. It listens on a loopback TCP address
// ("127.0.0.1:9464", "[::1]:9464", "localhost:9464"; port 0 picks a free one) or on a Unix
// socket path (created 0600; a stale socket file is replaced).
//
// GET or HEAD /metrics (any query string) answers 200 with `render()`'s text as
// `text/plain; version=0.0.4`; another method on /metrics answers 405, any other path 404, a
// request Beast cannot parse or one larger than k_max_request_bytes 400 (then the connection is
// closed). A request must arrive within k_read_deadline of the connection's previous reply (or of
// its opening), else the connection is closed; at most k_max_connections are open at once: a
// new one then closes the oldest connection still waiting for its request (clients dribbling or
// silent cannot keep a scrape out), or is closed at once when every one is being answered. Connections are kept alive as HTTP/1.1 asks. `render` runs on the io
// thread and must not block. Not thread-safe: io thread only.
#include "core/result.hpp"

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace ktune::daemon {

class MetricsHttp {
public:
  static constexpr std::size_t k_max_request_bytes = 8192;
  static constexpr std::chrono::seconds k_read_deadline{10};
  static constexpr std::size_t k_max_connections = 32;

  // Parses `listen` (see above), binds and starts accepting. Errors: config_error (an address
  // that is neither a loopback host:port nor an absolute path), io_error (bind, listen).
  [[nodiscard]] static Result<std::unique_ptr<MetricsHttp>> start(
      boost::asio::io_context& io, const std::string& listen, std::function<std::string()> render);

  // Where it listens: "127.0.0.1:40123" (the bound port) or the socket path.
  [[nodiscard]] const std::string& address() const;

  // Stops accepting, closes every connection and removes the socket file (Unix socket).
  void stop();

  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  struct Impl;

private:
  explicit MetricsHttp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

} // namespace ktune::daemon
