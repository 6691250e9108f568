#pragma once
// The daemon op "compile_check": compiles every config a CUDA family's constraints admit at one
// shape, for each requested architecture, through the compile workers, without a device.
//
//   {"op":"compile_check","kernel":"gemm","arch":["sm_80","sm_90"],"shape":"M=..,N=..,K=..",
//    "dtype":"f32"}
// shape defaults to 4096 for every dim, dtype to the family's first. The reply:
//   {"kernel","shape","dtype","arch":[..],"configs":N,"compiled":N*len(arch),"errors":E,
//    "rows":[{"config":{..},"arch","status","message","registers","spills","compile_ms",
//             "cached","batch_size"}...]}
// rows in (config, arch) order; "message" is the first non-empty log line of a compile_error;
// "batch_size" the configs of the nvrtc program that built it (CompileOutcome::batch_size).
// Before the reply, a progress event {"job","done","total","errors"} after every compile;
// "job" is the id of the job the check ran as (strategy "compile_check", device = the archs): it
// waits in the scheduler's queue like any job, shares the compile workers fairly with tune jobs,
// and `cancel` stops it (the reply is then the error `cancelled`); a client that goes away
// cancels it too.
// Errors: unknown_kernel (no CUDA family of that name), bad_request (no arch, an arch that is not
// sm_XX, a malformed field), bad_shape, bad_dtype, empty_space, cancelled, internal.
#include "jobs/kernel_registry.hpp"
#include "core/protocol.hpp"
#include "core/shape.hpp"
#include "daemon/client.hpp"
#include "daemon/planner.hpp"
#include "daemon/scheduler.hpp"

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

// The strategy column of a compile check's job row.
inline constexpr std::string_view k_compile_check_strategy = "compile_check";

// What a check compiles: the CUDA family, the shape (4096 for every dim when the request names
// none) conformed to its dims, the dtype (the family's first when none is named).
struct CheckTarget {
  LoadedKernel kernel;
  Shape shape;
  std::string dtype;
};
// Errors: unknown_kernel (no CUDA family of that name), bad_shape.
[[nodiscard]] Result<CheckTarget> resolve_check(const CompileCheckRequest& req,
                                                KernelRegistry& registry);

// Stores the check over `configs` (the space at the target's shape, Planner::enumerate) as a job
// (Planner::create), queues it and replies on `session` when every compile finished (or at once
// on an error; store_busy when the database takes no writes now). io thread only.
void start_compile_check(const std::shared_ptr<Client>& session, const protocol::Request& request,
                         const CompileCheckRequest& req, const CheckTarget& target,
                         std::vector<Config> configs, Scheduler& scheduler,
                         const Planner& planner, const std::string& cache_dir);

} // namespace ktune::daemon
