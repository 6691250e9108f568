// Fuzzes the request decoding the daemon runs on every line it reads (core/protocol.hpp):
// decode_request, decode_id, the typed from_json of every op, and the error reply built from
// whatever came in. Properties: nothing throws or crashes; decode_request and decode_id agree
// on the id; every reply is one line of valid JSON; a decoded typed request survives
// to_json -> from_json unchanged; decoding is linear in the line's size (a sample of lines is
// also decoded as 64 copies in one request).
#include "core/protocol.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

using nlohmann::json;
namespace protocol = ktune::protocol;

void check_reply_line(const std::string& reply) {
  FUZZ_CHECK(reply.find('\n') == std::string::npos, "a reply is one line");
  const json parsed = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!parsed.is_discarded(), "a reply is valid JSON");
  FUZZ_CHECK(parsed.is_object() && parsed.value("v", 0) == protocol::k_version, "a reply carries \"v\":1");
}

template <class T>
void check_typed(const json& body) {
  auto request = T::from_json(body);
  if (!request) {
    FUZZ_CHECK(request.error().code == ktune::ErrorCode::bad_request, "typed requests fail with bad_request");
    FUZZ_CHECK(!request.error().message.empty(), "an error has a message");
    check_reply_line(protocol::encode_error(nullptr, request.error().code, request.error().message));
    return;
  }
  const json encoded = request->to_json();
  auto again = T::from_json(encoded);
  FUZZ_CHECK(again.ok(), "to_json of a decoded request decodes again");
  FUZZ_CHECK(again->to_json() == encoded, "to_json -> from_json -> to_json is stable");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  if (ktune::fuzz::sampled_for_linear_check(data, size)) {
    constexpr int copies = 64;
    std::string many = R"({"op":"x","copies":[)";
    for (int c = 0; c < copies; ++c) {
      if (c > 0) many += ',';
      many += line;
    }
    many += "]}";
    ktune::fuzz::check_linear(std::string(line), many, copies, [](const std::string& input) {
      (void)protocol::decode_id(input);
      (void)protocol::decode_request(input);
    });
  }
  const json id = protocol::decode_id(line);
  FUZZ_CHECK(id.is_null() || id.is_number() || id.is_string(), "decode_id gives a scalar");

  auto request = protocol::decode_request(line);
  if (!request) {
    const auto& code = request.error().code;
    FUZZ_CHECK(code == ktune::ErrorCode::bad_json || code == ktune::ErrorCode::bad_request ||
                   code == ktune::ErrorCode::unsupported_version,
               "decode_request fails with bad_json, bad_request or unsupported_version");
    check_reply_line(protocol::encode_error(id, code, request.error().message));
    return 0;
  }
  FUZZ_CHECK(request->id == id, "decode_request and decode_id agree on the id");
  FUZZ_CHECK(request->body.is_object(), "a decoded request is an object");
  check_reply_line(protocol::encode_ok(request->id, {{"op", request->op}}));
  check_reply_line(protocol::encode_event(request->id, request->op, request->body));

  // Every typed decoder sees every body, whatever its op: they must reject, never misbehave.
  check_typed<protocol::TuneRequest>(request->body);
  check_typed<protocol::LookupRequest>(request->body);
  check_typed<protocol::JobRequest>(request->body);
  check_typed<protocol::JobsRequest>(request->body);
  return 0;
}
