#pragma once
// How every `ktune` command talks to ktuned: one request, its reply unwrapped into the result or
// the daemon's error, and errors reported the same way everywhere.
#include "cli/commands.hpp"
#include "client/client.hpp"
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ktune::cli {

inline constexpr std::chrono::milliseconds k_connect_timeout{2000};
inline constexpr std::chrono::milliseconds k_request_timeout{60'000}; // every op except waits

// The socket of --socket, else the instance's (core/paths.hpp).
[[nodiscard]] std::string socket_path(const GlobalOptions& global);

// {"ok":true,"result":R} -> R (an empty object when R is null); {"ok":false,"error":{code,
// message}} -> that error; anything else -> "bad_reply".
// Replies keep the order ktuned wrote their objects in (a config in the kernel spec's order).
using Json = nlohmann::ordered_json;

[[nodiscard]] Result<Json> unwrap_reply(const Json& reply);

// One request on `conn` (events go to `on_event`), unwrapped.
[[nodiscard]] Result<Json> call(Connection& conn, nlohmann::json request,
                                std::chrono::milliseconds timeout,
                                const Connection::OrderedEventHandler& on_event = {});
// Connects to `socket` (no auto-start: "not_running" when nothing answers), then as above.
[[nodiscard]] Result<Json> call(const std::string& socket, nlohmann::json request,
                                std::chrono::milliseconds timeout,
                                const Connection::OrderedEventHandler& on_event = {});
// For every command that needs the daemon, the one autostart rule: connects, starting ktuned
// when none answers (cli/autostart.hpp) and saying so on io.err ("ktune: ktuned was not
// running; started it (pid N, log L)").
[[nodiscard]] Result<Connection> connect_daemon(const std::string& socket,
                                                const GlobalOptions& global, Output& io);
// connect_daemon, then as above.
[[nodiscard]] Result<Json> call_daemon(const std::string& socket,
                                                 const GlobalOptions& global,
                                                 nlohmann::json request,
                                                 std::chrono::milliseconds timeout, Output& io);

// The shape of a command that asks ktuned one thing: `request` sent through call_daemon (ktuned
// started when none answers), an error reported (exit 1); with --json the result printed as it
// came (exit 0); else `render` prints it as text and gives the exit code.
[[nodiscard]] int ask_daemon(const GlobalOptions& global, nlohmann::json request, Output& io,
                             const std::function<int(const Json&)>& render,
                             std::chrono::milliseconds timeout = k_request_timeout);

// Reports an error and returns k_exit_error. Text: "ktune: <code>: <message>" (or how to start
// ktuned for "not_running") on io.err. With io.json: {"error":{"code":...,"message":...}} on
// io.out. An unknown_kernel error from `socket` gets "did you mean ..." from ktuned's kernels.
int report(Output& io, const Error& error, const std::string& socket);
// The same for errors found before any daemon is asked.
int report_error(Output& io, ErrorCode code, const std::string& message,
                 int exit_code = k_exit_error);

// The names in `candidates` closest to `word` (edit distance at most 2, or a prefix either
// way), nearest first; empty when none is close.
[[nodiscard]] std::vector<std::string> similar_names(const std::string& word,
                                                     const std::vector<std::string>& candidates);
// " (did you mean 'a' or 'b'?)" for similar_names, "" when none.
[[nodiscard]] std::string did_you_mean(const std::string& word,
                                       const std::vector<std::string>& candidates);

// The result as indented JSON on io.out.
void print_json(Output& io, const Json& result);

} // namespace ktune::cli
