#include "cli/daemon_calls.hpp"

#include "cli/autostart.hpp"
#include "core/paths.hpp"

#include <algorithm>
#include <cstdint>

namespace ktune::cli {

using json = nlohmann::ordered_json;

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
    return error_from_wire(code != error->end() && code->is_string() ? code->get<std::string>()
                                                                     : "internal",
                           message != error->end() && message->is_string()
                               ? message->get<std::string>()
                               : dump(*error));
  }
  std::string text = dump(reply);
  if (auto nl = text.find('\n'); nl != std::string::npos) text = text.substr(0, nl) + " ...";
  return make_error(ErrorCode::bad_reply, "expected a reply with \"ok\" and \"result\" or \"error\" from "
                                 "ktuned, found " + text);
}

Result<json> call(Connection& conn, nlohmann::json request, std::chrono::milliseconds timeout,
                  const Connection::OrderedEventHandler& on_event) {
  auto reply = conn.request_ordered(std::move(request), on_event, timeout);
  if (!reply) return reply.error();
  return unwrap_reply(*reply);
}

Result<json> call(const std::string& socket, nlohmann::json request, std::chrono::milliseconds timeout,
                  const Connection::OrderedEventHandler& on_event) {
  auto conn = Connection::connect(socket, k_connect_timeout);
  if (!conn) return conn.error();
  return call(*conn, std::move(request), timeout, on_event);
}

Result<Connection> connect_daemon(const std::string& socket, const GlobalOptions& global,
                                  Output& io) {
  AutostartOptions autostart;
  autostart.socket = global.socket.empty() ? std::string() : socket;
  autostart.on_started = [&io](std::int64_t pid, const std::string& log_path) {
    io.err << "ktune: ktuned was not running; started it (pid " << pid << ", log " << log_path
           << ")\n";
  };
  return connect_or_start(autostart);
}

Result<json> call_daemon(const std::string& socket, const GlobalOptions& global, nlohmann::json request,
                         std::chrono::milliseconds timeout, Output& io) {
  auto conn = connect_daemon(socket, global, io);
  if (!conn) return conn.error();
  return call(*conn, std::move(request), timeout);
}

int ask_daemon(const GlobalOptions& global, nlohmann::json request, Output& io,
               const std::function<int(const json&)>& render, std::chrono::milliseconds timeout) {
  const std::string socket = socket_path(global);
  auto result = call_daemon(socket, global, std::move(request), timeout, io);
  if (!result) return report(io, result.error(), socket);
  if (global.json) {
    print_json(io, *result);
    return k_exit_ok;
  }
  return render(*result);
}

int report_error(Output& io, ErrorCode code, const std::string& message, int exit_code) {
  if (io.json) {
    if (!io.error_reported) {
      io.out << dump(json{{"error", {{"code", std::string(to_string(code))}, {"message", message}}}}, 2) << '\n';
    }
  } else {
    io.err << "ktune: " << code << ": " << message << '\n';
  }
  io.error_reported = true;
  return exit_code;
}

int report(Output& io, const Error& error, const std::string& socket) {
  if (error.code == ErrorCode::not_running) {
    const std::string message =
        "ktuned is not running (socket " + socket + "); start it with `ktune daemon start`";
    if (io.json) return report_error(io, error.code, message);
    io.err << "ktune: " << message << '\n';
    io.error_reported = true;
    return k_exit_error;
  }
  std::string message = error.message;
  if (error.code == ErrorCode::unknown_kernel) {
    // "unknown kernel 'gem'": the name between the first pair of quotes.
    const auto open = message.find('\'');
    const auto close = open == std::string::npos ? open : message.find('\'', open + 1);
    if (close != std::string::npos) {
      const std::string name = message.substr(open + 1, close - open - 1);
      if (auto kernels = call(socket, json{{"op", "kernels"}}, std::chrono::milliseconds(2000))) {
        std::vector<std::string> names;
        for (const auto& k : kernels->value("kernels", json::array()))
          if (k.is_object() && k.contains("name") && k["name"].is_string() &&
              std::find(names.begin(), names.end(), k["name"].get<std::string>()) == names.end()) {
            names.push_back(k["name"]);
          }
        message += did_you_mean(name, names);
      }
    }
  } else if (error.code == ErrorCode::message_too_large ||
             (error.code == ErrorCode::io_error && message.find("Broken pipe") != std::string::npos)) {
    message += " (a request line may be at most [daemon].max_message_bytes long, 1 MiB by "
               "default, in ktuned's configuration)";
  }
  return report_error(io, error.code, message);
}

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

} // namespace

std::vector<std::string> similar_names(const std::string& word,
                                       const std::vector<std::string>& candidates) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& c : candidates) {
    if (c == word || word.empty()) continue;
    std::size_t d = edit_distance(word, c);
    const bool prefix = c.rfind(word, 0) == 0 || word.rfind(c, 0) == 0;
    if (d <= 2 || prefix) scored.emplace_back(prefix ? std::min<std::size_t>(d, 1) : d, c);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  for (const auto& [d, c] : scored)
    if (names.size() < 3) names.push_back(c);
  return names;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const auto names = similar_names(word, candidates);
  if (names.empty()) return {};
  std::string text = " (did you mean ";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
    text += "'" + names[i] + "'";
  }
  return text + "?)";
}

void print_json(Output& io, const json& result) { io.out << dump(result, 2) << '\n'; }

} // namespace ktune::cli
