#include "bench/host_runner.hpp"
#include "bench/shared_library.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <thread>

#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <utility>

using namespace ktune;

namespace {

// Every test kernel also exports probe_* counters, read by tests that keep the library loaded
// (a second dlopen of the same path shares the runner's handle and its globals).
const std::string k_vadd_source = R"(
#include <cstdint>
static long g_calls = 0;
static void* g_last_x = nullptr;
extern "C" long probe_calls() { return g_calls; }
extern "C" void* probe_last_x() { return g_last_x; }
extern "C" void vadd(void** args) {
  const float* x = static_cast<const float*>(args[0]);
  const float* y = static_cast<const float*>(args[1]);
  float* z = static_cast<float*>(args[2]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[3]);
  ++g_calls;
  g_last_x = args[0];
  for (std::int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
#ifdef WRONG
  z[17] += 1.0f;
#endif
#ifdef OVERRUN
  z[n] = 0.0f;
#endif
#ifdef WRITE_INPUT
  const_cast<float*>(y)[3] = 42.0f;
#endif
#ifdef LATE_WRITE_INPUT
  if (g_calls == 3) const_cast<float*>(y)[7] = 42.0f;  // the checked run is call 1
#endif
#ifdef FAR_OVERRUN
  z[n + n / 2] = 1.0f;  // half a buffer-length past Z's end
#endif
}
)";

// In place: x[i] += 1 over X initialised with init = "index"; counts calls that did not see
// fresh inputs.
const std::string k_inc_source = R"(
#include <cstdint>
static long g_calls = 0;
static long g_stale = 0;
extern "C" long probe_calls() { return g_calls; }
extern "C" long probe_stale() { return g_stale; }
extern "C" void inc(void** args) {
  float* x = static_cast<float*>(args[0]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[1]);
  ++g_calls;
  if (x[0] != 0.0f || x[n - 1] != static_cast<float>(n - 1)) ++g_stale;
  for (std::int64_t i = 0; i < n; ++i) x[i] += 1.0f;
}
)";

const std::string k_triple_source = R"(
#include <cstdint>
extern "C" void triple(void** args) {
  const std::int32_t* x = static_cast<const std::int32_t*>(args[0]);
  std::int32_t* z = static_cast<std::int32_t*>(args[1]);
  const std::int32_t n = *static_cast<const std::int32_t*>(args[2]);
  const double scale = *static_cast<const double*>(args[3]);
  for (std::int32_t i = 0; i < n; ++i) z[i] = static_cast<std::int32_t>(x[i] * scale);
#ifdef WRONG
  z[5] += 1;
#endif
}
)";

// About 5 ms of dependent floating-point work per launch at iters = 2000000 (longer than a
// scheduler time slice, so a thread sharing its core preempts most launches), touching no
// memory: its time is CPU time, whatever else the machine does -- unless it is preempted.
const std::string k_spin_source = R"(
#include <cstdint>
extern "C" void spin(void** args) {
  float* z = static_cast<float*>(args[0]);
  const std::int64_t iters = *static_cast<const std::int64_t*>(args[1]);
  float acc = 0.0f;
  for (std::int64_t i = 0; i < iters; ++i) acc = acc * 0.999f + 1.0f;
  z[0] = acc;
}
)";

// Builds test kernels with the system compiler into one directory per test process, each on
// first use.
class TestKernels {
public:
  static TestKernels& instance() {
    static TestKernels kernels;
    return kernels;
  }

  std::string path(const std::string& name) {
    if (const auto it = m_built.find(name); it != m_built.end()) return it->second;
    static const std::map<std::string, std::pair<const std::string*, std::string>> k_recipes{
        {"vadd", {&k_vadd_source, ""}},
        {"vadd_ref", {&k_vadd_source, ""}},
        {"vadd_wrong", {&k_vadd_source, "-DWRONG"}},
        {"vadd_overrun", {&k_vadd_source, "-DOVERRUN"}},
        {"vadd_write_input", {&k_vadd_source, "-DWRITE_INPUT"}},
        {"vadd_late_write_input", {&k_vadd_source, "-DLATE_WRITE_INPUT"}},
        {"vadd_far_overrun", {&k_vadd_source, "-DFAR_OVERRUN"}},
        {"inc", {&k_inc_source, ""}},
        {"inc_ref", {&k_inc_source, ""}},
        {"triple", {&k_triple_source, ""}},
        {"triple_ref", {&k_triple_source, ""}},
        {"triple_wrong", {&k_triple_source, "-DWRONG"}},
        {"spin", {&k_spin_source, ""}},
    };
    const auto& [source, flags] = k_recipes.at(name);
    const auto source_path = m_dir.write(name + ".cpp", *source);
    const std::string artifact = (m_dir.path() / (name + ".so")).string();
    const char* cxx = std::getenv("KTUNE_CXX");
    const std::string command = std::string(cxx != nullptr && *cxx != '\0' ? cxx : "c++") +
                                " -O2 -shared -fPIC " + flags + " -o '" + artifact + "' '" +
                                source_path.string() + "'";
    INFO(command);
    REQUIRE(std::system(command.c_str()) == 0);
    m_built.emplace(name, artifact);
    return artifact;
  }

private:
  test::TempDir m_dir;
  std::map<std::string, std::string> m_built;
};

std::string kernel(const std::string& name) { return TestKernels::instance().path(name); }

MeasureSettings fast_settings() {
  MeasureSettings s;
  s.min_samples = 3;
  s.max_samples = 200;
  s.min_time_s = 0;
  s.max_time_s = 0.2;
  s.warmup_ms = 1;
  s.flush_cache = false;
  return s;
}

BenchJob vadd_job(const std::string& candidate, const std::string& reference,
                  std::int64_t n = 4096) {
  BenchJob job;
  job.kernel = "vadd";
  job.entry = "vadd";
  job.artifact_path = candidate;
  job.reference_path = reference;
  job.shape = "N=" + std::to_string(n);
  job.args = {
      BenchArg{"X", "in", "f32", n, "uniform", 0},
      BenchArg{"Y", "in", "f32", n, "uniform", 0},
      BenchArg{"Z", "out", "f32", n, "zero", 0},
      BenchArg{"N", "scalar", "i64", 0, "uniform", static_cast<double>(n)},
  };
  job.flops = static_cast<double>(n);
  job.bytes = 12.0 * static_cast<double>(n);
  job.settings = fast_settings();
  return job;
}

BenchJob inc_job(const std::string& candidate, const std::string& reference, bool inplace) {
  constexpr std::int64_t n = 1000;
  BenchJob job;
  job.kernel = "inc";
  job.entry = "inc";
  job.artifact_path = candidate;
  job.reference_path = reference;
  job.shape = "N=1000";
  job.args = {
      BenchArg{"X", "inout", "f32", n, "index", 0},
      BenchArg{"N", "scalar", "i64", 0, "uniform", static_cast<double>(n)},
  };
  job.inplace = inplace;
  job.settings = fast_settings();
  return job;
}

BenchJob triple_job(const std::string& candidate, const std::string& reference) {
  BenchJob job;
  job.kernel = "triple";
  job.entry = "triple";
  job.artifact_path = candidate;
  job.reference_path = reference;
  job.shape = "N=64";
  job.args = {
      BenchArg{"X", "in", "i32", 64, "uniform", 0},
      BenchArg{"Z", "out", "i32", 64, "zero", 0},
      BenchArg{"N", "scalar", "i32", 0, "uniform", 64},
      BenchArg{"scale", "scalar", "f64", 0, "uniform", 3.0},
  };
  job.settings = fast_settings();
  return job;
}

long probe_long(const SharedLibrary& library, const std::string& name) {
  auto symbol = library.symbol(name);
  REQUIRE(symbol.ok());
  return reinterpret_cast<long (*)()>(symbol.value())();
}

void* probe_pointer(const SharedLibrary& library, const std::string& name) {
  auto symbol = library.symbol(name);
  REQUIRE(symbol.ok());
  return reinterpret_cast<void* (*)()>(symbol.value())();
}

SharedLibrary open_library(const std::string& path) {
  auto library = SharedLibrary::open(path);
  REQUIRE(library.ok());
  return std::move(library).value();
}

void check_sane_stats(const SampleStats& s) {
  CHECK(s.min_ms > 0);
  CHECK(s.min_ms <= s.q1_ms);
  CHECK(s.q1_ms <= s.median_ms);
  CHECK(s.median_ms <= s.q3_ms);
  CHECK(s.q3_ms <= s.max_ms);
  CHECK(s.mean_ms >= s.min_ms);
  CHECK(s.mean_ms <= s.max_ms);
  CHECK(s.stddev_ms >= 0);
}

} // namespace

TEST_CASE("HostRunner measures a correct candidate", "[bench][host_runner]") {
  HostRunner runner;
  const BenchJob job = vadd_job(kernel("vadd"), kernel("vadd_ref"));
  const BenchOutcome outcome = runner.run(job);
  INFO(outcome.reason);
  REQUIRE(outcome.status == CandidateStatus::ok);
  CHECK(outcome.reason.empty());
  CHECK(outcome.stats.n >= 3);
  CHECK(outcome.stats.n <= 200);
  check_sane_stats(outcome.stats);
  CHECK(outcome.gflops == Approx(job.flops / (outcome.stats.median_ms * 1e6)));
  CHECK(outcome.gbps == Approx(job.bytes / (outcome.stats.median_ms * 1e6)));

  SECTION("the same job through JSON gives the same verdict") {
    auto decoded = BenchJob::from_json(job.to_json());
    REQUIRE(decoded.ok());
    CHECK(runner.run(decoded.value()).status == CandidateStatus::ok);
  }

  SECTION("integer outputs and scalars of several dtypes") {
    const BenchOutcome triple = runner.run(triple_job(kernel("triple"), kernel("triple_ref")));
    INFO(triple.reason);
    CHECK(triple.status == CandidateStatus::ok);
    CHECK(triple.gflops == 0);  // no flops declared
  }
}

TEST_CASE("HostRunner reports a wrong result as mismatch", "[bench][host_runner]") {
  HostRunner runner;

  SECTION("floats name the element, tolerances and count") {
    const BenchOutcome outcome = runner.run(vadd_job(kernel("vadd_wrong"), kernel("vadd_ref")));
    CHECK(outcome.status == CandidateStatus::mismatch);
    CHECK_THAT(outcome.reason, Catch::StartsWith("Z[17]: got "));
    CHECK_THAT(outcome.reason, Catch::Contains(", expected "));
    CHECK_THAT(outcome.reason, Catch::Contains("(rtol 0.001, atol 1e-05)"));
    CHECK_THAT(outcome.reason, Catch::EndsWith("; 1 of 4096 elements differ"));
    CHECK(outcome.stats.n == 0);
  }

  SECTION("integers must match exactly") {
    const BenchOutcome outcome =
        runner.run(triple_job(kernel("triple_wrong"), kernel("triple_ref")));
    CHECK(outcome.status == CandidateStatus::mismatch);
    CHECK_THAT(outcome.reason, Catch::StartsWith("Z[5]: got "));
    CHECK_THAT(outcome.reason, Catch::Contains("(exact)"));
  }

  SECTION("without a reference the output is not checked") {
    const BenchOutcome outcome = runner.run(vadd_job(kernel("vadd_wrong"), ""));
    CHECK(outcome.status == CandidateStatus::ok);
  }

  SECTION("a write past the end of a buffer is caught, and the next candidate is clean") {
    const BenchOutcome overrun = runner.run(vadd_job(kernel("vadd_overrun"), kernel("vadd_ref")));
    CHECK(overrun.status == CandidateStatus::mismatch);
    CHECK_THAT(overrun.reason, Catch::Contains("wrote past buffer end of 'Z'"));
    const BenchOutcome next = runner.run(vadd_job(kernel("vadd"), kernel("vadd_ref")));
    INFO(next.reason);
    CHECK(next.status == CandidateStatus::ok);
  }
}

TEST_CASE("HostRunner blames the candidate that changes an input, restores it, and the next "
          "candidate is clean",
          "[bench][host_runner]") {
  HostRunner runner;
  SECTION("in the checked run") {
    const BenchOutcome wrote =
        runner.run(vadd_job(kernel("vadd_write_input"), kernel("vadd_ref")));
    CHECK(wrote.status == CandidateStatus::mismatch);
    CHECK_THAT(wrote.reason, Catch::StartsWith("wrote outside its outputs: input 'Y' changed in "
                                               "its checked run (1 of 4096 elements; Y[3] was "));
    CHECK_THAT(wrote.reason, Catch::EndsWith(", became 42)"));
  }
  SECTION("on a later run, while it was sampled") {
    const BenchOutcome wrote =
        runner.run(vadd_job(kernel("vadd_late_write_input"), kernel("vadd_ref")));
    CHECK(wrote.status == CandidateStatus::mismatch);
    CHECK_THAT(wrote.reason, Catch::StartsWith("wrote outside its outputs: input 'Y' changed "
                                               "while it was sampled (1 of 4096 elements; Y[7]"));
  }
  const BenchOutcome next = runner.run(vadd_job(kernel("vadd"), kernel("vadd_ref")));
  INFO(next.reason);
  CHECK(next.status == CandidateStatus::ok);
}

TEST_CASE("HostRunner: a write half a buffer-length past an output faults in its guard page, "
          "and the worker's last words name the buffer",
          "[bench][host_runner]") {
  const BenchJob job = vadd_job(kernel("vadd_far_overrun"), kernel("vadd_ref"));
  int err[2];
  REQUIRE(::pipe(err) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(err[1], STDERR_FILENO);
    ::close(err[0]);
    // Catch's own fatal-signal handler stays out of the child: the default death is the verdict.
    ::signal(SIGSEGV, SIG_DFL);
    ::signal(SIGBUS, SIG_DFL);
    HostRunner runner;
    (void)runner.run(job);
    ::_exit(0);  // survived: the test fails below
  }
  ::close(err[1]);
  std::string said;
  char chunk[512];
  for (ssize_t n; (n = ::read(err[0], chunk, sizeof chunk)) > 0;) said.append(chunk, static_cast<std::size_t>(n));
  ::close(err[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO(said);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
  CHECK_THAT(said, Catch::Contains("ktune-worker: wrote outside its buffers: SIGSEGV in the guard "
                                   "page 8192 bytes past the end of output 'Z'"));
}

TEST_CASE("HostRunner load failures are runtime_error", "[bench][host_runner]") {
  HostRunner runner;

  SECTION("missing entry symbol") {
    BenchJob job = vadd_job(kernel("vadd"), kernel("vadd_ref"));
    job.entry = "no_such_entry";
    const BenchOutcome outcome = runner.run(job);
    CHECK(outcome.status == CandidateStatus::runtime_error);
    CHECK_THAT(outcome.reason, Catch::Contains("no_such_entry"));
    CHECK_THAT(outcome.reason, Catch::Contains(kernel("vadd")));
  }

  SECTION("missing artifact") {
    test::TempDir dir;
    const std::string missing = dir.str() + "/missing.so";
    const BenchOutcome outcome = runner.run(vadd_job(missing, kernel("vadd_ref")));
    CHECK(outcome.status == CandidateStatus::runtime_error);
    CHECK_THAT(outcome.reason, Catch::Contains("cannot load " + missing));
  }

  SECTION("an artifact that is not a shared object") {
    test::TempDir dir;
    const std::string bogus = dir.write("bogus.so", "not an ELF file").string();
    const BenchOutcome outcome = runner.run(vadd_job(bogus, ""));
    CHECK(outcome.status == CandidateStatus::runtime_error);
    CHECK_THAT(outcome.reason, Catch::Contains("cannot load"));
  }

  SECTION("missing reference") {
    test::TempDir dir;
    const BenchOutcome outcome = runner.run(vadd_job(kernel("vadd"), dir.str() + "/ref.so"));
    CHECK(outcome.status == CandidateStatus::runtime_error);
    CHECK_THAT(outcome.reason, Catch::StartsWith("reference: cannot load"));
  }
}

TEST_CASE("HostRunner reuses buffers and reference outputs per key", "[bench][host_runner]") {
  HostRunner runner;
  const SharedLibrary candidate = open_library(kernel("vadd"));
  const SharedLibrary reference = open_library(kernel("vadd_ref"));
  BenchJob job = vadd_job(kernel("vadd"), kernel("vadd_ref"));
  const long reference_before = probe_long(reference, "probe_calls");

  REQUIRE(runner.run(job).status == CandidateStatus::ok);
  void* first_x = probe_pointer(candidate, "probe_last_x");
  CHECK(reinterpret_cast<std::uintptr_t>(first_x) % 64 == 0);
  CHECK(probe_long(reference, "probe_calls") - reference_before == 1);

  REQUIRE(runner.run(job).status == CandidateStatus::ok);
  CHECK(probe_pointer(candidate, "probe_last_x") == first_x);
  CHECK(probe_long(reference, "probe_calls") - reference_before == 1);  // outputs kept

  SECTION("another seed is another key: the reference runs again") {
    job.settings.seed += 1;
    REQUIRE(runner.run(job).status == CandidateStatus::ok);
    CHECK(probe_long(reference, "probe_calls") - reference_before == 2);
  }

  SECTION("every launch is counted: check run, warm-up and samples") {
    const long before = probe_long(candidate, "probe_calls");
    const BenchOutcome outcome = runner.run(job);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(probe_long(candidate, "probe_calls") - before >= 2 + static_cast<long>(outcome.stats.n));
  }
}

TEST_CASE("HostRunner gives in-place kernels fresh inputs for every sample",
          "[bench][host_runner]") {
  HostRunner runner;
  const SharedLibrary candidate = open_library(kernel("inc"));
  const long calls_before = probe_long(candidate, "probe_calls");
  const long stale_before = probe_long(candidate, "probe_stale");

  SECTION("inplace job: every launch sees the initial contents") {
    const BenchOutcome outcome = runner.run(inc_job(kernel("inc"), kernel("inc_ref"), true));
    INFO(outcome.reason);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.stats.n >= 3);
    CHECK(probe_long(candidate, "probe_calls") - calls_before >=
          1 + static_cast<long>(outcome.stats.n));
    CHECK(probe_long(candidate, "probe_stale") == stale_before);

    // A second candidate on the same buffers is checked against fresh inputs as well.
    const BenchOutcome again = runner.run(inc_job(kernel("inc"), kernel("inc_ref"), true));
    CHECK(again.status == CandidateStatus::ok);
    CHECK(probe_long(candidate, "probe_stale") == stale_before);
  }

  SECTION("without inplace the check still passes, but later launches see their own output") {
    const BenchOutcome outcome = runner.run(inc_job(kernel("inc"), kernel("inc_ref"), false));
    INFO(outcome.reason);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(probe_long(candidate, "probe_stale") > stale_before);
  }
}

TEST_CASE("HostRunner stopping criterion", "[bench][host_runner]") {
  HostRunner runner;
  BenchJob job = vadd_job(kernel("vadd"), kernel("vadd_ref"), 256);

  SECTION("max_samples caps a run that never converges") {
    job.settings.target_rsd = 0;    // rsd < 0 never holds
    job.settings.target_error = 0;  // nor does a median interval of width <= 0
    job.settings.max_samples = 5;
    job.settings.max_time_s = 10;
    const BenchOutcome outcome = runner.run(job);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.stats.n == 5);
  }

  SECTION("a converged run stops at min_samples") {
    job.settings.min_samples = 1;
    job.settings.target_rsd = 1e9;
    job.settings.max_time_s = 10;
    const BenchOutcome outcome = runner.run(job);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.stats.n == 1);
  }

  SECTION("with cache flushing (a small flush buffer keeps the test fast)") {
    HostRunner flushing(std::size_t{1} << 20);
    job.settings.flush_cache = true;
    job.settings.target_rsd = 0;
    job.settings.max_samples = 3;
    job.settings.max_time_s = 10;
    const BenchOutcome outcome = flushing.run(job);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.stats.n == 3);
    check_sane_stats(outcome.stats);
  }

  SECTION("max_time_s ends a run that would otherwise take a million samples") {
    HostRunner flushing(std::size_t{1} << 20);
    job.settings.flush_cache = true;
    job.settings.target_rsd = 0;
    job.settings.max_samples = 1'000'000;
    job.settings.max_time_s = 0.02;
    const BenchOutcome outcome = flushing.run(job);
    REQUIRE(outcome.status == CandidateStatus::ok);
    CHECK(outcome.stats.n >= 3);  // min_samples is honoured before the wall-clock cap
    CHECK(outcome.stats.n < 1'000'000);
  }
}

namespace {

// Pins the calling thread to one CPU for its lifetime, restoring its affinity afterwards.
class PinnedToCpu {
public:
  explicit PinnedToCpu(int cpu) {
    REQUIRE(sched_getaffinity(0, sizeof(m_saved), &m_saved) == 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  }
  ~PinnedToCpu() { sched_setaffinity(0, sizeof(m_saved), &m_saved); }
  PinnedToCpu(const PinnedToCpu&) = delete;
  PinnedToCpu& operator=(const PinnedToCpu&) = delete;

private:
  cpu_set_t m_saved{};
};

// A thread spinning on `cpu` until destroyed: the other work a busy machine runs on that core.
class CpuHog {
public:
  explicit CpuHog(int cpu) : m_thread([this, cpu] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    m_started = true;
    volatile std::uint64_t sink = 0;
    while (!m_stop.load(std::memory_order_relaxed)) sink = sink + 1;
  }) {
    while (!m_started) std::this_thread::yield();
  }
  ~CpuHog() {
    m_stop = true;
    m_thread.join();
  }
  CpuHog(const CpuHog&) = delete;
  CpuHog& operator=(const CpuHog&) = delete;

private:
  std::atomic<bool> m_stop{false};
  std::atomic<bool> m_started{false};
  std::thread m_thread;
};

BenchJob spin_job(const std::string& candidate) {
  BenchJob job;
  job.kernel = "spin";
  job.entry = "spin";
  job.artifact_path = candidate;
  job.shape = "ITERS=2000000";
  job.args = {
      BenchArg{"Z", "out", "f32", 1, "zero", 0},
      BenchArg{"ITERS", "scalar", "i64", 0, "uniform", 2000000},
  };
  job.settings = fast_settings();
  job.settings.min_samples = 20;  // ~80 ms of samples: many time slices, the hog gets its share
  job.settings.max_time_s = 0.3;
  job.settings.prune_after = 3;
  return job;
}

} // namespace

TEST_CASE("HostRunner retakes preempted samples: a candidate sharing its core with a CPU hog is "
          "not pruned",
          "[bench][host_runner]") {
  const int cpu = sched_getcpu();
  REQUIRE(cpu >= 0);
  PinnedToCpu pinned(cpu);
  HostRunner runner;
  BenchJob job = spin_job(kernel("spin"));

  // Alone on its core: the candidate's own time.
  const BenchOutcome alone = runner.run(job);
  REQUIRE(alone.status == CandidateStatus::ok);
  const double own_ms = alone.stats.median_ms;
  INFO("alone: median " << own_ms << " ms, " << alone.retaken << " retaken");
  REQUIRE(own_ms > 0);

  // With a hog pinned to the same core, every sample risks being preempted (the hog takes
  // half the core): sampled naively, the first three medians come out near 2x and a threshold
  // of 1.5x prunes it. Preempted samples are retaken and never enter the prune test.
  // The scheduler decides when the hog runs: a run in which it happened never to preempt a
  // sample proves nothing, so the loaded run is repeated (at most 5 times) until one saw a
  // preemption; none of them may be pruned.
  job.prune_above_ms = 1.5 * own_ms;
  CpuHog hog(cpu);
  std::int64_t retaken = 0;
  for (int attempt = 1; attempt <= 5 && retaken == 0; ++attempt) {
    const BenchOutcome loaded = runner.run(job);
    INFO("with the hog, run " << attempt << ": median " << loaded.stats.median_ms << " ms, n "
         << loaded.stats.n << ", " << loaded.retaken << " retaken, stop " << loaded.stop);
    REQUIRE(loaded.status == CandidateStatus::ok);
    CHECK_FALSE(loaded.pruned);
    CHECK(loaded.stop != "pruned");
    retaken = loaded.retaken;
  }
  CHECK(retaken > 0);
}
