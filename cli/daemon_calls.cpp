#include "cli/daemon_calls.hpp"

#include "cli/autostart.hpp"
#include "core/paths.hpp"

namespace ktune::cli {

using nlohmann::json;

namespace {

std::string dump(const json& v, int indent = -1) {
  return v.dump(indent, ' ', false, json::error_handler_t::replace);
}

} // namespace

std::string socket_path(const GlobalOptions& global) {
  return global.socket.empty() ? resolve_paths(path_env_from_process()).socket : global.socket;
}

Result<json> unwrap_reply(const json& reply) {
  const auto ok = reply.is_object() ? reply.find("ok") : reply.end();
  if (ok != reply.end() && ok->is_boolean() && ok->get<bool>()) {
    const auto result = reply.find("result");
    return result == reply.end() || result->is_null() ? json::object() : *result;
  }
  const auto error = reply.is_object() ? reply.find("error") : reply.end();
  if (ok != reply.end() && ok->is_boolean() && error != reply.end() && error->is_object()) {
    const auto code = error->find("code");
    const auto message = error->find("message");
    return make_error(code != error->end() && code->is_string() ? code->get<std::string>() : "internal",
                      message != error->end() && message->is_string() ? message->get<std::string>()
                                                                      : dump(*error));
  }
  std::string text = dump(reply);
  if (auto nl = text.find('\n'); nl != std::string::npos) text = text.substr(0, nl) + " ...";
  return make_error("bad_reply", "expected a reply with \"ok\" and \"result\" or \"error\" from "
                                 "ktuned, found " + text);
}

Result<json> call(Connection& conn, json request, std::chrono::milliseconds timeout,
                  const Connection::EventHandler& on_event) {
  auto reply = conn.request(std::move(request), on_event, timeout);
  if (!reply) return reply.error();
  return unwrap_reply(*reply);
}

Result<json> call(const std::string& socket, json request, std::chrono::milliseconds timeout,
                  const Connection::EventHandler& on_event) {
  auto conn = Connection::connect(socket, k_connect_timeout);
  if (!conn) return conn.error();
  return call(*conn, std::move(request), timeout, on_event);
}

Result<json> call_daemon(const std::string& socket, const GlobalOptions& global, json request,
                         std::chrono::milliseconds timeout) {
  AutostartOptions autostart;
  autostart.socket = global.socket.empty() ? std::string() : socket;
  auto conn = connect_or_start(autostart);
  if (!conn) return conn.error();
  return call(*conn, std::move(request), timeout);
}

int report(Output& io, const Error& error, const std::string& socket) {
  if (error.code == "not_running") {
    io.err << "ktune: ktuned is not running (socket " << socket
           << "); start it with `ktune daemon start`\n";
  } else {
    io.err << "ktune: " << error.code << ": " << error.message << '\n';
  }
  return k_exit_error;
}

void print_json(Output& io, const json& result) { io.out << dump(result, 2) << '\n'; }

} // namespace ktune::cli
