#include <catch2/catch.hpp>

#include "compiler/host_compiler.hpp"
#include "core/hash.hpp"
#include "tests/support/temp_dir.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <latch>
#include <set>
#include <thread>

namespace fs = std::filesystem;
using ktune::CandidateStatus;
using ktune::CompileJob;
using ktune::HostCompiler;

namespace {

// A kernel that reports what it was compiled with.
constexpr const char* k_probe_source = R"(#include "probe_value.hpp"
#include <cstdint>
extern "C" int probe_dtype_size() { return sizeof(KTUNE_DTYPE); }
extern "C" int probe_dtype_flag() {
#if defined(KTUNE_DTYPE_F64)
  return 64;
#elif defined(KTUNE_DTYPE_F32)
  return 32;
#else
  return 0;
#endif
}
extern "C" long probe_value() { return VALUE + PROBE_OFFSET; }
)";

CompileJob probe_job(const ktune::test::TempDir& dir) {
  dir.write("src/probe.cpp", k_probe_source);
  dir.write("inc/probe_value.hpp", "#define PROBE_OFFSET 1000\n");
  CompileJob job;
  job.kernel = "probe";
  job.language = "cpp";
  job.source_path = (dir.path() / "src/probe.cpp").string();
  job.include_dirs = {(dir.path() / "inc").string()};
  job.defines = {{"VALUE", 7}};
  job.dtype = "f64";
  job.source_hash = "probe-source-v1";
  job.cache_dir = (dir.path() / "cache").string();
  return job;
}

// Every file under `dir`, recursively.
// The files under `dir` but the compile cache's records of content hashes (<artifact>.sum),
// which records_under counts.
std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() != ".sum") files.push_back(entry.path());
  }
  return files;
}

std::vector<fs::path> records_under(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".sum") files.push_back(entry.path());
  }
  return files;
}

// dlopen handle with a destructor.
class Library {
public:
  explicit Library(const std::string& path)
      : m_handle(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (m_handle != nullptr) ::dlclose(m_handle);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  [[nodiscard]] bool ok() const { return m_handle != nullptr; }
  template <class F>
  F* symbol(const char* name) const {
    return reinterpret_cast<F*>(::dlsym(m_handle, name));
  }

private:
  void* m_handle;
};

} // namespace

TEST_CASE("HostCompiler compiles into the cache and reuses the artifact", "[compiler]") {
  ktune::test::TempDir dir;
  HostCompiler compiler;
  const CompileJob job = probe_job(dir);

  auto first = compiler.compile(job);
  INFO(first.log);
  REQUIRE(first.status == CandidateStatus::ok);
  CHECK_FALSE(first.cached);
  CHECK(first.compile_ms > 0);
  CHECK(first.cache_key == compiler.cache_key(job));
  CHECK(first.artifact_path == ktune::host_artifact_path(job.cache_dir, first.cache_key));
  CHECK(fs::path(first.artifact_path).parent_path().filename() == first.cache_key.substr(0, 2));
  REQUIRE(fs::is_regular_file(first.artifact_path));

  SECTION("the artifact was built with the dtype, its flag, the defines and include dirs") {
    Library library(first.artifact_path);
    REQUIRE(library.ok());
    CHECK(library.symbol<int()>("probe_dtype_size")() == 8);
    CHECK(library.symbol<int()>("probe_dtype_flag")() == 64);
    CHECK(library.symbol<long()>("probe_value")() == 1007);
  }

  SECTION("a second compile is a cache hit") {
    HostCompiler other;
    auto second = other.compile(job);
    CHECK(second.status == CandidateStatus::ok);
    CHECK(second.cached);
    CHECK(second.compile_ms == 0);
    CHECK(second.artifact_path == first.artifact_path);
    CHECK(files_under(job.cache_dir).size() == 1);
  }

  SECTION("no temp files are left behind") {
    const auto files = files_under(job.cache_dir);
    REQUIRE(files.size() == 1);
    CHECK(files.front() == fs::path(first.artifact_path));
    // ... and the artifact has its record.
    const auto records = records_under(job.cache_dir);
    REQUIRE(records.size() == 1);
    CHECK(records.front() == fs::path(first.artifact_path + ".sum"));
  }
}

TEST_CASE("HostCompiler cache keys cover every input", "[compiler]") {
  ktune::test::TempDir dir;
  HostCompiler compiler;
  const CompileJob job = probe_job(dir);
  const std::string key = compiler.cache_key(job);
  CHECK(key.size() == 32);
  CHECK(compiler.cache_key(job) == key);

  SECTION("defines") {
    CompileJob changed = job;
    changed.defines = {{"VALUE", 8}};
    CHECK(compiler.cache_key(changed) != key);
    changed.defines = {{"VALUE", 7}, {"EXTRA", 1}};
    CHECK(compiler.cache_key(changed) != key);
  }

  SECTION("the order of the defines does not matter") {
    CompileJob a = job, b = job;
    a.defines = {{"A", 1}, {"B", 2}};
    b.defines = {{"B", 2}, {"A", 1}};
    CHECK(compiler.cache_key(a) == compiler.cache_key(b));
  }

  SECTION("dtype") {
    CompileJob changed = job;
    changed.dtype = "f32";
    CHECK(compiler.cache_key(changed) != key);
  }

  SECTION("extra flags") {
    CompileJob changed = job;
    changed.extra_flags = {"-ffast-math"};
    CHECK(compiler.cache_key(changed) != key);
  }

  SECTION("source hash") {
    CompileJob changed = job;
    changed.source_hash = "probe-source-v2";
    CHECK(compiler.cache_key(changed) != key);
  }

  SECTION("without a source hash the source's content is the key") {
    CompileJob unhashed = job;
    unhashed.source_hash.clear();
    const std::string before = compiler.cache_key(unhashed);
    dir.write("src/probe.cpp", std::string(k_probe_source) + "// edited\n");
    CHECK(compiler.cache_key(unhashed) != before);
  }

  SECTION("the compiler's identity") {
    HostCompiler other_compiler("g++");
    HostCompiler same_compiler;
    CHECK(same_compiler.cache_key(job) == key);
    if (other_compiler.version().empty()) SUCCEED("g++ is not installed");
    else CHECK(other_compiler.cache_key(job) != key);
  }

  SECTION("where the cache lives does not change the key") {
    CompileJob moved = job;
    moved.cache_dir = (dir.path() / "elsewhere").string();
    CHECK(compiler.cache_key(moved) == key);
  }
}

TEST_CASE("HostCompiler reports compile errors as outcomes", "[compiler]") {
  ktune::test::TempDir dir;
  HostCompiler compiler;
  CompileJob job = probe_job(dir);

  SECTION("the compiler's message is in the log and nothing is left in the cache") {
    dir.write("src/broken.cpp", "extern \"C\" void f() { this_is_not_declared(); }\n");
    job.source_path = (dir.path() / "src/broken.cpp").string();
    job.source_hash = "broken";
    auto outcome = compiler.compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK(outcome.artifact_path.empty());
    CHECK_FALSE(outcome.cached);
    CHECK_THAT(outcome.log, Catch::Contains("this_is_not_declared"));
    CHECK(files_under(job.cache_dir).empty());
    CHECK_FALSE(fs::exists(ktune::host_artifact_path(job.cache_dir, outcome.cache_key)));
  }

  SECTION("the log keeps only the first 8 KiB") {
    std::string source;
    for (int i = 0; i < 400; ++i)
      source +=
          "int f" + std::to_string(i) + "() { return undeclared_" + std::to_string(i) + "; }\n";
    dir.write("src/noisy.cpp", source);
    job.source_path = (dir.path() / "src/noisy.cpp").string();
    job.source_hash = "noisy";
    auto outcome = compiler.compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK(outcome.log.size() == 8 * 1024);
  }

  SECTION("f16 is refused before the compiler runs") {
    job.dtype = "f16";
    auto outcome = compiler.compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Catch::Contains("f16 is not supported by the host compiler"));
    CHECK(outcome.compile_ms == 0);
  }

  SECTION("a CUDA job is refused") {
    job.language = "cuda";
    auto outcome = compiler.compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Catch::Contains("'cuda'"));
  }

  SECTION("a define that is not an identifier is refused") {
    job.defines = {{"X -o /tmp/evil", 1}};
    auto outcome = compiler.compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Catch::Contains("not a C identifier"));
  }

  SECTION("a job without a cache directory") {
    job.cache_dir.clear();
    auto outcome = compiler.compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Catch::Contains("cache_dir"));
  }

  SECTION("a compiler that cannot be run") {
    HostCompiler missing("/nonexistent/ktune-cxx");
    CHECK(missing.version().empty());
    auto outcome = missing.compile(job);
    CHECK(outcome.status == CandidateStatus::compile_error);
    CHECK_THAT(outcome.log, Catch::Contains("/nonexistent/ktune-cxx"));
    CHECK(files_under(job.cache_dir).empty());
  }
}

TEST_CASE("HostCompiler takes the compiler from $KTUNE_CXX", "[compiler]") {
  const char* saved = std::getenv("KTUNE_CXX");
  const std::string saved_value = saved != nullptr ? saved : "";
  ::setenv("KTUNE_CXX", "/nonexistent/ktune-env-cxx", 1);
  ktune::test::TempDir dir;
  HostCompiler from_env;
  auto outcome = from_env.compile(probe_job(dir));
  if (saved != nullptr) ::setenv("KTUNE_CXX", saved_value.c_str(), 1);
  else ::unsetenv("KTUNE_CXX");
  CHECK(outcome.status == CandidateStatus::compile_error);
  CHECK_THAT(outcome.log, Catch::Contains("/nonexistent/ktune-env-cxx"));
}

TEST_CASE("Concurrent compiles of one key both succeed", "[compiler]") {
  ktune::test::TempDir dir;
  const CompileJob job = probe_job(dir);
  ktune::CompileOutcome outcomes[2];
  std::latch start(2);
  auto work = [&](int i) {
    HostCompiler compiler;
    start.arrive_and_wait();
    outcomes[i] = compiler.compile(job);
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  for (const auto& outcome : outcomes) {
    INFO(outcome.log);
    CHECK(outcome.status == CandidateStatus::ok);
    CHECK(outcome.artifact_path == outcomes[0].artifact_path);
  }
  const auto files = files_under(job.cache_dir);
  REQUIRE(files.size() == 1);
  CHECK(files.front() == fs::path(outcomes[0].artifact_path));
  Library library(outcomes[0].artifact_path);
  REQUIRE(library.ok());
  CHECK(library.symbol<long()>("probe_value")() == 1007);
}

TEST_CASE("host_compiler_version reads the first line of --version", "[compiler]") {
  const std::string version = ktune::host_compiler_version("c++");
  CHECK_FALSE(version.empty());
  CHECK(version.find('\n') == std::string::npos);
  CHECK(ktune::host_compiler_version("/nonexistent/ktune-cxx").empty());
  CHECK(ktune::host_compiler_version("false").empty());
}

namespace {

// A batchable kernel: *out = 10 * SCALE, plus 100 where SCALE > 2 defines BONUS (a macro that
// must not reach the next config of a batch). SCALE 4 does not compile.
constexpr const char* k_scale_source = R"(#include <cstdint>
#if SCALE == 4
#error "SCALE 4 is broken on purpose"
#endif
#if SCALE > 2
#define BONUS 100
#endif
#ifdef BONUS
constexpr std::int64_t k_bonus = BONUS;
#else
constexpr std::int64_t k_bonus = 0;
#endif
extern "C" void scale(void** args) { *static_cast<std::int64_t*>(args[0]) = 10 * SCALE + k_bonus; }
)";

CompileJob scale_job(const ktune::test::TempDir& dir, std::int64_t scale,
                     const std::string& source = k_scale_source) {
  dir.write("scale/kernel.cpp", source);
  CompileJob job;
  job.kernel = "scale";
  job.language = "cpp";
  job.source_path = (dir.path() / "scale/kernel.cpp").string();
  job.include_dirs = {(dir.path() / "scale").string()};
  job.defines = {{"SCALE", scale}};
  job.entry = "scale";
  job.source_hash = ktune::hash_hex(source);
  job.cache_dir = (dir.path() / "cache").string();
  return job;
}

std::vector<CompileJob> scale_jobs(const ktune::test::TempDir& dir,
                                   const std::vector<std::int64_t>& scales,
                                   const std::string& source = k_scale_source) {
  std::vector<CompileJob> jobs;
  for (const auto scale : scales) jobs.push_back(scale_job(dir, scale, source));
  return jobs;
}

// What the artifact's entry symbol computes.
std::int64_t run_scale(const ktune::CompileOutcome& outcome) {
  Library library(outcome.artifact_path);
  REQUIRE(library.ok());
  const std::string symbol = outcome.entry_symbol.empty() ? "scale" : outcome.entry_symbol;
  auto* entry = library.symbol<void(void**)>(symbol.c_str());
  REQUIRE(entry != nullptr);
  std::int64_t out = -1;
  void* args[] = {&out};
  entry(args);
  return out;
}

} // namespace

TEST_CASE("compile_batch builds configs of one source in one compiler run, one artifact per key",
          "[compiler][batch]") {
  ktune::test::TempDir dir;
  HostCompiler compiler;
  // SCALE 3 defines BONUS; the configs after it must not see it.
  const auto jobs = scale_jobs(dir, {3, 1, 2});
  const auto outcomes = compiler.compile_batch(jobs);
  REQUIRE(outcomes.size() == 3);
  const std::int64_t expected[] = {130, 10, 20};
  std::set<std::string> symbols;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const auto& outcome = outcomes[i];
    INFO("SCALE " << jobs[i].defines.front().second << ": " << outcome.log);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK_FALSE(outcome.cached);
    CHECK(outcome.batch_size == 3);
    CHECK(outcome.batch_error.empty());
    CHECK(outcome.cache_key == compiler.cache_key(jobs[i]));
    CHECK(outcome.artifact_path == ktune::host_artifact_path(jobs[i].cache_dir, outcome.cache_key));
    CHECK(outcome.entry_symbol == "scale_k" + outcome.cache_key.substr(0, 16));
    CHECK(outcome.compile_ms == Approx(outcomes[0].compile_ms));
    symbols.insert(outcome.entry_symbol);
    // One shared object, linked under each key; every symbol is in it.
    CHECK(fs::equivalent(outcome.artifact_path, outcomes[0].artifact_path));
    CHECK(fs::hard_link_count(outcome.artifact_path) == 3);
    CHECK(run_scale(outcome) == expected[i]);
  }
  CHECK(symbols.size() == 3);
  CHECK(files_under(jobs[0].cache_dir).size() == 3);  // no temp file or unit left

  SECTION("a second call finds each config in the cache, under the same symbol") {
    const auto again = HostCompiler().compile_batch(jobs);
    for (std::size_t i = 0; i < again.size(); ++i) {
      CHECK(again[i].cached);
      CHECK(again[i].batch_size == 0);
      CHECK(again[i].artifact_path == outcomes[i].artifact_path);
      CHECK(again[i].entry_symbol == outcomes[i].entry_symbol);
    }
  }

  SECTION("a config compiled alone exports the symbol a batch would have given it") {
    const CompileJob alone = scale_job(dir, 5);
    const auto single = compiler.compile(alone);
    REQUIRE(single.status == CandidateStatus::ok);
    CHECK(single.batch_size == 1);
    CHECK(single.entry_symbol == "scale_k" + single.cache_key.substr(0, 16));
    CHECK(run_scale(single) == 150);
    const auto command = compiler.command(alone, "out.so", alone.source_path);
    CHECK(std::find(command.begin(), command.end(), "-Dscale=" + single.entry_symbol) != command.end());
  }

  SECTION("only the misses are compiled; a key asked for twice is compiled once") {
    const auto mixed = compiler.compile_batch(scale_jobs(dir, {1, 6, 7, 6}));
    CHECK(mixed[0].cached);
    for (std::size_t i = 1; i < mixed.size(); ++i) {
      CHECK_FALSE(mixed[i].cached);
      CHECK(mixed[i].batch_size == 2);
    }
    CHECK(mixed[3].artifact_path == mixed[1].artifact_path);
    CHECK(run_scale(mixed[2]) == 170);
  }
}

TEST_CASE("compile_batch isolates a config that does not compile", "[compiler][batch]") {
  ktune::test::TempDir dir;
  HostCompiler compiler;
  const auto jobs = scale_jobs(dir, {1, 2, 4, 3, 5});
  const auto outcomes = compiler.compile_batch(jobs);
  REQUIRE(outcomes.size() == 5);
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const auto& outcome = outcomes[i];
    INFO("SCALE " << jobs[i].defines.front().second << ": " << outcome.log);
    CHECK(outcome.batch_error.empty());  // SCALE 4's own error explains the failed batch
    if (i == 2) {
      CHECK(outcome.status == CandidateStatus::compile_error);
      CHECK(outcome.infra.empty());
      CHECK(outcome.batch_size == 1);  // its own compile, its own log
      CHECK_THAT(outcome.log, Catch::Contains("broken on purpose"));
      CHECK_FALSE(fs::exists(ktune::host_artifact_path(jobs[i].cache_dir, outcome.cache_key)));
      continue;
    }
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.log.find("broken on purpose") == std::string::npos);
    CHECK(run_scale(outcome) == (i == 3 ? 130 : i == 4 ? 150 : 10 * (static_cast<int>(i) + 1)));
  }
  CHECK(files_under(jobs[0].cache_dir).size() == 4);
}

TEST_CASE("compile_batch compiles alone what cannot share a unit, and says why",
          "[compiler][batch]") {
  ktune::test::TempDir dir;
  HostCompiler compiler;

  SECTION("#pragma once, a local header: compiled alone under the plain entry name") {
    dir.write("scale/local.hpp", "#define LOCAL 0\n");
    for (const std::string head : {"#pragma once\n", "#include \"local.hpp\"\n"}) {
      INFO(head);
      const auto jobs = scale_jobs(dir, {1, 3}, head + k_scale_source);
      const auto outcomes = compiler.compile_batch(jobs);
      for (const auto& outcome : outcomes) {
        INFO(outcome.log);
        REQUIRE(outcome.status == CandidateStatus::ok);
        CHECK(outcome.batch_size == 1);
        CHECK(outcome.entry_symbol.empty());
        CHECK_THAT(outcome.batch_error, Catch::StartsWith("the configs do not batch: "));
      }
      CHECK(run_scale(outcomes[0]) == 10);
      CHECK(run_scale(outcomes[1]) == 130);
    }
  }

  SECTION("what the hoisted headers read may not depend on the config") {
    const auto defined_first = compiler.compile_batch(
        scale_jobs(dir, {1, 3}, "#define _GNU_SOURCE\n" + std::string(k_scale_source)));
    for (const auto& outcome : defined_first) {
      INFO(outcome.log);
      CHECK(outcome.status == CandidateStatus::ok);
      CHECK(outcome.batch_size == 1);
      CHECK_THAT(outcome.batch_error, Catch::Contains("defines _GNU_SOURCE before an #include"));
    }
    // A tunable's default before the includes is no obstacle.
    const auto with_default = compiler.compile_batch(
        scale_jobs(dir, {1, 3}, "#ifndef SCALE\n#define SCALE 1\n#endif\n" + std::string(k_scale_source)));
    CHECK(with_default[0].batch_size == 2);
    CHECK(run_scale(with_default[1]) == 130);
  }

  SECTION("a batch whose shared object runs code when loaded: every config alone") {
    const auto jobs = scale_jobs(dir, {1, 3}, "#include <vector>\n" + std::string(k_scale_source) +
                                                  "static std::vector<int> table(SCALE);\n");
    const auto outcomes = compiler.compile_batch(jobs);
    for (const auto& outcome : outcomes) {
      INFO(outcome.log);
      REQUIRE(outcome.status == CandidateStatus::ok);
      CHECK(outcome.batch_size == 1);
      CHECK_THAT(outcome.batch_error, Catch::Contains("runs code when loaded"));
    }
    CHECK(run_scale(outcomes[1]) == 130);
    CHECK(files_under(jobs[0].cache_dir).size() == 2);
  }

  SECTION("a batch that fails though each config compiles alone: a second extern \"C\" function") {
    const auto jobs =
        scale_jobs(dir, {1, 2, 3}, std::string(k_scale_source) + "extern \"C\" int helper() { return SCALE; }\n");
    const auto outcomes = compiler.compile_batch(jobs);
    for (const auto& outcome : outcomes) {
      INFO(outcome.log);
      REQUIRE(outcome.status == CandidateStatus::ok);
      CHECK(outcome.batch_size == 1);
      CHECK_THAT(outcome.batch_error, Catch::Contains("a batch of 3 configs failed though each "
                                                      "compiles without the others"));
      CHECK_THAT(outcome.batch_error, Catch::Contains("helper"));
      CHECK(outcome.entry_symbol == "scale_k" + outcome.cache_key.substr(0, 16));
    }
    CHECK(run_scale(outcomes[2]) == 130);
  }
}
