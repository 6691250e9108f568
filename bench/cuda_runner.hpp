#pragma once
// CudaRunner: benchmarks CUBIN candidates with the driver API (loaded at run time,
// cuda/cuda_api.hpp) on one device of the bench worker, in the device's primary context. The
// device is the ordinal the job names (BenchJob::cuda_device). ktuned gives each CUDA lane's
// worker CUDA_VISIBLE_DEVICES naming that lane's one device, so the worker sees it as ordinal 0;
// messages name it as the daemon does (`create`'s name, from the worker's --device-name).
//
// The kernel is `extern "C" __global__ void <entry>(...)` with one parameter per spec arg, looked
// up by the job's entry (the compile's entry_symbol: a batched CUBIN holds several configs'
// renamed entries) and the reference by its reference_entry (the entry when empty):
// buffers as device pointers, scalars by value in the arg's dtype (i32 int, i64 long long, f32
// float, f64 double, f16 the 16 bits of a __half). It is launched with the candidate's CudaLaunch
// (grid, block, dynamic shared bytes; jobs/cuda_launch.hpp) on a dedicated stream.
//
// Buffers are allocated once per key (shape, every arg's name/kind/dtype/count/init/value, seed;
// only the latest key's are kept) with 256 bytes of a fixed pattern on either side, so a kernel
// writing just past a buffer is caught. Inputs are filled on the host from the seed with the
// host runner's generator (bench/host_buffers.hpp), so CPU and CUDA families see the same data,
// and copied in; inout buffers also get a pristine copy on the device, which every restore
// copies from (cuMemcpyDtoDAsync on the runner's stream). Reference outputs are computed once
// per (reference CUBIN, key) with the reference launch and kept on the host.
//
// Per candidate: module load, function lookup, attributes (registers = CU_FUNC_ATTRIBUTE_NUM_REGS,
// stack_bytes = LOCAL_SIZE_BYTES, shared_bytes = SHARED_SIZE_BYTES, reported with every outcome
// that got that far), a launch check against the device's and the function's limits, then one
// checked launch (never timed): inputs restored, outputs filled with the sentinel
// (bench/host_buffers.hpp: NaN for floats, so an element the kernel skips cannot match), guards
// re-armed; the guards, the `in` buffers (which must be unchanged) and the outputs are copied back
// and compared (|got - expected| <= atol + rtol * |expected|, integers exactly). The reference run
// starts from the same sentinel. Then the warm-up (warmup_ms, and on until the SM clock settles
// where NVML reads it), three single-launch samples that choose the timing plan, and the samples
// (bench/cuda_timing.hpp, docs/gpu.md § Timing): each is, in stream order, the inout restore
// (inplace jobs; device-to-device), the L2 flush (cuMemsetD8Async over twice the L2 size), a spin
// kernel, the start event, one launch or a batch of launches for kernels under 20 us (rotating
// over argument sets when a batch must not share buffers), the stop event; until the Sampler
// (bench/sampler.hpp) stops them: converged, noise settled, capped or pruned. The `in` buffers are
// checked once more after the samples. The outcome's `conditions` record the plan, the spin and
// the SM and memory clocks with their clock-event reasons before and after the samples.
//
// Outcomes: mismatch (outputs, guards, or an `in` buffer the candidate changed: "wrote outside its
// outputs: input 'B' changed"; the buffers are rebuilt for the next candidate), launch_error
// (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, an invalid launch, a block or shared memory over the
// device's or the function's limit), runtime_error (unreadable or foreign CUBIN, missing entry,
// allocation failure, a failing reference, any other CUDA error), crash (a fatal error:
// cuda::is_fatal_error). After a fatal error the context is unusable: context_lost() turns true,
// every later run answers crash, nothing is released any more, and the worker must exit after
// replying. A failing call is reported as "<stage>: <file:line>: <call> failed: <CUDA error name>
// (<description>)", the name from the driver's cuGetErrorName.
//
// Not thread-safe: one runner per bench worker, used from one thread.
#include "bench/cuda_device.hpp"
#include "jobs/cuda_launch.hpp"
#include "bench/runner.hpp"
#include "cuda/cubin.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace ktune {

struct CudaRunOutcome {
  BenchOutcome outcome;
  // Read with cuFuncGetAttribute once the candidate's module loaded (spills are not reported by
  // the driver: -1). nullopt when the run stopped earlier.
  std::optional<cuda::KernelResources> resources;
  bool context_lost = false; // a fatal CUDA error: the worker must exit after replying

  // BenchOutcome::to_json() plus "resources" (KernelResources::to_json() or null) and
  // "context_lost".
  [[nodiscard]] nlohmann::json to_json() const;
};

class CudaRunner final : public Runner {
public:
  // Retains the primary context of device `ordinal` and creates the stream and events; loads
  // the spin kernel and opens the board's clocks (NVML), neither of which is required.
  // `flush_bytes`: the L2 flush buffer's size; 0 means 2 x the device's L2 size. `name`: the
  // device as the daemon names it, in every message (default "cuda:<ordinal>"; a lane's worker
  // sees its device as ordinal 0). Errors (code no_device, starting with `name`): no driver, a
  // stub driver, no device (load_driver's and query_cuda_device's messages), or a failing
  // context or stream setup.
  [[nodiscard]] static Result<std::unique_ptr<CudaRunner>> create(int ordinal = 0,
                                                                  std::size_t flush_bytes = 0,
                                                                  std::string name = {});
  ~CudaRunner() override;
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  // run_cuda(job, *job.launch, job.reference_launch), with the resources copied into the
  // outcome's registers/spills/shared_bytes; context_lost tells the caller to reply and exit.
  // A job without launch geometry answers runtime_error naming what is missing.
  [[nodiscard]] CudaRunOutcome run_job(const BenchJob& job);

  // Runner interface: run_job(job).outcome. Check context_lost() after it.
  [[nodiscard]] BenchOutcome run(const BenchJob& job) override;

  // Runs `job` (artifact_path and reference_path are CUBIN files) with `launch`; the reference
  // runs with `reference_launch`, or with `launch` when it is nullopt.
  [[nodiscard]] CudaRunOutcome run_cuda(const BenchJob& job, const CudaLaunch& launch,
                                        const std::optional<CudaLaunch>& reference_launch);

  [[nodiscard]] bool context_lost() const;
  [[nodiscard]] const CudaDeviceProperties& device() const;

private:
  struct State;
  explicit CudaRunner(std::unique_ptr<State> state);
  std::unique_ptr<State> m_state;
};

} // namespace ktune
