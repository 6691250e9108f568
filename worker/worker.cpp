#include "worker/worker.hpp"

#include "core/shared_lock_file.hpp"
#include "core/unique_fd.hpp"

#include "bench/host_device.hpp"
#include "bench/host_runner.hpp"
#include "compiler/host_compiler.hpp"
#include "compiler/subprocess.hpp"
#include "core/protocol.hpp"
#include "jobs/artifact_cache.hpp"
#include "worker/ab_rounds.hpp"

#ifdef KTUNE_HAVE_CUDA
#include "bench/cuda_device.hpp"
#include "bench/cuda_runner.hpp"
#include "compiler/nvrtc_compiler.hpp"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <new>
#include <exception>
#include <fcntl.h>
#include <memory>
#include <optional>
#include <sched.h>
#include <string>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

namespace ktune {
namespace {

#ifdef KTUNE_HAVE_CUDA
constexpr bool k_cuda_backend = true;
#else
constexpr bool k_cuda_backend = false;
#endif

using nlohmann::json;

Error errno_error(const std::string& step) {
  return make_error(ErrorCode::internal, step + ": " + std::strerror(errno));
}

// Writes all of `text` plus a newline; false when the socket fails.
bool write_line(int fd, std::string text) {
  text.push_back('\n');
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

// Compiler logs may end in a multi-byte sequence cut at the 8 KiB limit: replace, never throw.
std::string dump(const json& message) {
  return message.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Whether a reply is the worker's last: the daemon must not send it anything more.
enum class Exiting { no, yes };

std::string ok_reply(const json& id, const json& outcome, Exiting exiting = Exiting::no) {
  json reply{{"id", id}, {"ok", true}, {"outcome", outcome}};
  if (exiting == Exiting::yes) reply["exiting"] = true;
  return dump(reply);
}

#ifdef KTUNE_HAVE_CUDA
// The CUDA driver reserves a large virtual address range at cuInit, which fails under
// --memory-mb's RLIMIT_AS. The limit is a soft one (prepare_worker_process), so a worker about
// to benchmark on CUDA lifts it back to the hard limit: the address-space cap applies to CPU
// candidates only, and a bench worker that has run a CUDA candidate runs without it.
enum class Say { yes, no };
void lift_address_space_limit_for_cuda(Say say = Say::yes) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == limit.rlim_max) return;
  const rlim_t soft = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_AS, &limit) != 0) {
    std::fprintf(stderr, "ktune-worker: cannot lift RLIMIT_AS for CUDA: %s\n", std::strerror(errno));
    return;
  }
  if (say == Say::no) return;
  std::fprintf(stderr,
               "ktune-worker: --memory-mb %llu lifted: CUDA reserves more address space than such a "
               "limit allows (docs/gpu.md)\n",
               static_cast<unsigned long long>(soft >> 20));
}
#endif

json device_json(const DeviceInfo& d) {
  json out{{"name", d.name}, {"fingerprint", d.fingerprint}, {"details", d.details}};
  if (!d.uuid.empty()) out["uuid"] = d.uuid;
  return out;
}

// {"devices":[..]} or {"cuda_error":{"code","message"}}: the CUDA part of a `devices` reply, as
// this process sees it.
json cuda_devices_json() {
#ifdef KTUNE_HAVE_CUDA
  if (auto listed = list_cuda_devices()) {
    json devices = json::array();
    for (const auto& d : *listed) devices.push_back(device_json(d));
    return {{"devices", std::move(devices)}};
  } else {
    return {{"cuda_error", {{"code", std::string(to_string(listed.error().code))}, {"message", listed.error().message}}}};
  }
#else
  return {{"cuda_error",
           {{"code", std::string(to_string(ErrorCode::no_device))},
            {"message", "this ktune-worker was built without the CUDA backend (no CUDA toolkit at "
                        "configure time)"}}}};
#endif
}

// The CUDA part of a `devices` reply from a child `ktune-worker --list-cuda-devices`, so that
// neither this worker's RLIMIT_AS (--memory-mb, under which cuInit fails) nor the driver's
// state stays behind in a compile worker.
json cuda_devices_from_child() {
  constexpr std::size_t k_max_output = std::size_t{1} << 20;
  auto ran = run_captured({"/proc/self/exe", "--list-cuda-devices"}, k_max_output);
  auto failed = [](const std::string& why) {
    return json{{"cuda_error",
                 {{"code", std::string(to_string(ErrorCode::no_device))},
                  {"message", "the CUDA device probe (ktune-worker --list-cuda-devices) " + why}}}};
  };
  if (!ran) return failed("could not start: " + ran.error().message);
  std::string last = ran->output;
  while (!last.empty() && last.back() == '\n') last.pop_back();
  if (const std::size_t newline = last.rfind('\n'); newline != std::string::npos) last.erase(0, newline + 1);
  const json parsed = json::parse(last, nullptr, false);
  if (!ran->succeeded() || !parsed.is_object() ||
      (!parsed.contains("devices") && !parsed.contains("cuda_error"))) {
    std::string what = ran->end == ProcessEnd::signaled
                           ? "was killed by signal " + std::to_string(ran->code)
                           : "exited with status " + std::to_string(ran->code);
    return failed(what + ": " + (last.empty() ? std::string("no output") : last.substr(0, 300)));
  }
  return parsed;
}

std::string error_reply(const json& id, ErrorCode code, std::string_view message) {
  return dump(json{{"id", id},
                   {"ok", false},
                   {"error", {{"code", std::string(to_string(code))}, {"message", std::string(message)}}}});
}

// One worker's request handling; owns the compiler or the runner of its role. The CUDA backends
// (NvrtcCompiler, CudaRunner) are created on the first CUDA job, so workers that only see CPU
// jobs never load libnvrtc or libcuda.
class Handler {
public:
  Handler(Role role, std::string measure_lock, std::string device_name)
      : m_role(role), m_measure_lock(std::move(measure_lock)), m_device_name(std::move(device_name)) {
    if (role == Role::compile) m_compiler = std::make_unique<HostCompiler>();
    else m_runner = std::make_unique<HostRunner>();
  }

  // True once a reply must be the worker's last (a CUDA context was lost).
  [[nodiscard]] bool must_exit() const { return m_must_exit; }
  // True once the worker is done after its reply without a fault: a CPU A/B ends its process,
  // so that the next pass of the A/B is measured in another one (daemon/ab_service.hpp).
  [[nodiscard]] bool retiring() const { return m_retiring; }

  // The reply line for `line`, or nullopt for "exit".
  std::optional<std::string> handle(const std::string& line) {
    json request;
    try {
      request = json::parse(line);
    } catch (const json::parse_error& e) {
      return error_reply(nullptr, ErrorCode::bad_request,
                         std::string("request is not valid JSON: ") + e.what());
    }
    if (!request.is_object()) {
      return error_reply(nullptr, ErrorCode::bad_request,
                         std::string("request must be a JSON object, found ") +
                             request.type_name());
    }
    json id = nullptr;
    if (auto it = request.find("id"); it != request.end()) {
      if (!(it->is_number() || it->is_string() || it->is_null())) {
        return error_reply(nullptr, ErrorCode::bad_request,
                           std::string("field 'id' must be a number, string or null, found ") +
                               it->type_name());
      }
      id = *it;
    }
    auto op_it = request.find("op");
    if (op_it == request.end() || !op_it->is_string()) {
      return error_reply(id, ErrorCode::bad_request,
                         op_it == request.end()
                             ? std::string("field 'op' is missing (expected a string)")
                             : std::string("field 'op' must be a string, found ") +
                                   op_it->type_name());
    }
    const std::string op = op_it->get<std::string>();
    if (op == "exit") return std::nullopt;
    if (op == "devices") {
      try {
        return devices(id);
      } catch (const std::exception& e) {
        return error_reply(id, ErrorCode::internal,
                           std::string("op 'devices' failed in the worker: ") + e.what());
      }
    }
    if (op != "compile" && op != "compile_batch" && op != "bench" && op != "bench_ab") {
      return error_reply(id, ErrorCode::unknown_op,
                         "unknown op '" + op +
                             "' (expected compile, compile_batch, bench, bench_ab, devices or exit)");
    }
    const Role needs = op == "bench" || op == "bench_ab" ? Role::bench : Role::compile;
    if (needs != m_role) {
      return error_reply(id, ErrorCode::bad_request,
                         "this is a " + std::string(to_string(m_role)) + " worker; op '" + op +
                             "' goes to a " + std::string(to_string(needs)) + " worker");
    }
    try {
      if (op == "compile_batch") return compile_batch(id, request);
      auto job_it = request.find("job");
      if (job_it == request.end() || !job_it->is_object()) {
        return error_reply(id, ErrorCode::bad_request,
                           job_it == request.end()
                               ? std::string("field 'job' is missing (expected an object)")
                               : std::string("field 'job' must be an object, found ") +
                                     job_it->type_name());
      }
      if (op == "bench_ab") return bench_ab(id, *job_it);
      return m_role == Role::compile ? compile(id, *job_it) : bench(id, *job_it);
    } catch (const std::exception& e) {
      return error_reply(id, ErrorCode::internal,
                         "op '" + op + "' failed in the worker: " + e.what());
    }
  }

private:
  std::string compile(const json& id, const json& job_json) {
    auto job = CompileJob::from_json(job_json);
    if (!job) return error_reply(id, job.error().code, job.error().message);
    auto outcome = compile_one(*job);
    if (!outcome) return error_reply(id, outcome.error().code, outcome.error().message);
    return ok_reply(id, outcome->to_json());
  }

  // {"jobs":[CompileJob..]} -> {"outcomes":[CompileOutcome..]} in job order: the host jobs
  // through HostCompiler::compile_batch, the CUDA jobs through NvrtcCompiler::compile_batch.
  std::string compile_batch(const json& id, const json& request) {
    auto jobs = batch_jobs(request);
    if (!jobs) return error_reply(id, jobs.error().code, jobs.error().message);
    std::vector<json> outcomes(jobs->size());
    std::vector<CompileJob> host_jobs, cuda_jobs;
    std::vector<std::size_t> host_index, cuda_index;
    for (std::size_t i = 0; i < jobs->size(); ++i) {
      CompileJob& job = (*jobs)[i];
      const bool cuda = job.language == "cuda";
      (cuda ? cuda_index : host_index).push_back(i);
      (cuda ? cuda_jobs : host_jobs).push_back(std::move(job));
    }
    if (!cuda_jobs.empty()) {
      auto built = compile_cuda(cuda_jobs);
      if (!built) return error_reply(id, built.error().code, built.error().message);
      for (std::size_t k = 0; k < built->size(); ++k) outcomes[cuda_index[k]] = (*built)[k].to_json();
    }
    const auto built = m_compiler->compile_batch(host_jobs);
    for (std::size_t k = 0; k < built.size(); ++k) outcomes[host_index[k]] = built[k].to_json();
    return ok_reply(id, json{{"outcomes", std::move(outcomes)}});
  }

  // The "jobs" of a compile_batch request. Errors: bad_request naming the field ("jobs[2]: ...").
  static Result<std::vector<CompileJob>> batch_jobs(const json& request) {
    const auto it = request.find("jobs");
    if (it == request.end()) {
      return make_error(ErrorCode::bad_request,
                        "field 'jobs' is missing (expected an array of compile jobs)");
    }
    if (!it->is_array() || it->empty()) {
      return make_error(ErrorCode::bad_request,
                        std::string("field 'jobs' must be a non-empty array of compile jobs, found ") +
                            (it->is_array() ? "an empty array" : it->type_name()));
    }
    std::vector<CompileJob> jobs;
    for (std::size_t i = 0; i < it->size(); ++i) {
      auto job = CompileJob::from_json((*it)[i]);
      if (!job) {
        return make_error(job.error().code, "jobs[" + std::to_string(i) + "]: " + job.error().message);
      }
      jobs.push_back(std::move(*job));
    }
    return jobs;
  }

  // A CUDA job goes to nvrtc, any other to the host compiler. Errors: compile_cuda's.
  Result<CompileOutcome> compile_one(const CompileJob& job) {
    if (job.language != "cuda") return m_compiler->compile(job);
    auto built = compile_cuda({job});
    if (!built) return built.error();
    return std::move(built->front());
  }

  // CUDA jobs through nvrtc (created on first use), one outcome per job. Errors: no_device when
  // nvrtc cannot be loaded or this worker has no CUDA backend.
  Result<std::vector<CompileOutcome>> compile_cuda(const std::vector<CompileJob>& jobs) {
#ifdef KTUNE_HAVE_CUDA
    if (!m_nvrtc) {
      auto created = NvrtcCompiler::create();
      if (!created) return created.error();
      m_nvrtc = std::move(created).value();
    }
    std::vector<CompileOutcome> outcomes;
    for (auto& result : m_nvrtc->compile_batch(jobs)) outcomes.push_back(std::move(result.outcome));
    return outcomes;
#else
    return make_error(ErrorCode::no_device,
                      "kernel '" + jobs.front().kernel +
                          "' is CUDA, and this ktune-worker was built without the CUDA backend "
                          "(no CUDA toolkit at configure time)");
#endif
  }

  // The device's measurement lock while a request measures: `fd` holds it, or `unlocked` says
  // why it could not be held (the file cannot be opened: another user's, a planted symlink, an
  // unusable directory; flock failing). Measuring goes on without it then -- a lock directory
  // that cannot serve never stops tuning -- and the outcome carries the reason.
  struct DeviceLock {
    UniqueFd fd;
    std::string unlocked;
  };

  // Takes the device's measurement lock (run_worker), waiting up to k_measure_lock_wait.
  // Errors: device_busy when another process holds it for that long.
  Result<DeviceLock> lock_device() {
    DeviceLock lock;
    if (m_measure_lock.empty()) return lock;
    auto opened = open_shared_lock_file(m_measure_lock);
    if (!opened) return without_lock(opened.error().message);
    lock.fd = std::move(opened).value();
    const auto give_up = std::chrono::steady_clock::now() + k_measure_lock_wait;
    while (::flock(lock.fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        return without_lock("cannot lock " + m_measure_lock + ": " + std::strerror(errno));
      }
      if (std::chrono::steady_clock::now() >= give_up) {
        return make_error(ErrorCode::device_busy, "another process holds the measurement lock " +
                                             m_measure_lock + " (another ktuned measures on "
                                             "this device)");
      }
      ::usleep(5000);
    }
    return lock;
  }

  // A DeviceLock that holds nothing, saying why; the first time for each reason also on stderr
  // (which ktuned copies into its log).
  DeviceLock without_lock(const std::string& why) {
    DeviceLock lock;
    lock.unlocked = why + "; measured without the lock, perhaps at the same time as another ktuned";
    if (lock.unlocked != m_last_unlocked) {
      std::fprintf(stderr, "ktune-worker: %s\n", lock.unlocked.c_str());
      m_last_unlocked = lock.unlocked;
    }
    return lock;
  }

  // The artifacts a bench job names (the candidate's, the reference's) checked against the
  // content hashes recorded with their keys; an outcome saying which failed, or nothing.
  static std::optional<BenchOutcome> unverified_artifact(const BenchJob& job) {
    for (const std::string* path : {&job.artifact_path, &job.reference_path}) {
      if (path->empty()) continue;
      const ArtifactCheck check = verify_artifact(*path);
      if (check.ok()) continue;
      BenchOutcome outcome;
      outcome.status = CandidateStatus::runtime_error;
      outcome.reason = check.reason;
      outcome.infra = check.reason;
      outcome.infra_artifact = *path;
      return outcome;
    }
    return std::nullopt;
  }

  // Runs `job` on the runner of its device (the CUDA runner created on first use) and returns
  // its outcome as JSON. Errors: the CUDA runner cannot be created, or this worker has no CUDA
  // backend. After a lost CUDA context must_exit() is true.
  Result<json> measure(const BenchJob& job) {
    if (!job.launch) return m_runner->run(job).to_json();
#ifdef KTUNE_HAVE_CUDA
    if (m_cuda_runner && m_cuda_ordinal != job.cuda_device) m_cuda_runner.reset();
    if (!m_cuda_runner) {
      lift_address_space_limit_for_cuda();
      auto created = CudaRunner::create(
          job.cuda_device, 0,
          m_device_name.empty() ? "cuda:" + std::to_string(job.cuda_device) : m_device_name);
      if (!created) return created.error();
      m_cuda_runner = std::move(created).value();
      m_cuda_ordinal = job.cuda_device;
    }
    // The outcome carries "context_lost" and "resources".
    const CudaRunOutcome result = m_cuda_runner->run_job(job);
    if (result.context_lost) m_must_exit = true;
    return result.to_json();
#else
    return make_error(ErrorCode::no_device,
                      "kernel '" + job.kernel +
                          "' is CUDA, and this ktune-worker was built without the CUDA backend "
                          "(no CUDA toolkit at configure time)");
#endif
  }

  std::string bench(const json& id, const json& job_json) {
    auto job = BenchJob::from_json(job_json);
    if (!job) return error_reply(id, job.error().code, job.error().message);
    // Nothing of an artifact the cache cannot vouch for is loaded: the host's fault, not the
    // candidate's (the daemon compiles it again).
    if (auto refused = unverified_artifact(*job)) return ok_reply(id, refused->to_json());
    auto locked = lock_device();
    if (!locked) return error_reply(id, locked.error().code, locked.error().message);
    auto outcome = measure(*job);
    if (!outcome) return error_reply(id, outcome.error().code, outcome.error().message);
    if (!locked->unlocked.empty()) (*outcome)["unlocked"] = locked->unlocked;
    // A retiring CPU job (a round of the finals) ends this process: the next is measured in a
    // fresh one. After a lost context this reply is the worker's last too, and says so.
    if (job->retire && !job->launch) m_retiring = true;
    return ok_reply(id, *outcome, m_must_exit || m_retiring ? Exiting::yes : Exiting::no);
  }

  // bench_ab (jobs/ab_job.hpp): the rounds under one hold of the device's measurement lock.
  std::string bench_ab(const json& id, const json& job_json) {
    auto ab = AbRequest::from_json(job_json);
    if (!ab) return error_reply(id, ab.error().code, ab.error().message);
    // As for bench: an artifact the cache cannot vouch for is never loaded; the A/B fails on
    // that side, with the check's reason.
    for (const auto& [side, job] : {std::pair<const char*, const BenchJob*>{"a", &ab->a}, {"b", &ab->b}}) {
      if (auto refused = unverified_artifact(*job)) {
        AbOutcome outcome;
        outcome.status = refused->status;
        outcome.failed_side = side;
        outcome.reason = refused->reason;
        return ok_reply(id, outcome.to_json());
      }
    }
    auto locked = lock_device();
    if (!locked) return error_reply(id, locked.error().code, locked.error().message);
    auto outcome = run_ab_rounds(*ab, [this](const BenchJob& job) -> Result<BenchOutcome> {
      if (m_must_exit) {
        return make_error(ErrorCode::internal, "the CUDA context was lost in this A/B");
      }
      auto measured = measure(job);
      if (!measured) return measured.error();
      return BenchOutcome::from_json(*measured);
    });
    if (!outcome) return error_reply(id, outcome.error().code, outcome.error().message);
    outcome->unlocked = locked->unlocked;
    m_retiring = !ab->a.launch && !ab->b.launch;
    return ok_reply(id, outcome->to_json(), m_must_exit || m_retiring ? Exiting::yes : Exiting::no);
  }

  // {"cpu":{"name","fingerprint","details"},"cuda_backend":bool,"devices":[CUDA devices, same
  // form]}, or with
  // "cuda_error":{"code","message"} in place of "devices" when there is no CUDA device to list.
  // The CPU is always there: the daemon learns it here, never in its own process. The CUDA
  // devices come from a child process (cuda_devices_from_child).
  static std::string devices(const json& id) {
    json out{{"cpu", device_json(detect_cpu_device(host_compiler_version(host_cxx())))},
             {"cuda_backend", k_cuda_backend}};
    out.update(k_cuda_backend ? cuda_devices_from_child() : cuda_devices_json());
    return ok_reply(id, out);
  }

  Role m_role;
  std::string m_measure_lock;
  std::string m_device_name; // the lane's name ("cuda:3"), which this process sees as ordinal 0
  std::string m_last_unlocked;  // the last reason told on stderr
  std::unique_ptr<HostCompiler> m_compiler;
  std::unique_ptr<HostRunner> m_runner;
#ifdef KTUNE_HAVE_CUDA
  std::unique_ptr<NvrtcCompiler> m_nvrtc;
  std::unique_ptr<CudaRunner> m_cuda_runner;
  int m_cuda_ordinal = -1;
#endif
  bool m_must_exit = false;
  bool m_retiring = false;
};

} // namespace

std::string_view to_string(Role role) {
  return role == Role::compile ? "compile" : "bench";
}

std::optional<Role> parse_role(std::string_view text) {
  if (text == "compile") return Role::compile;
  if (text == "bench") return Role::bench;
  return std::nullopt;
}

namespace {

// The daemon's death (PR_SET_PDEATHSIG) takes the worker's whole process group: the worker and
// whatever it started (a compiler driver and its cc1plus), so that nothing outlives ktuned. ktuned
// spawns each worker as the leader of its own group; a worker run by hand is not one, and then
// only it exits (never the caller's group).
void die_with_group(int) {
  if (::getpgrp() == ::getpid()) ::kill(0, SIGKILL);
  ::_exit(128 + SIGTERM);
}

} // namespace

Result<void> prepare_worker_process(int fd, int parent_pid, std::optional<int> cpu,
                                    std::optional<long long> memory_mb) {
  struct sigaction on_term {};
  on_term.sa_handler = die_with_group;
  sigemptyset(&on_term.sa_mask);
  if (::sigaction(SIGTERM, &on_term, nullptr) != 0) return errno_error("sigaction(SIGTERM)");
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return errno_error("prctl(PR_SET_PDEATHSIG)");
  if (::getppid() != parent_pid) {
    return make_error(ErrorCode::parent_gone, "the parent process " + std::to_string(parent_pid) +
                                         " exited before the worker started");
  }
  if (::signal(SIGPIPE, SIG_IGN) == SIG_ERR) return errno_error("signal(SIGPIPE, SIG_IGN)");
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    return errno_error("fcntl(--fd " + std::to_string(fd) + ", FD_CLOEXEC)");
  }
  if (cpu) {
    if (*cpu < 0 || *cpu >= CPU_SETSIZE) {
      return make_error(ErrorCode::internal,
                        "--cpu " + std::to_string(*cpu) + " is not a valid CPU index");
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(*cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) {
      return errno_error("sched_setaffinity(cpu " + std::to_string(*cpu) + ")");
    }
  }
  return limit_candidate_process(memory_mb.value_or(0));
}

Result<void> limit_candidate_process(long long memory_mb) {
  const rlimit no_core{0, 0};
  if (::setrlimit(RLIMIT_CORE, &no_core) != 0) return errno_error("setrlimit(RLIMIT_CORE, 0)");
  if (memory_mb > 0) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    std::fprintf(stderr, "ktune-worker: --memory-mb %lld ignored: this is an AddressSanitizer or "
                         "ThreadSanitizer build, which cannot run under RLIMIT_AS\n", memory_mb);
#else
    // Soft limit only: a bench worker lifts it before its first CUDA job (CUDA's virtual
    // reservations do not fit under it).
    rlimit limit{};
    if (::getrlimit(RLIMIT_AS, &limit) != 0) return errno_error("getrlimit(RLIMIT_AS)");
    const rlim_t bytes = static_cast<rlim_t>(memory_mb) << 20;
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? bytes : std::min(bytes, limit.rlim_max);
    if (::setrlimit(RLIMIT_AS, &limit) != 0) {
      return errno_error("setrlimit(RLIMIT_AS, " + std::to_string(memory_mb) + " MiB)");
    }
#endif
  }
  return {};
}

int list_cuda_devices_main() {
#ifdef KTUNE_HAVE_CUDA
  lift_address_space_limit_for_cuda(Say::no);
#endif
  std::puts(dump(cuda_devices_json()).c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_worker(int fd, Role role, std::string measure_lock, std::string device_name) {
  Handler handler(role, std::move(measure_lock), std::move(device_name));
  const json ready{{"ready", true}, {"pid", static_cast<long long>(::getpid())},
                   {"role", std::string(to_string(role))}};
  if (!write_line(fd, dump(ready))) return 1;

  std::string buffer;
  bool discarding = false;   // inside a line over k_max_line_bytes
  char chunk[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (n == 0) return 0; // the daemon closed its end; a partial last line is dropped
    buffer.append(chunk, static_cast<std::size_t>(n));

    std::size_t start = 0;
    for (;;) {
      const std::size_t newline = buffer.find('\n', start);
      if (newline == std::string::npos) break;
      std::string line = buffer.substr(start, newline - start);
      start = newline + 1;
      if (discarding) {
        discarding = false;
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto reply = handler.handle(line);
      if (!reply) return 0;
      if (!write_line(fd, std::move(*reply))) return 1;
      if (handler.must_exit()) return k_exit_context_lost;
      if (handler.retiring()) return 0;
    }
    buffer.erase(0, start);
    if (!discarding && buffer.size() > k_max_line_bytes) {
      discarding = true;
      const std::string reply =
          error_reply(nullptr, ErrorCode::message_too_large,
                      "request line over " + std::to_string(k_max_line_bytes) + " bytes");
      if (!write_line(fd, reply)) return 1;
    }
    if (discarding) buffer.clear();
  }
}

} // namespace ktune
