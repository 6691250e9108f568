#include "worker/standalone.hpp"

#include "bench/host_runner.hpp"
#include "compiler/host_compiler.hpp"
#include "jobs/bench_job.hpp"
#include "jobs/compile_job.hpp"
#include "worker/worker.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <poll.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace ktune {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// What one step (a compile or a run) in its own process ended with.
struct StepResult {
  enum class End { outcome, crash, lost, timeout } end = End::outcome;
  json outcome;
  std::string reason;
};

std::string signal_text(int sig) {
  const char* name = ::sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
}

// Runs `work` in a forked child (its own process group, cores off, the address-space cap), which
// writes its outcome JSON to a pipe; kills the group after `deadline_s` seconds.
StepResult run_step(const std::function<json()>& work, double deadline_s, long long memory_mb,
                    const std::string& doing) {
  int fds[2];
  if (::pipe(fds) != 0) return {StepResult::End::lost, {}, std::string("pipe: ") + std::strerror(errno)};
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return {StepResult::End::lost, {}, std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) {
    ::close(fds[0]);
    ::setpgid(0, 0);
    (void)limit_candidate_process(memory_mb);  // as a worker would run it; a failure is not fatal
    json out;
    try {
      out = work();
    } catch (const std::exception& e) {
      out = json{{"status", "runtime_error"}, {"reason", e.what()}};
    }
    std::string text = out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    const char* p = text.data();
    std::size_t left = text.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  ::setpgid(pid, pid);
  std::string text;
  bool timed_out = false;
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<long long>(std::ceil(deadline_s * 1000)));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          give_up - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  const long long deadline_ms = static_cast<long long>(std::ceil(deadline_s * 1000));
  if (timed_out) {
    return {StepResult::End::timeout, {},
            "killed after its " + std::to_string(deadline_ms) + " ms deadline while " + doing};
  }
  if (WIFSIGNALED(status)) {
    return {StepResult::End::crash, {},
            "worker killed by " + signal_text(WTERMSIG(status)) + " while " + doing};
  }
  if (text.empty() || text.back() != '\n') {
    return {StepResult::End::lost, {},
            "worker exited with status " + std::to_string(WEXITSTATUS(status)) + " while " + doing};
  }
  StepResult result;
  result.outcome = json::parse(text, nullptr, false);
  if (result.outcome.is_discarded()) return {StepResult::End::lost, {}, "unreadable outcome"};
  return result;
}

std::string absolute(const std::string& path) {
  if (path.empty()) return path;
  return fs::absolute(path).lexically_normal().string();
}

void absolute_paths(CompileJob& job) {
  job.source_path = absolute(job.source_path);
  for (auto& dir : job.include_dirs) dir = absolute(dir);
  job.cache_dir = absolute(job.cache_dir);
}

int finish(const std::string& status, const std::string& detail) {
  std::printf("status: %s%s%s\n", status.c_str(), detail.empty() ? "" : " ", detail.c_str());
  return status == "ok" ? 0 : 1;
}

// A step that ended without an outcome, as the daemon files it.
int step_failed(const StepResult& step, const char* timeout_status) {
  switch (step.end) {
  case StepResult::End::crash: return finish("crash", "(" + step.reason + ")");
  case StepResult::End::timeout: return finish(timeout_status, "(" + step.reason + ")");
  default: return finish("worker_lost", "(" + step.reason + ")");
  }
}

// Compiles one job in its own process; nullopt after printing the failure's status.
std::optional<CompileOutcome> compile_step(const CompileJob& job, double timeout_s,
                                           long long memory_mb, int& exit_code,
                                           const char* what) {
  const StepResult step = run_step(
      [&] { return HostCompiler().compile(job).to_json(); }, timeout_s, memory_mb, "compiling");
  if (step.end != StepResult::End::outcome) {
    std::printf("%s: no outcome\n", what);
    exit_code = step_failed(step, "compile_timeout");
    return std::nullopt;
  }
  auto outcome = CompileOutcome::from_json(step.outcome);
  if (!outcome) {
    exit_code = finish("worker_lost", "(" + outcome.error().message + ")");
    return std::nullopt;
  }
  std::printf("%s: %s (%.0f ms%s)\n", what, std::string(to_string(outcome->status)).c_str(),
              outcome->compile_ms, outcome->cached ? ", cached" : "");
  if (outcome->status != CandidateStatus::ok) {
    if (!outcome->log.empty()) std::printf("--- compiler log ---\n%s\n---\n", outcome->log.c_str());
    exit_code = finish(std::string(to_string(outcome->status)), "");
    return std::nullopt;
  }
  return std::move(outcome).value();
}

} // namespace

int run_repro_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "ktune-worker: cannot read %s\n", path.c_str());
    return 2;
  }
  const json repro = json::parse(in, nullptr, false);
  if (repro.is_discarded() || !repro.is_object() || !repro.contains("compile") ||
      !repro.contains("bench")) {
    std::fprintf(stderr, "ktune-worker: %s is not a repro file (JSON with compile and bench)\n",
                 path.c_str());
    return 2;
  }
  auto compile = CompileJob::from_json(repro.at("compile"));
  auto bench = BenchJob::from_json(repro.at("bench"));
  if (!compile || !bench) {
    std::fprintf(stderr, "ktune-worker: %s: %s\n", path.c_str(),
                 (!compile ? compile.error() : bench.error()).message.c_str());
    return 2;
  }
  if (compile->language != "cpp") {
    std::fprintf(stderr, "ktune-worker: --run-repro runs host (cpp) candidates only\n");
    return 2;
  }
  const double compile_timeout_s = repro.value("compile_timeout_s", 120.0);
  const double bench_timeout_s = repro.value("bench_timeout_s", 600.0);
  const long long memory_mb = repro.value("memory_mb", 0LL);
  absolute_paths(*compile);
  for (auto& arg : bench->args) arg.expected = absolute(arg.expected);
  int exit_code = 0;

  std::string reference_entry;  // the reference compile's entry_symbol
  if (repro.contains("reference_compile") && repro.at("reference_compile").is_object()) {
    auto reference = CompileJob::from_json(repro.at("reference_compile"));
    if (!reference) {
      std::fprintf(stderr, "ktune-worker: %s: %s\n", path.c_str(), reference.error().message.c_str());
      return 2;
    }
    absolute_paths(*reference);
    auto ref = compile_step(*reference, compile_timeout_s, memory_mb, exit_code, "reference compile");
    if (!ref) {
      std::printf("(the reference failed: ktuned fails such a job; no candidate status)\n");
      return exit_code;
    }
    bench->reference_path = ref->artifact_path;
    reference_entry = ref->entry_symbol;
  } else {
    bench->reference_path.clear();
  }
  auto candidate = compile_step(*compile, compile_timeout_s, memory_mb, exit_code, "compile");
  if (!candidate) return exit_code;
  bench->artifact_path = candidate->artifact_path;
  use_compiled_entries(*bench, candidate->entry_symbol, reference_entry);

  const StepResult step = run_step(
      [&] { return HostRunner().run(*bench).to_json(); }, bench_timeout_s, memory_mb,
      "benchmarking");
  if (step.end != StepResult::End::outcome) return step_failed(step, "timeout");
  auto outcome = BenchOutcome::from_json(step.outcome);
  if (!outcome) return finish("worker_lost", "(" + outcome.error().message + ")");
  std::printf("outcome: %s\n", step.outcome.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  if (outcome->status == CandidateStatus::ok) {
    char detail[128];
    std::snprintf(detail, sizeof detail, "median %.6g ms (n=%lld)", outcome->stats.median_ms,
                  static_cast<long long>(outcome->stats.n));
    return finish("ok", detail);
  }
  return finish(std::string(to_string(outcome->status)),
                outcome->reason.empty() ? "" : "(" + outcome->reason + ")");
}

} // namespace ktune
