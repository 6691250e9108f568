#include "core/protocol.hpp"

#include <catch2/catch.hpp>

namespace p = ktune::protocol;
using nlohmann::json;

TEST_CASE("core/protocol: decode_request", "[core][protocol]") {
  SECTION("a well-formed request") {
    auto r = p::decode_request(R"({"v":1,"id":7,"op":"lookup","kernel":"gemm"})");
    REQUIRE(r.ok());
    CHECK(r->id == 7);
    CHECK(r->op == "lookup");
    CHECK(r->body["kernel"] == "gemm");
  }
  SECTION("v and id are optional; string ids are kept") {
    auto r = p::decode_request(R"({"op":"stats"})");
    REQUIRE(r.ok());
    CHECK(r->id.is_null());
    auto s = p::decode_request(R"({"op":"stats","id":"abc"})");
    REQUIRE(s.ok());
    CHECK(s->id == "abc");
  }
  SECTION("errors") {
    struct Case { const char* line; ktune::ErrorCode code; const char* text; };
    for (auto c : {Case{"{\"op\":", ktune::ErrorCode::bad_json, "JSON"}, Case{"", ktune::ErrorCode::bad_json, "JSON"},
                   Case{"[1,2]", ktune::ErrorCode::bad_request, "object"}, Case{"42", ktune::ErrorCode::bad_request, "object"},
                   Case{R"({"id":1})", ktune::ErrorCode::bad_request, "'op'"},
                   Case{R"({"op":3})", ktune::ErrorCode::bad_request, "'op'"},
                   Case{R"({"op":"x","id":[1]})", ktune::ErrorCode::bad_request, "'id'"},
                   Case{R"({"op":"x","id":{"a":1}})", ktune::ErrorCode::bad_request, "'id'"},
                   Case{R"({"op":"x","v":2})", ktune::ErrorCode::unsupported_version, "2"},
                   Case{R"({"op":"x","v":"1"})", ktune::ErrorCode::unsupported_version, "\"1\""},
                   Case{R"({"op":"x","v":1.0})", ktune::ErrorCode::unsupported_version, "1"}}) {
      INFO(c.line);
      auto r = p::decode_request(c.line);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == c.code);
      CHECK_THAT(r.error().message, Catch::Contains(c.text));
    }
  }
  SECTION("decode_id recovers the id whenever the line parsed") {
    CHECK(p::decode_id(R"({"id":9,"v":2,"op":"x"})") == 9);
    CHECK(p::decode_id(R"({"id":"q"})") == "q");
    CHECK(p::decode_id(R"({"id":[1]})").is_null());
    CHECK(p::decode_id("{bad").is_null());
    CHECK(p::decode_id("[1]").is_null());
    CHECK(p::decode_id(R"({"a":{"id":3},"id":true})").is_null());   // nested ids and booleans are no id
    CHECK(p::decode_id(R"({"a":{"id":3},"id":-2.5})") == -2.5);
    CHECK(p::decode_id(R"({"id":{"x":1},"b":2})").is_null());
    CHECK(p::decode_id(R"({"id":null})").is_null());
    CHECK(p::decode_id(R"({"id":7,"x":[1,2})").is_null());          // the line must parse
  }
  SECTION("deeply nested values are refused before anything walks them") {
    // Half a million levels in a 1 MiB line: dumping "v" for the version error used to recurse
    // once per level and overflow the stack.
    const std::size_t levels = 500000;
    const std::string deep = std::string(levels, '[') + std::string(levels, ']');
    for (const std::string& line : {R"({"id":4,"op":"x","v":)" + deep + "}",
                                    R"({"id":4,"op":"tune","kernel":)" + deep + "}"}) {
      auto r = p::decode_request(line);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == ktune::ErrorCode::bad_request);
      CHECK_THAT(r.error().message, Catch::Contains("500001 levels deep (at most 64)"));
      CHECK(p::decode_id(line) == 4);
    }
    const std::string nested = std::string(63, '[') + std::string(63, ']');
    auto ok = p::decode_request(R"({"op":"x","extra":)" + nested + R"(,"s":"[[[[{{{{\"[[["})");
    CHECK(ok.ok());
    auto over = p::decode_request(R"({"op":"x","extra":[)" + nested + "]}");
    CHECK_FALSE(over.ok());
  }
}

TEST_CASE("core/protocol: encode", "[core][protocol]") {
  SECTION("ok reply") {
    const std::string line = p::encode_ok(7, {{"config", {{"BM", 64}}}});
    CHECK(line.find('\n') == std::string::npos);
    CHECK_THAT(line, Catch::StartsWith("{\"v\":1,"));
    const json j = json::parse(line);
    CHECK(j["v"] == 1);
    CHECK(j["id"] == 7);
    CHECK(j["ok"] == true);
    CHECK(j["result"]["config"]["BM"] == 64);
  }
  SECTION("error reply echoes a null id") {
    const json j = json::parse(p::encode_error(nullptr, ktune::ErrorCode::unknown_kernel, "no kernel 'x'"));
    CHECK(j["v"] == 1);
    CHECK(j["id"].is_null());
    CHECK(j["ok"] == false);
    CHECK(j["error"]["code"] == "unknown_kernel");
    CHECK(j["error"]["message"] == "no kernel 'x'");
  }
  SECTION("event") {
    const std::string line = p::encode_event("t1", "progress", {{"done", 3}});
    CHECK(line.find('\n') == std::string::npos);
    const json j = json::parse(line);
    CHECK(j["v"] == 1);
    CHECK(j["id"] == "t1");
    CHECK(j["event"] == "progress");
    CHECK(j["data"]["done"] == 3);
    CHECK_FALSE(j.contains("ok"));
  }
  SECTION("invalid UTF-8 and newlines never break the line") {
    const std::string line = p::encode_error(1, ktune::ErrorCode::internal, std::string("bad \xff byte\nsecond line"));
    CHECK(line.find('\n') == std::string::npos);
    const json j = json::parse(line);
    CHECK_THAT(j["error"]["message"].get<std::string>(), Catch::Contains("second line"));
  }
}

TEST_CASE("core/protocol: typed requests", "[core][protocol]") {
  SECTION("tune: defaults and round trip") {
    auto t = p::TuneRequest::from_json({{"op", "tune"}, {"kernel", "gemm"}, {"shape", "M=1"}});
    REQUIRE(t.ok());
    CHECK(t->dtype == "f32");
    CHECK(t->device == "cpu");
    CHECK(t->strategy == "exhaustive");
    CHECK_FALSE(t->budget.has_value());
    CHECK_FALSE(t->wait);
    CHECK_FALSE(t->cold);

    p::TuneRequest full;
    full.kernel = "gemm";
    full.shape = "M=4,N=4";
    full.dtype = "f16";
    full.device = "cuda:0";
    full.strategy = "random";
    full.budget = 20;
    full.budget_s = 90.5;
    full.wait = true;
    full.cold = true;
    const json j = full.to_json();
    CHECK(j["op"] == "tune");
    auto decoded = p::decode_request(j.dump());
    REQUIRE(decoded.ok());
    CHECK(decoded->op == "tune");
    auto back = p::TuneRequest::from_json(decoded->body);
    REQUIRE(back.ok());
    CHECK(back->kernel == "gemm");
    CHECK(back->shape == "M=4,N=4");
    CHECK(back->dtype == "f16");
    CHECK(back->device == "cuda:0");
    CHECK(back->strategy == "random");
    CHECK(back->budget == 20);
    CHECK(back->budget_s == 90.5);
    CHECK(back->wait);
    CHECK(back->cold);
    CHECK_FALSE(p::TuneRequest{}.to_json().contains("budget"));
    CHECK_FALSE(p::TuneRequest{}.to_json().contains("cold"));
    CHECK(p::TuneRequest::from_json({{"kernel", "gemm"}, {"shape", "M=1"}, {"cold", 1}}).error().code ==
          ktune::ErrorCode::bad_request);
  }
  SECTION("tune: field errors name op and field") {
    auto missing = p::TuneRequest::from_json({{"kernel", "gemm"}});
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error().code == ktune::ErrorCode::bad_request);
    CHECK_THAT(missing.error().message, Catch::StartsWith("tune: field 'shape'"));
    auto wrong = p::TuneRequest::from_json({{"kernel", "gemm"}, {"shape", 5}});
    REQUIRE_FALSE(wrong.ok());
    CHECK_THAT(wrong.error().message, Catch::StartsWith("tune: field 'shape' must be a string"));
    auto budget = p::TuneRequest::from_json({{"kernel", "g"}, {"shape", "M=1"}, {"budget", 0}});
    REQUIRE_FALSE(budget.ok());
    CHECK_THAT(budget.error().message, Catch::Contains("'budget'"));
    auto budget_float = p::TuneRequest::from_json({{"kernel", "g"}, {"shape", "M=1"}, {"budget", 2.5}});
    REQUIRE_FALSE(budget_float.ok());
    for (const json& bad : {json(0), json(-1.5), json("60s"), json(1e9)}) {
      auto budget_s = p::TuneRequest::from_json({{"kernel", "g"}, {"shape", "M=1"}, {"budget_s", bad}});
      REQUIRE_FALSE(budget_s.ok());
      CHECK_THAT(budget_s.error().message, Catch::Contains("'budget_s'"));
    }
    CHECK_FALSE(p::TuneRequest{}.to_json().contains("budget_s"));
    auto wait = p::TuneRequest::from_json({{"kernel", "g"}, {"shape", "M=1"}, {"wait", "yes"}});
    REQUIRE_FALSE(wait.ok());
    CHECK_THAT(wait.error().message, Catch::Contains("'wait'"));
    auto not_object = p::TuneRequest::from_json(json::array());
    REQUIRE_FALSE(not_object.ok());
    CHECK(not_object.error().code == ktune::ErrorCode::bad_request);
  }
  SECTION("lookup") {
    auto l = p::LookupRequest::from_json({{"kernel", "gemm"}, {"shape", "M=1"}, {"device", "cuda:0"}});
    REQUIRE(l.ok());
    CHECK(l->device == "cuda:0");
    CHECK(l->dtype == "f32");
    CHECK(l->to_json()["op"] == "lookup");
    CHECK(p::LookupRequest::from_json(l->to_json()).ok());
    auto bad = p::LookupRequest::from_json({{"kernel", 1}, {"shape", "M=1"}});
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message, Catch::StartsWith("lookup: field 'kernel'"));
  }
  SECTION("job and jobs") {
    auto job = p::JobRequest::from_json({{"job", 12}});
    REQUIRE(job.ok());
    CHECK(job->job == 12);
    CHECK(job->to_json()["op"] == "job");
    CHECK_FALSE(p::JobRequest::from_json(json::object()).ok());
    CHECK_FALSE(p::JobRequest::from_json({{"job", "12"}}).ok());
    CHECK_FALSE(p::JobRequest::from_json({{"job", 0}}).ok());

    auto jobs = p::JobsRequest::from_json(json::object());
    REQUIRE(jobs.ok());
    CHECK(jobs->limit == 50);
    CHECK(p::JobsRequest::from_json({{"limit", 10000}})->limit == 10000);
    CHECK(p::JobsRequest::from_json({{"limit", 1}})->limit == 1);
    auto too_many = p::JobsRequest::from_json({{"limit", 10001}});
    REQUIRE_FALSE(too_many.ok());
    CHECK_THAT(too_many.error().message, Catch::Contains("jobs: field 'limit'"));
    CHECK_FALSE(p::JobsRequest::from_json({{"limit", 0}}).ok());
    CHECK_FALSE(p::JobsRequest::from_json({{"limit", 18446744073709551615ull}}).ok());
    CHECK(p::JobsRequest{}.to_json()["op"] == "jobs");
  }
}
