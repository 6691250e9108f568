#include "jobs/bench_job.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace ktune;

namespace {

const std::string k_spec_toml = R"(
[kernel]
name = "vadd"
language = "cpp"
source = "kernel.cpp"
entry = "vadd_entry"
shape = ["N"]
dtypes = ["f32", "f64"]
inplace = true

[params]
UNROLL = [1, 2, 4]

[[args]]
name = "X"
kind = "in"
count = "N"

[[args]]
name = "Y"
kind = "inout"
count = "N + UNROLL"
init = "index"
dtype = "f32"

[[args]]
name = "Z"
kind = "out"
count = "N"
init = "zero"

[[args]]
name = "n"
kind = "scalar"
value = "N"

[[args]]
name = "half_n"
kind = "scalar"
value = "N / 2 + UNROLL"
dtype = "i32"

[[args]]
name = "scale"
kind = "scalar"
value = "N * 0.5"
dtype = "f64"

[metrics]
flops = "N"
bytes = "3 * 4 * N"

[check]
rtol = 1e-4
atol = 1e-6

[default]
UNROLL = 2
)";

KernelSpec parse_spec(const std::string& text) {
  auto spec = parse_kernel_spec(text, "test/kernel.toml");
  INFO((spec ? std::string() : spec.error().message));
  REQUIRE(spec.ok());
  return spec.value();
}

Shape parse_shape(const std::string& text) {
  auto shape = Shape::parse(text);
  REQUIRE(shape.ok());
  return shape.value();
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  return text;
}

BenchJob sample_job() {
  BenchJob job;
  job.kernel = "vadd";
  job.entry = "vadd_entry";
  job.artifact_path = "/cache/ab/abcdef.so";
  job.reference_path = "/cache/cd/cdef01.so";
  job.shape = "N=1000";
  job.args = {
      BenchArg{"X", "in", "f32", 1000, "uniform", 0},
      BenchArg{"Z", "out", "f64", 1000, "zero", 0},
      BenchArg{"n", "scalar", "i64", 0, "uniform", 1000},
  };
  job.flops = 1e3;
  job.bytes = 12e3;
  job.rtol = 1e-4;
  job.atol = 1e-7;
  job.inplace = true;
  job.settings.min_samples = 3;
  job.settings.max_time_s = 0.25;
  job.settings.flush_cache = false;
  job.settings.seed = 0x8000000000000005ULL;
  return job;
}

} // namespace

TEST_CASE("make_bench_job evaluates counts, scalars and metrics", "[bench][bench_job]") {
  const KernelSpec spec = parse_spec(k_spec_toml);
  const Shape shape = parse_shape("N=1000");
  const Config config{{"UNROLL", 4}};
  MeasureSettings settings;
  settings.min_samples = 3;
  settings.seed = 7;

  SECTION("every field") {
    auto job = make_bench_job(spec, shape, config, "f64", "/a/cand.so", "/a/ref.so", settings);
    INFO((job ? std::string() : job.error().message));
    REQUIRE(job.ok());
    CHECK(job->kernel == "vadd");
    CHECK(job->entry == "vadd_entry");
    CHECK(job->artifact_path == "/a/cand.so");
    CHECK(job->reference_path == "/a/ref.so");
    CHECK(job->shape == "N=1000");
    REQUIRE(job->args.size() == 6);

    CHECK(job->args[0].name == "X");
    CHECK(job->args[0].kind == "in");
    CHECK(job->args[0].dtype == "f64");  // the job's dtype
    CHECK(job->args[0].count == 1000);
    CHECK(job->args[0].init == "uniform");

    CHECK(job->args[1].kind == "inout");
    CHECK(job->args[1].dtype == "f32");  // declared
    CHECK(job->args[1].count == 1004);
    CHECK(job->args[1].init == "index");

    CHECK(job->args[2].kind == "out");
    CHECK(job->args[2].init == "zero");

    CHECK(job->args[3].kind == "scalar");
    CHECK(job->args[3].dtype == "i64");  // scalars default to i64
    CHECK(job->args[3].value == 1000);
    CHECK(job->args[4].dtype == "i32");
    CHECK(job->args[4].value == 504);    // integer division
    CHECK(job->args[5].dtype == "f64");
    CHECK(job->args[5].value == 500.0);

    CHECK(job->flops == 1000);
    CHECK(job->bytes == 12000);
    CHECK(job->rtol == 1e-4);
    CHECK(job->atol == 1e-6);
    CHECK(job->inplace);
    CHECK(job->settings.min_samples == 3);
    CHECK(job->settings.seed == 7);
  }

  SECTION("absent metrics give zero") {
    std::string text = replace_once(k_spec_toml, "flops = \"N\"\n", "");
    text = replace_once(text, "bytes = \"3 * 4 * N\"\n", "");
    const KernelSpec bare = parse_spec(text);
    auto job = make_bench_job(bare, shape, config, "f32", "/a/cand.so", "", settings);
    REQUIRE(job.ok());
    CHECK(job->flops == 0);
    CHECK(job->bytes == 0);
    CHECK(job->reference_path.empty());
    CHECK(job->args[0].dtype == "f32");
  }

  SECTION("shape dims given in another order still bind by name") {
    const KernelSpec two = parse_spec(replace_once(
        replace_once(k_spec_toml, "shape = [\"N\"]", "shape = [\"N\", \"M\"]"),
        "count = \"N + UNROLL\"", "count = \"N * M + UNROLL\""));
    auto job = make_bench_job(two, parse_shape("M=3,N=10"), config, "f32", "/a/c.so", "", settings);
    REQUIRE(job.ok());
    CHECK(job->args[1].count == 34);
  }
}

TEST_CASE("use_compiled_entries calls each artifact by the symbol its compile exported",
          "[bench][bench_job]") {
  BenchJob job = sample_job();  // a default-config reference: reference_entry empty

  SECTION("both renamed") {
    use_compiled_entries(job, "vadd_entry_k1", "vadd_entry_k2");
    CHECK(job.entry == "vadd_entry_k1");
    CHECK(job.reference_entry == "vadd_entry_k2");
  }
  SECTION("only the candidate renamed: the reference keeps the plain entry") {
    use_compiled_entries(job, "vadd_entry_k1", "");
    CHECK(job.entry == "vadd_entry_k1");
    CHECK(job.reference_entry == "vadd_entry");
  }
  SECTION("a reference function keeps its own symbol when its compile renamed nothing") {
    job.reference_entry = "ktune_shim_vadd_reference";
    use_compiled_entries(job, "vadd_entry_k1", "");
    CHECK(job.reference_entry == "ktune_shim_vadd_reference");
  }
  SECTION("nothing renamed, no reference: unchanged") {
    job.reference_path.clear();
    use_compiled_entries(job, "", "");
    CHECK(job.entry == "vadd_entry");
    CHECK(job.reference_entry.empty());
  }
}

TEST_CASE("make_bench_job rejects bad counts, values and dtypes", "[bench][bench_job]") {
  const Config config{{"UNROLL", 2}};
  const MeasureSettings settings;

  SECTION("a negative count is bad_shape naming the arg, expression and value") {
    const KernelSpec spec =
        parse_spec(replace_once(k_spec_toml, "count = \"N\"", "count = \"N - 2000\""));
    auto job = make_bench_job(spec, parse_shape("N=1000"), config, "f32", "/a/c.so", "", settings);
    REQUIRE_FALSE(job.ok());
    CHECK(job.error().code == ktune::ErrorCode::bad_shape);
    CHECK_THAT(job.error().message, Catch::Contains("'X'"));
    CHECK_THAT(job.error().message, Catch::Contains("N - 2000"));
    CHECK_THAT(job.error().message, Catch::Contains("-1000"));
    CHECK_THAT(job.error().message, Catch::Contains("N=1000"));
  }

  SECTION("a zero count is bad_shape") {
    const KernelSpec spec =
        parse_spec(replace_once(k_spec_toml, "count = \"N\"", "count = \"N - 1000\""));
    auto job = make_bench_job(spec, parse_shape("N=1000"), config, "f32", "/a/c.so", "", settings);
    REQUIRE_FALSE(job.ok());
    CHECK(job.error().code == ktune::ErrorCode::bad_shape);
    CHECK_THAT(job.error().message, Catch::Contains("= 0"));
  }

  SECTION("a count that cannot be evaluated is bad_expression naming the arg") {
    const KernelSpec spec =
        parse_spec(replace_once(k_spec_toml, "count = \"N\"", "count = \"N % (UNROLL - 2)\""));
    auto job = make_bench_job(spec, parse_shape("N=1000"), config, "f32", "/a/c.so", "", settings);
    REQUIRE_FALSE(job.ok());
    CHECK(job.error().code == ktune::ErrorCode::bad_expression);
    CHECK_THAT(job.error().message, Catch::Contains("args[0] 'X'"));
  }

  SECTION("an i32 scalar out of range is bad_shape") {
    const KernelSpec spec = parse_spec(
        replace_once(k_spec_toml, "value = \"N / 2 + UNROLL\"", "value = \"N * N * N\""));
    auto job = make_bench_job(spec, parse_shape("N=100000"), config, "f32", "/a/c.so", "", settings);
    REQUIRE_FALSE(job.ok());
    CHECK(job.error().code == ktune::ErrorCode::bad_shape);
    CHECK_THAT(job.error().message, Catch::Contains("half_n"));
    CHECK_THAT(job.error().message, Catch::Contains("i32"));
  }

  SECTION("a non-integral value for an integer scalar is bad_expression") {
    const KernelSpec spec =
        parse_spec(replace_once(k_spec_toml, "value = \"N\"", "value = \"N * 0.25\""));
    auto job = make_bench_job(spec, parse_shape("N=1001"), config, "f32", "/a/c.so", "", settings);
    REQUIRE_FALSE(job.ok());
    CHECK(job.error().code == ktune::ErrorCode::bad_expression);
    CHECK_THAT(job.error().message, Catch::Contains("'n'"));
  }

  SECTION("an unknown job dtype is bad_dtype") {
    const KernelSpec spec = parse_spec(k_spec_toml);
    auto job = make_bench_job(spec, parse_shape("N=10"), config, "f8", "/a/c.so", "", settings);
    REQUIRE_FALSE(job.ok());
    CHECK(job.error().code == ktune::ErrorCode::bad_dtype);
    CHECK_THAT(job.error().message, Catch::Contains("f8"));
  }
}

TEST_CASE("MeasureSettings JSON", "[bench][bench_job]") {
  SECTION("round trip") {
    MeasureSettings s;
    s.min_samples = 3;
    s.max_samples = 77;
    s.target_rsd = 0.02;
    s.min_time_s = 0;
    s.max_time_s = 0.05;
    s.warmup_ms = 1;
    s.flush_cache = false;
    s.seed = 0xffffffffffffffffULL;
    const MeasureSettings back = MeasureSettings::from_json(s.to_json());
    CHECK(back.min_samples == 3);
    CHECK(back.max_samples == 77);
    CHECK(back.target_rsd == 0.02);
    CHECK(back.min_time_s == 0);
    CHECK(back.max_time_s == 0.05);
    CHECK(back.warmup_ms == 1);
    CHECK_FALSE(back.flush_cache);
    CHECK(back.seed == 0xffffffffffffffffULL);
    CHECK(back.to_json() == s.to_json());
  }

  SECTION("missing fields are defaults") {
    const MeasureSettings defaults;
    const MeasureSettings back = MeasureSettings::from_json(nlohmann::json{{"min_samples", 5}});
    CHECK(back.min_samples == 5);
    CHECK(back.max_samples == defaults.max_samples);
    CHECK(back.max_time_s == defaults.max_time_s);
    CHECK(back.flush_cache == defaults.flush_cache);
    CHECK(back.seed == defaults.seed);
    CHECK(MeasureSettings::from_json(nlohmann::json::object()).to_json() == defaults.to_json());
  }

  SECTION("from_json keeps the default for a field of the wrong type; parse rejects it") {
    const nlohmann::json j{{"min_samples", "many"}, {"warmup_ms", 3}};
    const MeasureSettings lenient = MeasureSettings::from_json(j);
    CHECK(lenient.min_samples == MeasureSettings{}.min_samples);
    CHECK(lenient.warmup_ms == 3);
    auto strict = MeasureSettings::parse(j);
    REQUIRE_FALSE(strict.ok());
    CHECK(strict.error().code == ktune::ErrorCode::bad_request);
    CHECK_THAT(strict.error().message, Catch::Contains("min_samples"));
    CHECK_FALSE(MeasureSettings::parse(nlohmann::json{{"seed", -1}}).ok());
  }
}

TEST_CASE("BenchJob JSON", "[bench][bench_job]") {
  const BenchJob job = sample_job();

  SECTION("round trip keeps every field") {
    auto back = BenchJob::from_json(nlohmann::json::parse(job.to_json().dump()));
    INFO((back ? std::string() : back.error().message));
    REQUIRE(back.ok());
    CHECK(back->kernel == job.kernel);
    CHECK(back->entry == job.entry);
    CHECK(back->artifact_path == job.artifact_path);
    CHECK(back->reference_path == job.reference_path);
    CHECK(back->shape == job.shape);
    REQUIRE(back->args.size() == 3);
    CHECK(back->args[1].name == "Z");
    CHECK(back->args[1].kind == "out");
    CHECK(back->args[1].dtype == "f64");
    CHECK(back->args[1].count == 1000);
    CHECK(back->args[1].init == "zero");
    CHECK(back->args[2].value == 1000);
    CHECK(back->flops == job.flops);
    CHECK(back->bytes == job.bytes);
    CHECK(back->rtol == job.rtol);
    CHECK(back->atol == job.atol);
    CHECK(back->inplace);
    CHECK(back->settings.seed == job.settings.seed);
    CHECK(back->settings.max_time_s == job.settings.max_time_s);
    CHECK(back->to_json() == job.to_json());
  }

  SECTION("missing required field") {
    auto j = job.to_json();
    j.erase("entry");
    auto back = BenchJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK(back.error().code == ktune::ErrorCode::bad_request);
    CHECK_THAT(back.error().message, Catch::Contains("'entry'"));
  }

  SECTION("bad arg fields name the arg") {
    auto j = job.to_json();
    j["args"][1]["dtype"] = "f8";
    auto back = BenchJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("args[1].dtype"));

    j = job.to_json();
    j["args"][0]["count"] = 0;
    back = BenchJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("args[0].count"));

    j = job.to_json();
    j["args"][0]["kind"] = "output";
    CHECK_FALSE(BenchJob::from_json(j).ok());

    j = job.to_json();
    j["settings"]["max_time_s"] = "long";
    back = BenchJob::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("max_time_s"));
  }

  SECTION("not an object") {
    CHECK_FALSE(BenchJob::from_json(nlohmann::json::array()).ok());
  }
}

TEST_CASE("BenchOutcome JSON", "[bench][bench_job]") {
  BenchOutcome outcome;
  outcome.status = CandidateStatus::mismatch;
  outcome.reason = "C[17]: got 1.5, expected 2.25";
  outcome.stats.n = 12;
  outcome.stats.min_ms = 0.5;
  outcome.stats.q1_ms = 0.6;
  outcome.stats.median_ms = 0.75;
  outcome.stats.q3_ms = 0.8;
  outcome.stats.max_ms = 1.25;
  outcome.stats.mean_ms = 0.77;
  outcome.stats.stddev_ms = 0.1;
  outcome.gflops = 12.5;
  outcome.gbps = 3.25;
  outcome.samples_ms = {0.75f, 0.5f, 1.25f};
  outcome.retaken = 4;

  SECTION("round trip") {
    auto back = BenchOutcome::from_json(nlohmann::json::parse(outcome.to_json().dump()));
    REQUIRE(back.ok());
    CHECK(back->status == CandidateStatus::mismatch);
    CHECK(back->reason == outcome.reason);
    CHECK(back->stats.n == 12);
    CHECK(back->stats.min_ms == 0.5);
    CHECK(back->stats.q1_ms == 0.6);
    CHECK(back->stats.median_ms == 0.75);
    CHECK(back->stats.q3_ms == 0.8);
    CHECK(back->stats.max_ms == 1.25);
    CHECK(back->stats.mean_ms == 0.77);
    CHECK(back->stats.stddev_ms == 0.1);
    CHECK(back->gflops == 12.5);
    CHECK(back->gbps == 3.25);
    CHECK(back->samples_ms == outcome.samples_ms);
    CHECK(back->retaken == 4);
    CHECK(outcome.to_json()["status"] == "mismatch");
  }

  SECTION("an outcome without samples (an older worker) is valid and keeps none") {
    auto j = outcome.to_json();
    j.erase("samples_ms");
    auto back = BenchOutcome::from_json(j);
    REQUIRE(back.ok());
    CHECK(back->samples_ms.empty());
    CHECK(back->stats.n == 12);
  }

  SECTION("samples must be numbers") {
    auto j = outcome.to_json();
    j["samples_ms"] = nlohmann::json::array({0.5, "slow"});
    auto back = BenchOutcome::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("samples_ms"));
  }

  SECTION("retaken is optional (0) and must be an integer") {
    auto j = outcome.to_json();
    j.erase("retaken");
    auto back = BenchOutcome::from_json(j);
    REQUIRE(back.ok());
    CHECK(back->retaken == 0);
    j["retaken"] = "many";
    CHECK_FALSE(BenchOutcome::from_json(j).ok());
  }

  SECTION("unknown status") {
    auto j = outcome.to_json();
    j["status"] = "fine";
    auto back = BenchOutcome::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK(back.error().code == ktune::ErrorCode::bad_request);
    CHECK_THAT(back.error().message, Catch::Contains("status"));
  }

  SECTION("a bad stats field") {
    auto j = outcome.to_json();
    j["stats"]["median_ms"] = "fast";
    auto back = BenchOutcome::from_json(j);
    REQUIRE_FALSE(back.ok());
    CHECK_THAT(back.error().message, Catch::Contains("stats.median_ms"));
  }
}

TEST_CASE("make_bench_job carries per-arg seeds, tolerances, buffer placement and elem_bytes",
          "[bench][bench_job]") {
  const KernelSpec spec = parse_spec(R"toml(
[kernel]
name = "axpy"
language = "cpp"
source = "k.cpp"
entry = "axpy"
shape = ["N"]
dtypes = ["f32", "f64"]

[[args]]
name = "X"
kind = "in"
count = "N"
init = "normal(0, 2)"
seed = 11

[[args]]
name = "Y"
kind = "out"
count = "N"
atol = 0.5

[metrics]
bytes = "2 * elem_bytes * N"

[buffers]
alignment = 128
offset = 16
)toml");
  MeasureSettings settings;
  for (const auto& [dtype, bytes] : {std::pair{"f32", 8000.0}, std::pair{"f64", 16000.0}}) {
    auto job = make_bench_job(spec, parse_shape("N=1000"), {}, dtype, "/a.so", "", settings);
    INFO((job ? std::string() : job.error().message));
    REQUIRE(job.ok());
    CHECK(job->bytes == bytes);  // elem_bytes follows the job's dtype
    CHECK(job->args[0].init == "normal(0, 2)");
    CHECK(job->args[0].seed == 11);
    CHECK(job->args[1].seed == -1);
    CHECK(job->args[1].atol == 0.5);
    CHECK(job->args[1].rtol < 0);
    CHECK(job->buffer_alignment == 128);
    CHECK(job->buffer_offset == 16);
    auto back = BenchJob::from_json(nlohmann::json::parse(job->to_json().dump()));
    REQUIRE(back.ok());
    CHECK(back->args[0].seed == 11);
    CHECK(back->args[1].atol == 0.5);
    CHECK(back->buffer_alignment == 128);
    CHECK(back->buffer_offset == 16);
    CHECK(back->to_json() == job->to_json());
  }
}
