#include <catch2/catch.hpp>

#include "compiler/compiler.hpp"

using ktune::CandidateStatus;
using ktune::CompileJob;
using ktune::CompileOutcome;
using nlohmann::json;

namespace {

CompileJob sample_job() {
  CompileJob job;
  job.kernel = "gemm";
  job.language = "cpp";
  job.source_path = "/k/gemm/kernel.cpp";
  job.include_dirs = {"/k/gemm"};
  job.defines = {{"BK", 16}, {"BM", 64}};
  job.dtype = "f32";
  job.extra_flags = {"-ffast-math"};
  job.entry = "gemm";
  job.source_hash = "0123456789abcdef0123456789abcdef";
  job.cache_dir = "/cache";
  job.arch = "";
  return job;
}

} // namespace

TEST_CASE("CompileJob JSON round trip and validation", "[compiler]") {
  const CompileJob job = sample_job();

  SECTION("to_json then from_json gives the same job") {
    auto back = CompileJob::from_json(job.to_json());
    REQUIRE(back.ok());
    CHECK(back->kernel == job.kernel);
    CHECK(back->language == job.language);
    CHECK(back->source_path == job.source_path);
    CHECK(back->include_dirs == job.include_dirs);
    CHECK(back->defines == job.defines);
    CHECK(back->dtype == job.dtype);
    CHECK(back->extra_flags == job.extra_flags);
    CHECK(back->entry == job.entry);
    CHECK(back->source_hash == job.source_hash);
    CHECK(back->cache_dir == job.cache_dir);
  }

  SECTION("optional fields may be absent") {
    json j = job.to_json();
    j.erase("include_dirs");
    j.erase("defines");
    j.erase("extra_flags");
    j.erase("arch");
    j.erase("source_hash");
    j.erase("entry");
    auto back = CompileJob::from_json(j);
    REQUIRE(back.ok());
    CHECK(back->defines.empty());
    CHECK(back->include_dirs.empty());
    CHECK(back->entry.empty());
  }

  SECTION("a missing required field is named") {
    for (const char* field : {"kernel", "language", "source_path", "dtype", "cache_dir"}) {
      json j = job.to_json();
      j.erase(field);
      auto back = CompileJob::from_json(j);
      REQUIRE_FALSE(back.ok());
      CHECK(back.error().code == ktune::ErrorCode::bad_request);
      CHECK_THAT(back.error().message, Catch::Contains(std::string("'") + field + "'") &&
                                           Catch::Contains("missing"));
    }
  }

  SECTION("a field of the wrong type is named with what was found") {
    json j = job.to_json();
    j["dtype"] = 32;
    auto back = CompileJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("'dtype'") && Catch::Contains("number"));

    j = job.to_json();
    j["extra_flags"] = json::array({"-O2", 3});
    back = CompileJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("'extra_flags'"));

    j = job.to_json();
    j["defines"]["BM"] = "64";
    back = CompileJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("defines.BM") && Catch::Contains("integer"));
  }

  SECTION("not an object") {
    auto back = CompileJob::from_json(json::array());
    REQUIRE_FALSE(back.ok());
    CHECK(back.error().code == ktune::ErrorCode::bad_request);
  }
}

TEST_CASE("CompileOutcome JSON round trip and validation", "[compiler]") {
  CompileOutcome outcome;
  outcome.status = CandidateStatus::ok;
  outcome.artifact_path = "/cache/ab/abcd.so";
  outcome.cache_key = "abcd";
  outcome.cached = true;
  outcome.compile_ms = 12.5;
  outcome.log = "warning: unused";
  outcome.entry_symbol = "gemm_k0123456789abcdef";
  outcome.batch_size = 8;
  outcome.batch_error = "the configs do not batch: it has #pragma once";

  SECTION("round trip") {
    auto back = CompileOutcome::from_json(outcome.to_json());
    REQUIRE(back.ok());
    CHECK(back->status == CandidateStatus::ok);
    CHECK(back->artifact_path == outcome.artifact_path);
    CHECK(back->cache_key == outcome.cache_key);
    CHECK(back->cached);
    CHECK(back->compile_ms == 12.5);
    CHECK(back->log == outcome.log);
    CHECK(back->entry_symbol == outcome.entry_symbol);
    CHECK(back->batch_size == 8);
    CHECK(back->batch_error == outcome.batch_error);
    CHECK(outcome.to_json()["status"] == "ok");
  }

  SECTION("without the batch fields: the plain entry, compiled alone") {
    json j = outcome.to_json();
    for (const char* field : {"entry_symbol", "batch_size", "batch_error"}) j.erase(field);
    auto back = CompileOutcome::from_json(j);
    REQUIRE(back.ok());
    CHECK(back->entry_symbol.empty());
    CHECK(back->batch_size == 1);
    CHECK(back->batch_error.empty());
  }

  SECTION("a compile error needs no artifact") {
    outcome.status = CandidateStatus::compile_error;
    outcome.artifact_path.clear();
    auto back = CompileOutcome::from_json(outcome.to_json());
    REQUIRE(back.ok());
    CHECK(back->status == CandidateStatus::compile_error);
  }

  SECTION("an ok outcome without an artifact is rejected") {
    json j = outcome.to_json();
    j.erase("artifact_path");
    auto back = CompileOutcome::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("artifact_path"));
  }

  SECTION("an unknown status is rejected") {
    json j = outcome.to_json();
    j["status"] = "exploded";
    auto back = CompileOutcome::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK(back.error().code == ktune::ErrorCode::bad_request);
    CHECK_THAT(back.error().message, Catch::Contains("exploded"));
  }

  SECTION("a wrongly typed field is rejected") {
    json j = outcome.to_json();
    j["cached"] = "yes";
    auto back = CompileOutcome::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("'cached'"));
    j = outcome.to_json();
    j["batch_size"] = "8";
    back = CompileOutcome::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("'batch_size'"));
  }
}

TEST_CASE("dtype names map to C types and sizes", "[compiler]") {
  SECTION("supported dtypes") {
    CHECK(*ktune::dtype_c_type("f32") == "float");
    CHECK(*ktune::dtype_c_type("f64") == "double");
    CHECK(*ktune::dtype_c_type("i32") == "int32_t");
    CHECK(*ktune::dtype_c_type("i64") == "int64_t");
    CHECK(*ktune::dtype_size("f32") == 4);
    CHECK(*ktune::dtype_size("f64") == 8);
    CHECK(*ktune::dtype_size("i32") == 4);
    CHECK(*ktune::dtype_size("i64") == 8);
    CHECK(*ktune::dtype_size("f16") == 2);
  }

  SECTION("f16 is not a host compiler type") {
    auto c_type = ktune::dtype_c_type("f16");
    REQUIRE_FALSE(c_type.ok());
    CHECK(c_type.error().code == ktune::ErrorCode::bad_dtype);
    CHECK(c_type.error().message == "f16 is not supported by the host compiler");
  }

  SECTION("unknown dtypes name themselves") {
    auto c_type = ktune::dtype_c_type("bf16");
    REQUIRE_FALSE(c_type.ok());
    CHECK(c_type.error().code == ktune::ErrorCode::bad_dtype);
    CHECK_THAT(c_type.error().message, Catch::Contains("'bf16'"));
    auto size = ktune::dtype_size("u8");
    REQUIRE_FALSE(size.ok());
    CHECK_THAT(size.error().message, Catch::Contains("'u8'"));
  }
}
