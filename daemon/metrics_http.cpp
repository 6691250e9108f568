#include "daemon/metrics_http.hpp"

#include "daemon/config.hpp"
#include "daemon/log.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <sys/stat.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>

namespace ktune::daemon {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

// What the listener and its connections share; connections may outlive the listener briefly.
struct Shared {
  struct Open {
    std::function<void()> close;
    std::function<bool()> waiting;   // still waiting for (the rest of) a request
  };
  std::function<std::string()> render;
  std::map<std::uint64_t, Open> open; // by connection id: the oldest first
  std::uint64_t next_id = 0;
  bool stopped = false;

  // Closes the oldest connection that is still waiting for its request (a client sending
  // slowly, or not at all), making room for a new one. False when every one is being answered.
  bool evict_oldest_waiting() {
    for (auto& [id, entry] : open) {
      if (entry.waiting && entry.waiting()) {
        const auto close = entry.close;
        close();
        open.erase(id);
        return true;
      }
    }
    return false;
  }
};

template <class Protocol>
class HttpConnection : public std::enable_shared_from_this<HttpConnection<Protocol>> {
public:
  HttpConnection(typename Protocol::socket socket, std::shared_ptr<Shared> shared,
                 std::uint64_t id)
      : m_socket(std::move(socket)), m_deadline(m_socket.get_executor()),
        m_shared(std::move(shared)), m_id(id) {}
  ~HttpConnection() { m_shared->open.erase(m_id); }
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  [[nodiscard]] bool waiting() const { return m_waiting; }

  void read_next() {
    m_waiting = true;
    m_parser.emplace();
    m_parser->header_limit(MetricsHttp::k_max_request_bytes);
    m_deadline.expires_after(MetricsHttp::k_read_deadline);
    std::weak_ptr<HttpConnection> weak = this->shared_from_this();
    m_deadline.async_wait([weak](const error_code& ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->close();
    });
    http::async_read(m_socket, m_buffer, *m_parser,
                     [self = this->shared_from_this()](const error_code& ec, std::size_t) {
                       self->on_read(ec);
                     });
  }

  void close() {
    error_code ignored;
    m_deadline.cancel();
    m_socket.shutdown(Protocol::socket::shutdown_both, ignored);
    m_socket.close(ignored);
  }

private:
  void on_read(const error_code& ec) {
    m_waiting = false;
    m_deadline.cancel();
    if (m_shared->stopped || ec == http::error::end_of_stream ||
        ec == asio::error::operation_aborted) {
      close();
      return;
    }
    if (ec) {
      // A request Beast cannot parse, or larger than the limits: 400; a broken connection: close.
      if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::partial_message) {
        respond(http::status::bad_request, "bad request: " + ec.message() + "\n", false, 11);
      } else {
        close();
      }
      return;
    }
    const auto& request = m_parser->get();
    std::string_view target(request.target().data(), request.target().size());
    if (const auto query = target.find('?'); query != std::string_view::npos) {
      target = target.substr(0, query);
    }
    const bool keep_alive = request.keep_alive();
    const unsigned version = request.version();
    if (target != "/metrics") {
      respond(http::status::not_found, "not found: ktuned serves /metrics only\n", keep_alive,
              version);
    } else if (request.method() != http::verb::get && request.method() != http::verb::head) {
      respond(http::status::method_not_allowed, "method not allowed: use GET\n", keep_alive,
              version, "GET, HEAD");
    } else {
      respond(http::status::ok, m_shared->render(), keep_alive, version, {},
              request.method() == http::verb::head);
    }
  }

  void respond(http::status status, std::string body, bool keep_alive, unsigned version,
               std::string_view allow = {}, bool head = false) {
    auto response = std::make_shared<http::response<http::string_body>>(status, version);
    response->set(http::field::server, "ktuned");
    response->set(http::field::content_type, status == http::status::ok
                                                 ? "text/plain; version=0.0.4; charset=utf-8"
                                                 : "text/plain; charset=utf-8");
    if (!allow.empty()) response->set(http::field::allow, beast::string_view(allow.data(), allow.size()));
    response->keep_alive(keep_alive);
    response->body() = std::move(body);
    response->prepare_payload();
    if (head) response->body().clear(); // Content-Length stays that of the GET
    http::async_write(m_socket, *response,
                      [self = this->shared_from_this(), response, keep_alive](const error_code& ec,
                                                                              std::size_t) {
                        if (!ec && !keep_alive && !self->m_shared->stopped) {
                          self->drain_and_close();
                          return;
                        }
                        if (ec || self->m_shared->stopped) {
                          self->close();
                          return;
                        }
                        self->read_next();
                      });
  }

  // After the last response: no more sending, and what the client still sends (the rest of an
  // oversized request) is read and dropped for up to a second, so that closing with unread
  // data does not reset the connection before the client has read the response.
  void drain_and_close() {
    error_code ignored;
    m_socket.shutdown(Protocol::socket::shutdown_send, ignored);
    m_deadline.expires_after(std::chrono::seconds(1));
    std::weak_ptr<HttpConnection> weak = this->shared_from_this();
    m_deadline.async_wait([weak](const error_code& ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->close();
    });
    drain();
  }
  void drain() {
    m_socket.async_read_some(asio::buffer(m_drain),
                             [self = this->shared_from_this()](const error_code& ec, std::size_t) {
                               if (ec) {
                                 self->close();
                                 return;
                               }
                               self->drain();
                             });
  }

  typename Protocol::socket m_socket;
  std::array<char, 4096> m_drain{};
  asio::steady_timer m_deadline;
  beast::flat_buffer m_buffer{MetricsHttp::k_max_request_bytes};
  std::optional<http::request_parser<http::empty_body>> m_parser;
  std::shared_ptr<Shared> m_shared;
  std::uint64_t m_id;
  bool m_waiting = false;
};

} // namespace

struct MetricsHttp::Impl {
  virtual ~Impl() = default;
  virtual void stop() = 0;
  std::string address;
};

namespace {

template <class Protocol>
class Listener : public MetricsHttp::Impl,
                 public std::enable_shared_from_this<Listener<Protocol>> {
public:
  Listener(asio::io_context& io, std::function<std::string()> render)
      : m_acceptor(io), m_retry(io), m_shared(std::make_shared<Shared>()) {
    m_shared->render = std::move(render);
  }

  Result<void> listen(const typename Protocol::endpoint& endpoint, const std::string& what) {
    error_code ec;
    m_acceptor.open(endpoint.protocol(), ec);
    if (!ec) m_acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) m_acceptor.bind(endpoint, ec);
    if (!ec) m_acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return make_error(ErrorCode::io_error, "[daemon].metrics: cannot listen on " + what + ": " +
                                        ec.message());
    }
    return {};
  }

  void accept_next() {
    m_acceptor.async_accept([self = this->shared_from_this()](const error_code& ec,
                                                               typename Protocol::socket socket) {
      if (self->m_shared->stopped || ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors, say: try again shortly instead of spinning.
        KTUNE_LOG(warn) << "metrics: accept failed: " << ec.message();
        self->m_retry.expires_after(std::chrono::milliseconds(100));
        self->m_retry.async_wait([self](const error_code& e) {
          if (!e) self->accept_next();
        });
        return;
      }
      // Full: the connection that has waited longest for a request makes room, so that clients
      // holding slots without asking cannot keep a scrape out.
      if (self->m_shared->open.size() >= MetricsHttp::k_max_connections &&
          !self->m_shared->evict_oldest_waiting()) {
        error_code ignored;
        socket.close(ignored);
      } else {
        const std::uint64_t id = ++self->m_shared->next_id;
        auto connection =
            std::make_shared<HttpConnection<Protocol>>(std::move(socket), self->m_shared, id);
        std::weak_ptr<HttpConnection<Protocol>> weak = connection;
        self->m_shared->open[id] = Shared::Open{
            [weak] {
              if (auto c = weak.lock()) c->close();
            },
            [weak] {
              auto c = weak.lock();
              return c && c->waiting();
            }};
        connection->read_next();
      }
      self->accept_next();
    });
  }

  void stop() override {
    if (m_shared->stopped) return;
    m_shared->stopped = true;
    error_code ignored;
    m_acceptor.close(ignored);
    m_retry.cancel();
    for (const auto& [id, entry] : std::map(m_shared->open)) entry.close();
    if (!m_path.empty()) ::unlink(m_path.c_str());
  }

  [[nodiscard]] typename Protocol::endpoint local_endpoint() const {
    error_code ignored;
    return m_acceptor.local_endpoint(ignored);
  }

  // The Unix socket file stop() removes.
  void remove_at_stop(std::string path) { m_path = std::move(path); }

private:
  typename Protocol::acceptor m_acceptor;
  asio::steady_timer m_retry;
  std::shared_ptr<Shared> m_shared;
  std::string m_path;
};

// A holder that keeps the listener alive while its handlers may still run.
struct Holder : MetricsHttp::Impl {
  std::shared_ptr<MetricsHttp::Impl> listener;
  void stop() override { listener->stop(); }
};

Result<std::shared_ptr<Listener<asio::ip::tcp>>> listen_tcp(asio::io_context& io,
                                                            const std::string& listen,
                                                            std::function<std::string()> render) {
  const auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::config_error, "[daemon].metrics: \"" + listen + "\": " + why +
                                          " (expected a loopback host:port such as "
                                          "\"127.0.0.1:9464\", or an absolute socket path)");
  };
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string host = listen.substr(0, colon);
  const std::string port_text = listen.substr(colon + 1);
  unsigned port = 0;
  const auto parsed = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || parsed.ec != std::errc() ||
      parsed.ptr != port_text.data() + port_text.size() || port > 65535) {
    return bad("the port is not a number from 0 to 65535");
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return bad("'" + host + "' is not an IP address or localhost");
  if (!address.is_loopback()) {
    return bad("'" + host + "' is not a loopback address; metrics are served on this machine only");
  }
  auto listener = std::make_shared<Listener<asio::ip::tcp>>(io, std::move(render));
  if (auto r = listener->listen({address, static_cast<unsigned short>(port)}, listen); !r) {
    return r.error();
  }
  const auto bound = listener->local_endpoint();
  listener->address = (bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                : bound.address().to_string()) +
                      ":" + std::to_string(bound.port());
  return listener;
}

Result<std::shared_ptr<Listener<asio::local::stream_protocol>>> listen_unix(
    asio::io_context& io, const std::string& path, std::function<std::string()> render) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return make_error(ErrorCode::io_error, "[daemon].metrics: " + path +
                                        " exists and is not a socket; not replacing it");
    }
    ::unlink(path.c_str()); // a socket left by an earlier ktuned
  }
  auto listener =
      std::make_shared<Listener<asio::local::stream_protocol>>(io, std::move(render));
  if (auto r = listener->listen(asio::local::stream_protocol::endpoint(path), path); !r) {
    return r.error();
  }
  ::chmod(path.c_str(), 0600);
  listener->remove_at_stop(path);
  listener->address = path;
  return listener;
}

} // namespace

Result<std::unique_ptr<MetricsHttp>> MetricsHttp::start(asio::io_context& io,
                                                        const std::string& listen,
                                                        std::function<std::string()> render) {
  auto holder = std::make_unique<Holder>();
  if (!listen.empty() && listen.front() == '/') {
    auto listener = listen_unix(io, listen, std::move(render));
    if (!listener) return listener.error();
    (*listener)->accept_next();
    holder->address = (*listener)->address;
    holder->listener = std::move(*listener);
  } else {
    auto listener = listen_tcp(io, listen, std::move(render));
    if (!listener) return listener.error();
    (*listener)->accept_next();
    holder->address = (*listener)->address;
    holder->listener = std::move(*listener);
  }
  return std::unique_ptr<MetricsHttp>(new MetricsHttp(std::move(holder)));
}

MetricsHttp::MetricsHttp(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

MetricsHttp::~MetricsHttp() {
  if (m_impl) m_impl->stop();
}

const std::string& MetricsHttp::address() const { return m_impl->address; }

void MetricsHttp::stop() { m_impl->stop(); }

} // namespace ktune::daemon
