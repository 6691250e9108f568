// Typed entry points end to end below the daemon: a family with a typed signature (given in the
// spec or read from its source) loads with its args typed by the declaration, compiles with the
// generated shim, and runs through the host runner against its reference function.
#include "tests/support/paths.hpp"
#include <catch2/catch.hpp>

#include "bench/host_runner.hpp"
#include "compiler/host_compiler.hpp"
#include "jobs/bench_job.hpp"
#include "jobs/kernel_registry.hpp"
#include "jobs/typed_entry.hpp"
#include "tests/support/temp_dir.hpp"

#include <string>

using ktune::CandidateStatus;

namespace {

const std::string k_gemm_blocked =
    ktune::test::source_dir() + "/tests/kernels/gemm_blocked/kernel.toml";

ktune::MeasureSettings tiny_settings() {
  ktune::MeasureSettings settings;
  settings.min_samples = 2;
  settings.max_samples = 3;
  settings.min_time_s = 0;
  settings.max_time_s = 0.01;
  settings.warmup_ms = 0;
  settings.flush_cache = false;
  return settings;
}

ktune::CompileOutcome compiled(ktune::HostCompiler& compiler, const ktune::CompileJob& job) {
  auto outcome = compiler.compile(job);
  INFO(outcome.log);
  REQUIRE(outcome.status == CandidateStatus::ok);
  return outcome;
}

// Runs the candidate compiled as `artifact` against the reference compiled as `reference` (none
// when its artifact_path is empty), each called by the symbol its compile exported.
ktune::BenchOutcome run(const ktune::LoadedKernel& kernel, const std::string& shape_text,
                        const ktune::Config& config, const ktune::CompileOutcome& artifact,
                        const ktune::CompileOutcome& reference) {
  auto shape = ktune::Shape::parse(shape_text);
  REQUIRE(shape.ok());
  auto job = ktune::make_bench_job(kernel.spec, *shape, config, kernel.spec.dtypes.front(),
                                   artifact.artifact_path, reference.artifact_path, tiny_settings());
  INFO((job ? std::string() : job.error().message));
  REQUIRE(job.ok());
  ktune::use_compiled_entries(*job, artifact.entry_symbol, reference.entry_symbol);
  ktune::HostRunner runner;
  return runner.run(*job);
}

std::string edit_check(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

} // namespace

TEST_CASE("a typed SGEMM loads, compiles and runs against its float64 reference, no adapter",
          "[compiler][typed_entry]") {
  auto kernel = ktune::load_kernel(k_gemm_blocked);
  INFO((kernel ? std::string() : kernel.error().message));
  REQUIRE(kernel.ok());
  CHECK(kernel->spec.args[3].dtype == "i32");
  REQUIRE(kernel->reference_signature.has_value());
  CHECK(kernel->reference_signature->name == "gemm_reference");

  ktune::test::TempDir cache;
  ktune::HostCompiler compiler;
  auto job = ktune::make_compile_job(*kernel, kernel->spec.default_config, "f32", cache.str());
  REQUIRE(job.ok());
  CHECK(job->dtype.empty());  // no dtype axis: no KTUNE_DTYPE
  CHECK_THAT(job->shim, Catch::Contains("extern \"C\" void ktune_shim_gemm_blocked(void** args)"));
  CHECK_THAT(job->shim, Catch::Contains("static_cast<int>(*static_cast<const int*>(args[3]))"));
  auto reference_job = ktune::make_reference_compile_job(*kernel, "f32", cache.str());
  REQUIRE(reference_job.ok());
  CHECK(reference_job->defines.empty());
  CHECK(compiler.cache_key(*reference_job) != compiler.cache_key(*job));

  const auto artifact = compiled(compiler, *job);
  const auto reference = compiled(compiler, *reference_job);
  CHECK(artifact.entry_symbol == "ktune_shim_gemm_blocked_k" + artifact.cache_key.substr(0, 16));
  CHECK(reference.entry_symbol == "ktune_shim_gemm_reference_k" + reference.cache_key.substr(0, 16));
  const auto outcome = run(*kernel, "M=40,N=24,K=33", kernel->spec.default_config, artifact, reference);
  INFO(outcome.reason);
  CHECK(outcome.status == CandidateStatus::ok);
  CHECK(outcome.gbps > 0);  // elem_bytes in [metrics].bytes

  SECTION("an output's own tolerance is the one applied") {
    auto shape = ktune::Shape::parse("M=40,N=24,K=33");
    REQUIRE(shape.ok());
    auto bench = ktune::make_bench_job(kernel->spec, *shape, kernel->spec.default_config, "f32",
                                       artifact.artifact_path, reference.artifact_path,
                                       tiny_settings());
    REQUIRE(bench.ok());
    CHECK(bench->entry == "ktune_shim_gemm_blocked");
    CHECK(bench->reference_entry == "ktune_shim_gemm_reference");
    ktune::use_compiled_entries(*bench, artifact.entry_symbol, reference.entry_symbol);
    CHECK(bench->args[2].rtol == Approx(1e-4));
    // f32 blocked sums against float64 sums: never bit-identical over 960 elements of K = 33.
    bench->args[2].rtol = 0;
    bench->args[2].atol = 1e-30;
    ktune::HostRunner runner;
    const auto strict = runner.run(*bench);
    CHECK(strict.status == CandidateStatus::mismatch);
    CHECK_THAT(strict.reason, Catch::Contains("(rtol 0, atol 1e-30)"));
  }
}

TEST_CASE("typed configs compiled in one batch each call their own renamed shim",
          "[compiler][typed_entry][batch]") {
  auto kernel = ktune::load_kernel(k_gemm_blocked);
  REQUIRE(kernel.ok());
  ktune::test::TempDir cache;
  ktune::HostCompiler compiler;
  // gemm_blocked is extern "C" and defines its tunables' defaults: neither may clash or leak.
  const std::vector<ktune::Config> configs = {
      {{"BM", 16}, {"BN", 32}, {"BK", 16}, {"UNROLL", 4}},
      {{"BM", 32}, {"BN", 64}, {"BK", 32}, {"UNROLL", 1}},
      {{"BM", 16}, {"BN", 64}, {"BK", 32}, {"UNROLL", 4}}};
  std::vector<ktune::CompileJob> jobs;
  for (const auto& config : configs) {
    auto job = ktune::make_compile_job(*kernel, config, "f32", cache.str());
    REQUIRE(job.ok());
    CHECK(job->entry == "gemm_blocked");
    jobs.push_back(*job);
  }
  const auto outcomes = compiler.compile_batch(jobs);
  auto reference_job = ktune::make_reference_compile_job(*kernel, "f32", cache.str());
  REQUIRE(reference_job.ok());
  CHECK(reference_job->entry == "gemm_reference");
  const auto reference = compiled(compiler, *reference_job);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    INFO(outcomes[i].log);
    REQUIRE(outcomes[i].status == CandidateStatus::ok);
    CHECK(outcomes[i].batch_size == 3);
    CHECK(outcomes[i].entry_symbol ==
          "ktune_shim_gemm_blocked_k" + outcomes[i].cache_key.substr(0, 16));
    const auto outcome = run(*kernel, "M=40,N=24,K=33", configs[i], outcomes[i], reference);
    INFO(outcome.reason);
    CHECK(outcome.status == CandidateStatus::ok);
  }
}

TEST_CASE("signature = \"source\" reads the declaration, scalars are converted to the declared "
          "type", "[compiler][typed_entry]") {
  ktune::test::TempDir dir;
  dir.write("k/kernel.cpp",
            "#include <cstddef>\n"
            "// x[i] = a * i + n, for every i < n\n"
            "void fill(double* x, std::size_t n, float a) {\n"
            "  for (std::size_t i = 0; i < n; ++i) x[i] = a * static_cast<double>(i) + n;\n"
            "}\n");
  dir.write("k/reference.cpp",
            "#include <cstddef>\n"
            "void fill_reference(double* x, unsigned long n, float a) {\n"
            "  for (unsigned long i = 0; i < n; ++i) x[i] = a * static_cast<double>(i) + n;\n"
            "}\n");
  const std::string head = "[kernel]\nname = \"fill\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\n"
                           "entry = \"fill\"\nsignature = \"source\"\nshape = [\"N\"]\n";
  const std::string args = "[[args]]\nname = \"x\"\nkind = \"out\"\ncount = \"N\"\n"
                           "[[args]]\nname = \"n\"\nkind = \"scalar\"\nvalue = \"N\"\n"
                           "[[args]]\nname = \"a\"\nkind = \"scalar\"\nvalue = \"0.5\"\n";
  const std::string check = "[check]\nreference = \"function\"\nsource = \"reference.cpp\"\n"
                            "function = \"fill_reference\"\natol = 0\nrtol = 0\n";
  dir.write("k/kernel.toml", head + args + check);
  auto kernel = ktune::load_kernel(dir.str() + "/k/kernel.toml");
  INFO((kernel ? std::string() : kernel.error().message));
  REQUIRE(kernel.ok());
  REQUIRE(kernel->spec.signature.has_value());
  CHECK(kernel->spec.signature->line == 3);
  CHECK(kernel->spec.args[0].dtype == "f64");
  CHECK(kernel->spec.args[1].dtype == "i64");
  CHECK(kernel->spec.args[2].dtype == "f32");
  CHECK(kernel->spec.dtypes == std::vector<std::string>{"f64"});

  ktune::test::TempDir cache;
  ktune::HostCompiler compiler;
  auto job = ktune::make_compile_job(*kernel, {}, "f64", cache.str());
  REQUIRE(job.ok());
  auto reference_job = ktune::make_reference_compile_job(*kernel, "f64", cache.str());
  REQUIRE(reference_job.ok());
  const auto outcome = run(*kernel, "N=1000", {}, compiled(compiler, *job), compiled(compiler, *reference_job));
  INFO(outcome.reason);
  CHECK(outcome.status == CandidateStatus::ok);

  SECTION("a declaration that disagrees names the spec line, the source line and both types") {
    dir.write("k/kernel.toml", head + args + "[[args]]\nname = \"extra\"\nkind = \"scalar\"\nvalue = \"1\"\n");
    auto broken = ktune::load_kernel(dir.str() + "/k/kernel.toml");
    REQUIRE_FALSE(broken.ok());
    CHECK_THAT(broken.error().message, Catch::Contains("kernel.toml:6: [kernel].signature") &&
                                           Catch::Contains("kernel.cpp:3 declares 3 parameters"));
    dir.write("k/kernel.toml", head + "[[args]]\nname = \"x\"\nkind = \"out\"\ncount = \"N\"\n"
                                      "[[args]]\nname = \"n\"\nkind = \"scalar\"\nvalue = \"N\"\n"
                                      "dtype = \"i32\"\n"
                                      "[[args]]\nname = \"a\"\nkind = \"scalar\"\nvalue = \"0.5\"\n");
    broken = ktune::load_kernel(dir.str() + "/k/kernel.toml");
    REQUIRE_FALSE(broken.ok());
    CHECK_THAT(broken.error().message,
               Catch::Contains("kernel.toml:16: args[1] 'n': dtype = \"i32\"") &&
                   Catch::Contains("kernel.cpp:3 declares 'std::size_t n' (i64)") &&
                   Catch::Contains("fix: write dtype = \"i64\""));
  }
  SECTION("a missing reference function or source is a load error with the fix") {
    dir.write("k/kernel.toml", head + args + edit_check(check, "fill_reference\"", "fill_ref\""));
    auto broken = ktune::load_kernel(dir.str() + "/k/kernel.toml");
    REQUIRE_FALSE(broken.ok());
    CHECK_THAT(broken.error().message, Catch::Contains("[check].function") &&
                                           Catch::Contains("no declaration 'void fill_ref(...)'") &&
                                           Catch::Contains("fix: define void fill_ref"));
    dir.write("k/kernel.toml", head + args + edit_check(check, "reference.cpp", "ref.cpp"));
    broken = ktune::load_kernel(dir.str() + "/k/kernel.toml");
    REQUIRE_FALSE(broken.ok());
    CHECK_THAT(broken.error().message,
               Catch::Contains("[check].source: 'ref.cpp' cannot be read") && Catch::Contains("fix"));
  }
}

TEST_CASE("HostCompiler leaves out removed fixed flags and, without a dtype, KTUNE_DTYPE",
          "[compiler][typed_entry]") {
  ktune::test::TempDir dir;
  const auto source = dir.write("k.cpp",
                                "#ifdef __OPTIMIZE__\n#error optimized\n#endif\n"
                                "#ifdef KTUNE_DTYPE\n#error dtype defined\n#endif\n"
                                "extern \"C\" void k(void**) {}\n");
  ktune::CompileJob job;
  job.kernel = "k";
  job.language = "cpp";
  job.source_path = source.string();
  job.cache_dir = (dir.path() / "cache").string();
  job.dtype = "";
  job.removed_flags = {"-O3"};
  ktune::HostCompiler compiler;
  auto plain = compiler.compile(job);
  INFO(plain.log);
  CHECK(plain.status == CandidateStatus::ok);

  auto optimized = job;
  optimized.removed_flags.clear();
  CHECK(compiler.cache_key(optimized) != compiler.cache_key(job));
  auto failed = compiler.compile(optimized);
  CHECK(failed.status == CandidateStatus::compile_error);
  CHECK_THAT(failed.log, Catch::Contains("optimized"));

  auto with_dtype = job;
  with_dtype.dtype = "f32";
  CHECK_THAT(compiler.compile(with_dtype).log, Catch::Contains("dtype defined"));

  auto foreign = job;
  foreign.removed_flags = {"-fPIC"};
  const auto refused = compiler.compile(foreign);
  CHECK(refused.status == CandidateStatus::compile_error);
  CHECK_THAT(refused.log, Catch::Contains("not one of the fixed flags"));
}

namespace {

// A .npy (version 1) holding `values` as '<f8'.
std::string npy_f64(const std::vector<double>& values) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" +
                       std::to_string(values.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
  return out;
}

} // namespace

TEST_CASE("reference = \"files\": outputs are checked against a file of expected values per shape",
          "[compiler][typed_entry]") {
  ktune::test::TempDir dir;
  dir.write("k/kernel.cpp",
            "void fill(double* x, long n) { for (long i = 0; i < n; ++i) x[i] = 0.5 * i + n; }\n");
  dir.write("k/kernel.toml",
            "[kernel]\nname = \"fill\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\n"
            "entry = \"fill\"\nsignature = \"source\"\nshape = [\"N\"]\n"
            "[[args]]\nname = \"x\"\nkind = \"out\"\ncount = \"N\"\n"
            "expected = \"expected/x_{shape}.npy\"\n"
            "[[args]]\nname = \"n\"\nkind = \"scalar\"\nvalue = \"N\"\n"
            "[check]\nreference = \"files\"\nrtol = 0\natol = 0\n");
  std::vector<double> values(100);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5 * static_cast<double>(i) + 100;
  dir.write("k/expected/x_N=100.npy", npy_f64(values));
  auto kernel = ktune::load_kernel(dir.str() + "/k/kernel.toml");
  INFO((kernel ? std::string() : kernel.error().message));
  REQUIRE(kernel.ok());
  CHECK(kernel->spec.args[0].expected == (dir.path() / "k/expected/x_{shape}.npy").string());

  ktune::test::TempDir cache;
  ktune::HostCompiler compiler;
  auto job = ktune::make_compile_job(*kernel, {}, "f64", cache.str());
  REQUIRE(job.ok());
  const auto artifact = compiled(compiler, *job);
  auto ok = run(*kernel, "N=100", {}, artifact, {});
  INFO(ok.reason);
  CHECK(ok.status == CandidateStatus::ok);

  SECTION("a value that differs is a mismatch; a missing or short file a runtime_error") {
    values[7] += 1;
    dir.write("k/expected/x_N=100.npy", npy_f64(values));
    const auto wrong = run(*kernel, "N=100", {}, artifact, {});
    CHECK(wrong.status == CandidateStatus::mismatch);
    CHECK_THAT(wrong.reason, Catch::Contains("x[7]"));
    const auto missing = run(*kernel, "N=50", {}, artifact, {});
    CHECK(missing.status == CandidateStatus::runtime_error);
    CHECK_THAT(missing.reason, Catch::Contains("x_N=50.npy"));
    values.pop_back();
    dir.write("k/expected/x_N=100.npy", npy_f64(values));
    const auto shorter = run(*kernel, "N=100", {}, artifact, {});
    CHECK(shorter.status == CandidateStatus::runtime_error);
    CHECK_THAT(shorter.reason, Catch::Contains("expected 100 elements of f64"));
  }
}

TEST_CASE("init = \"file:...\": an input holds the elements of its file, read per shape",
          "[compiler][typed_entry]") {
  ktune::test::TempDir dir;
  dir.write("k/kernel.cpp",
            "void twice(const double* x, double* y, long n) {\n"
            "  for (long i = 0; i < n; ++i) y[i] = 2 * x[i];\n}\n");
  const std::string spec =
      "[kernel]\nname = \"twice\"\nlanguage = \"cpp\"\nsource = \"kernel.cpp\"\n"
      "entry = \"twice\"\nsignature = \"source\"\nshape = [\"N\"]\n"
      "[[args]]\nname = \"x\"\nkind = \"in\"\ncount = \"N\"\ninit = \"file:data/{shape}/x.npy\"\n"
      "[[args]]\nname = \"y\"\nkind = \"out\"\ncount = \"N\"\n"
      "expected = \"data/{shape}/y.npy\"\n"
      "[[args]]\nname = \"n\"\nkind = \"scalar\"\nvalue = \"N\"\n"
      "[check]\nreference = \"files\"\nrtol = 0\natol = 0\n";
  dir.write("k/kernel.toml", spec);
  std::vector<double> x(100), y(100);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = 1.0 / static_cast<double>(i + 3);  // nothing a generated init would give
    y[i] = 2 * x[i];
  }
  dir.write("k/data/N=100/x.npy", npy_f64(x));
  dir.write("k/data/N=100/y.npy", npy_f64(y));
  auto kernel = ktune::load_kernel(dir.str() + "/k/kernel.toml");
  INFO((kernel ? std::string() : kernel.error().message));
  REQUIRE(kernel.ok());
  CHECK(kernel->spec.args[0].init == "file:" + (dir.path() / "k/data/{shape}/x.npy").string());

  ktune::test::TempDir cache;
  ktune::HostCompiler compiler;
  auto job = ktune::make_compile_job(*kernel, {}, "f64", cache.str());
  REQUIRE(job.ok());
  const auto artifact = compiled(compiler, *job);
  auto shape = ktune::Shape::parse("N=100");
  REQUIRE(shape.ok());
  auto bench = ktune::make_bench_job(kernel->spec, *shape, {}, kernel->spec.dtypes.front(),
                                     artifact.artifact_path, "", tiny_settings());
  REQUIRE(bench.ok());
  CHECK(bench->args[0].init == "file:" + (dir.path() / "k/data/N=100/x.npy").string());
  ktune::use_compiled_entries(*bench, artifact.entry_symbol, "");
  ktune::HostRunner runner;
  const auto ok = runner.run(*bench);
  INFO(ok.reason);
  CHECK(ok.status == CandidateStatus::ok);

  SECTION("a file rewritten at the same path is read again by the same runner") {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += 1;
    dir.write("k/data/N=100/x.npy", npy_f64(x));
    const auto stale = runner.run(*bench);
    CHECK(stale.status == CandidateStatus::mismatch);  // y.npy still holds 2 * the old x
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = 2 * x[i];
    dir.write("k/data/N=100/y.npy", npy_f64(y));
    const auto fresh = runner.run(*bench);
    INFO(fresh.reason);
    CHECK(fresh.status == CandidateStatus::ok);
  }
  SECTION("a file of another size, or none for the shape, is a runtime_error naming it") {
    x.pop_back();
    dir.write("k/data/N=100/x.npy", npy_f64(x));
    const auto shorter = runner.run(*bench);
    CHECK(shorter.status == CandidateStatus::runtime_error);
    CHECK_THAT(shorter.reason, Catch::Contains("'x': init:") &&
                                   Catch::Contains("N=100/x.npy: expected 100 elements of f64") &&
                                   Catch::Contains("found 792 bytes"));
    auto other = ktune::Shape::parse("N=50");
    REQUIRE(other.ok());
    auto missing = ktune::make_bench_job(kernel->spec, *other, {}, "f64", artifact.artifact_path,
                                         "", tiny_settings());
    REQUIRE(missing.ok());
    ktune::use_compiled_entries(*missing, artifact.entry_symbol, "");
    const auto none = runner.run(*missing);
    CHECK(none.status == CandidateStatus::runtime_error);
    CHECK_THAT(none.reason, Catch::Contains("N=50/x.npy: cannot be read"));
  }
  SECTION("a file outside the family's directory, an absolute path or an out buffer is refused") {
    dir.write("k/kernel.toml", edit_check(spec, "file:data/{shape}/x.npy", "file:../x.npy"));
    auto outside = ktune::load_kernel(dir.str() + "/k/kernel.toml");
    REQUIRE_FALSE(outside.ok());
    CHECK_THAT(outside.error().message,
               Catch::Contains("args[0].init") && Catch::Contains("leads outside"));
    auto absolute = ktune::parse_kernel_spec(
        edit_check(spec, "file:data/{shape}/x.npy", "file:/etc/x.npy"), "k.toml");
    REQUIRE_FALSE(absolute.ok());
    CHECK_THAT(absolute.error().message,
               Catch::Contains("args[0].init") && Catch::Contains("relative to the spec"));
    auto out = ktune::parse_kernel_spec(
        edit_check(spec, "count = \"N\"\nexpected", "count = \"N\"\ninit = \"file:y.npy\"\nexpected"),
        "k.toml");
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message,
               Catch::Contains("args[1].init") && Catch::Contains("out buffer is not filled"));
  }
}
