#pragma once
// The client protocol (docs/protocol.md): newline-delimited JSON over a Unix socket.
//
// Request:  {"v":1,"id":<any JSON scalar>,"op":"<op>", ...op fields}
// Reply:    {"v":1,"id":<same>,"ok":true,"result":{...}}
//           {"v":1,"id":<same>,"ok":false,"error":{"code":"...","message":"..."}}
// Event (watch/tune with "wait": true): {"v":1,"id":<same>,"event":"progress","data":{...}}
//
// One typed struct per request; from_json validates types and required fields and returns
// code "bad_request" naming the field.
#include "core/result.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune::protocol {

inline constexpr int k_version = 1;
inline constexpr std::size_t k_default_max_message_bytes = 1 << 20;

struct Request {
  nlohmann::json id;       // echoed; null when absent
  std::string op;
  nlohmann::json body;     // the whole request object
};

// Decodes one line. Errors: bad_json, bad_request (not an object, op missing or not a string,
// id not a scalar), unsupported_version ("v" present and != 1). The id is recovered whenever the
// line parsed, so the error reply can echo it: see decode_id().
[[nodiscard]] Result<Request> decode_request(std::string_view line);
[[nodiscard]] nlohmann::json decode_id(std::string_view line);

// Each encode_* returns one JSON document on one line, "v" first, WITHOUT the trailing '\n'
// (the transport appends it). Invalid UTF-8 in strings is replaced by U+FFFD, never thrown.
[[nodiscard]] std::string encode_ok(const nlohmann::json& id, const nlohmann::json& result);
[[nodiscard]] std::string encode_error(const nlohmann::json& id, ErrorCode code,
                                       std::string_view message);
[[nodiscard]] std::string encode_error(const nlohmann::json& id, const Error& error);
[[nodiscard]] std::string encode_event(const nlohmann::json& id, std::string_view event,
                                       const nlohmann::json& data);

// --- typed requests --------------------------------------------------------------------------
// from_json takes the whole request object (Request::body); fields it does not know (v, id, op,
// others) are ignored, and a null optional field counts as absent. to_json gives "v" and "op"
// plus every field (budget only when set), ready for an "id" to be added.

// The most configs one tune request may name (`configs`).
inline constexpr std::size_t k_max_tune_configs = 10'000;

struct TuneRequest {
  std::string kernel;
  std::string shape;               // "M=256,N=256,K=256"
  std::string dtype = "f32";
  std::string device = "cpu";
  std::string strategy = "exhaustive";
  std::optional<std::int64_t> budget; // evaluations, >= 1 when given
  std::optional<double> budget_fraction; // or a share of the valid configs, in (0, 1]
  std::optional<double> budget_s;     // and/or seconds in (0, a year]: no new candidate after them
  std::optional<std::int64_t> seed;   // the strategy's seed (default 0), >= 0
  bool remeasure = false;          // measure configs again that already have a result for the key
  bool cold = false;               // search without the store's earlier results of the kernel
  std::int64_t priority = 0;       // -100..100: a queued job of higher priority starts first
  bool wait = false;               // stream progress events until the job ends, then reply
  // The job's candidates, exactly these (docs/protocol.md § tune): 1..k_max_tune_configs objects
  // of integer params; checked against the kernel by the daemon's planner. Empty: the space.
  std::vector<nlohmann::json> configs;
  [[nodiscard]] static Result<TuneRequest> from_json(const nlohmann::json& body);
  [[nodiscard]] nlohmann::json to_json() const; // includes "op":"tune"
};

struct LookupRequest {
  std::string kernel;
  std::string shape;
  std::string dtype = "f32";
  std::string device = "cpu";
  [[nodiscard]] static Result<LookupRequest> from_json(const nlohmann::json& body);
  [[nodiscard]] nlohmann::json to_json() const;
};

struct JobRequest {                // op "job": one job with its candidates
  std::int64_t job = 0;            // required, >= 1
  [[nodiscard]] static Result<JobRequest> from_json(const nlohmann::json& body);
  [[nodiscard]] nlohmann::json to_json() const;
};

struct JobsRequest {               // op "jobs": recent jobs
  std::int64_t limit = 50;         // 1..10000
  [[nodiscard]] static Result<JobsRequest> from_json(const nlohmann::json& body);
  [[nodiscard]] nlohmann::json to_json() const;
};

} // namespace ktune::protocol
