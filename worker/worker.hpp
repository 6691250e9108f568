#pragma once
// ktune-worker: the child process that compiles or benchmarks (a candidate, or a batch of configs
// to compile) one request at a time.
//
// Started by the daemon with posix_spawn as
//   ktune-worker --fd <N> --role compile|bench [--cpu <core>] [--memory-mb <MiB>]
// where <N> is this process's end of a socketpair (inherited, not close-on-exec), --cpu pins
// the worker to one core (sched_setaffinity; posix_spawn cannot do it for the parent) and
// --memory-mb caps its address space (a soft RLIMIT_AS; ignored with a note on stderr in
// AddressSanitizer and ThreadSanitizer builds, whose shadow memory cannot live under such a
// limit). The cap is for CPU candidates: a bench worker lifts it, with a note on stderr, before
// its first CUDA job, since the CUDA driver's virtual reservations make cuInit fail under it
// (docs/gpu.md).
//
// Worker protocol: newline-delimited JSON over fd N, one object per line, strictly
// request/reply (the worker answers each request before reading the next one).
//
//   worker -> daemon, once at start:
//     {"ready":true,"pid":<pid>,"role":"compile"|"bench"}
//   daemon -> worker:
//     {"id":<N>,"op":"compile","job":{CompileJob}}   (compile workers only)
//     {"id":<N>,"op":"compile_batch","jobs":[{CompileJob}..]}   (compile workers only)
//     {"id":<N>,"op":"bench","job":{BenchJob}}       (bench workers only)
//     {"id":<N>,"op":"devices"}                       either role: the CUDA devices it sees
//     {"op":"exit"}                                   no reply; the worker exits 0
//   worker -> daemon, one reply per request, "id" echoed (null when it could not be read):
//     {"id":<N>,"ok":true,"outcome":{CompileOutcome}}
//     {"id":<N>,"ok":true,"outcome":{"outcomes":[{CompileOutcome}..]}}   one per job, in order
//     {"id":<N>,"ok":true,"outcome":{BenchOutcome}}
//     {"id":<N>,"ok":true,"outcome":{"devices":[{"name":"cuda:0","fingerprint":..,"details":{..}}]}}
//     {"id":<N>,"ok":false,"error":{"code":"<code>","message":"..."}}
//   a reply after which the worker exits carries "exiting":true next to "ok" (a CUDA bench
//   reply whose outcome has "context_lost":true, then exit status 3; a CPU bench_ab reply, then
//   exit status 0: each pass of an A/B is measured in a process of its own); the daemon must send
//   nothing more.
//
// compile_batch: the host (cpp) jobs go to HostCompiler::compile_batch and the CUDA jobs to
// NvrtcCompiler::compile_batch, each of which compiles configs of one source together where it
// can (compiler/host_compiler.hpp, compiler/nvrtc_compiler.hpp). Its errors are compile's; a
// malformed job is named by its index ("jobs[2]: ...").
//
// CUDA: a compile job with language "cuda" goes to NvrtcCompiler, a bench job carrying "launch"
// to CudaRunner on device job.cuda_device; both are created on first use. Their setup failures
// (libnvrtc or libcuda missing, a stub driver, no device), and any CUDA job or "devices" in a
// worker built without the CUDA backend, answer the error no_device with the cause. A CUDA bench
// outcome is CudaRunOutcome::to_json(): BenchOutcome's fields plus "resources" and
// "context_lost". After a fatal CUDA error (cuda::is_fatal_error: the context is lost) the
// worker replies with "exiting":true, then exits k_exit_context_lost.
//
// CompileJob, CompileOutcome: jobs/compile_job.hpp (to_json/from_json); BenchJob, BenchOutcome:
// jobs/bench_job.hpp. A failed candidate (compile error, mismatch, ...) is an ok reply whose
// outcome carries the status; error replies are for requests the worker cannot act on:
//   bad_request       a line that is not JSON, not an object, an id that is not a number,
//                     string or null, a missing or malformed "job" (or "jobs": not a
//                     non-empty array, a malformed element), or an op this worker's
//                     role does not run (a compile worker asked to bench, or the reverse)
//   unknown_op        an "op" that is not compile, compile_batch, bench, devices or exit
//   message_too_large a line over k_max_line_bytes (its bytes are discarded up to the newline)
//
// A candidate that throws (std::bad_alloc from a huge allocation) is an ok reply with status
// runtime_error and the exception's text as the reason.
// End of input (the daemon closed its end) exits 0, like "exit". A candidate that crashes the
// worker kills it: the daemon sees the socket close and the child's signal. The worker dies with
// its parent (PR_SET_PDEATHSIG; note that this fires when the *thread* that spawned it exits, so
// the daemon spawns workers from a long-lived thread), and it runs with core dumps off.
#include "core/result.hpp"

#include <cstddef>
#include <optional>
#include <string_view>

#include <chrono>
#include <string>

namespace ktune {

enum class Role { compile, bench };

[[nodiscard]] std::string_view to_string(Role role);
[[nodiscard]] std::optional<Role> parse_role(std::string_view text);

// The exit status after a reply that lost the CUDA context.
inline constexpr int k_exit_context_lost = 3;

// The longest request line the worker accepts.
inline constexpr std::size_t k_max_line_bytes = 16u << 20;

// Process setup that must run first in main: SIGKILL on parent death (an error if the parent,
// `parent_pid` as seen at the start of main, is already gone: main then exits 1), core dumps off,
// SIGPIPE ignored (a write to a closed socket returns EPIPE instead), `fd` made close-on-exec so
// the compilers the worker spawns do not hold the daemon's socket open, and the optional CPU
// pinning and address-space limit. Errors (code "internal") name the failing step and errno's
// text; the parent being gone is code "parent_gone".
[[nodiscard]] Result<void> prepare_worker_process(int fd, int parent_pid, std::optional<int> cpu,
                                                  std::optional<long long> memory_mb = std::nullopt);

// Core dumps off and, when `memory_mb` > 0, a soft address-space limit (RLIMIT_AS, under any
// hard one): what every process that runs a candidate sets first. Sanitizer builds skip the
// limit with a note on stderr. Errors (code "internal") name the failing call.
[[nodiscard]] Result<void> limit_candidate_process(long long memory_mb);

// Serves requests on `fd` until "exit" or end of input. Returns the process exit status: 0 on
// exit or end of input, 1 when the socket fails (read or write error), k_exit_context_lost after
// a fatal CUDA error. Blocking I/O. A bench worker given `measure_lock` (a file path, opened by
// core/shared_lock_file.hpp's rules) holds an exclusive flock on it while it measures; when
// another process holds it for longer than k_measure_lock_wait, the request is answered with
// error "device_busy" (measured nothing; the daemon asks again later). When the file cannot be
// opened or locked (another user's file it may not open, a symbolic link, an unusable
// directory), the worker measures anyway and its outcome says why in "unlocked" (and stderr
// says so once per reason).
// `device_name` is the lane a CUDA bench worker serves ("cuda:3"): its CUDA_VISIBLE_DEVICES shows
// it that one device as ordinal 0, and its messages name the lane.
[[nodiscard]] int run_worker(int fd, Role role, std::string measure_lock = {}, std::string device_name = {});

// `ktune-worker --list-cuda-devices`: prints the CUDA part of a `devices` reply as one JSON line,
// {"devices":[..]} or {"cuda_error":{"code","message"}}, with RLIMIT_AS lifted to its hard limit
// first (cuInit reserves a large address range). Returns the exit status.
[[nodiscard]] int list_cuda_devices_main();
inline constexpr std::chrono::milliseconds k_measure_lock_wait{200};

} // namespace ktune
