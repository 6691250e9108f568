#pragma once
// The daemon op "compile_check": compiles every config a CUDA family's constraints admit at one
// shape, for each requested architecture, through the compile workers, without a device.
//
//   {"op":"compile_check","kernel":"gemm","arch":["sm_80","sm_90"],"shape":"M=..,N=..,K=..",
//    "dtype":"f32"}
// shape defaults to 4096 for every dim, dtype to the family's first. The reply:
//   {"kernel","shape","dtype","arch":[..],"configs":N,"compiled":N*len(arch),"errors":E,
//    "rows":[{"config":{..},"arch","status","message","registers","spills","compile_ms",
//             "cached"}...]}
// rows in (config, arch) order; "message" is the first non-empty log line of a compile_error.
// Errors: unknown_kernel (no CUDA family of that name), bad_request (no arch, an arch that is not
// sm_XX, a malformed field), bad_shape, bad_dtype, empty_space, no_device when every compile
// worker is taken by a tune job, internal when no compile worker can be started.
#include "compiler/kernel_registry.hpp"
#include "core/protocol.hpp"
#include "daemon/session.hpp"
#include "daemon/worker_pool.hpp"

#include <memory>
#include <string>

namespace ktune::daemon {

struct CompileCheckRequest {
  std::string kernel;
  std::vector<std::string> archs;
  std::string shape;       // "" = 4096 for every dim
  std::string dtype;       // "" = the family's first
  // Errors: bad_request naming the field.
  [[nodiscard]] static Result<CompileCheckRequest> from_json(const nlohmann::json& body);
};

// Starts the check and replies on `session` when every compile finished (or at once on an
// error). Runs alongside tune jobs on the compile workers that are idle, at most the pool's limit
// at once. io thread only.
void start_compile_check(const std::shared_ptr<Session>& session, const protocol::Request& request,
                         KernelRegistry& registry, WorkerPool& workers,
                         const std::string& cache_dir);

} // namespace ktune::daemon
