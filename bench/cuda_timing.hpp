#pragma once
// How a CUDA candidate's samples are taken (docs/gpu.md § Timing). Pure, so it is tested where
// there is no GPU; bench/cuda_runner.cpp carries it out.
//
// - A sample never holds host latency: a short device-side spin (k_spin_ptx) is queued before the
//   sample's start event, lasting longer than the host takes to queue the event, the launches and
//   the stop event, so the start event is recorded when the GPU reaches it, right before the
//   kernel, not while the host is still launching (TensorRT-LLM's delay kernel).
// - Kernels shorter than k_batch_below_ms are timed as a batch of launches between two events,
//   the sample being their time over their count (nvbench's batch measurement; event resolution
//   is ~0.5 us). A cold-cache or in-place batch rotates over one argument set per launch, each set
//   restored and the L2 flushed before the batch, so every launch still reads cold, fresh inputs.
#include <cstddef>
#include <cstdint>

namespace ktune {

inline constexpr double k_batch_below_ms = 0.020;  // single launches shorter than this are batched
inline constexpr double k_batch_target_ms = 0.200; // a batch lasts about this long
inline constexpr int k_max_batch_launches = 128;

struct TimingPlan {
  int launches = 1; // launches between one sample's two events; the sample is their time / launches
  int sets = 1;     // argument sets the launches rotate over (1: every launch on the same buffers)

  [[nodiscard]] bool batched() const { return launches > 1; }
};

// The plan for a kernel whose single launch takes `estimate_ms`: one launch per sample from
// k_batch_below_ms up (or when the estimate is unknown, <= 0); below it enough launches to last
// k_batch_target_ms, between 2 and k_max_batch_launches. With `distinct_sets` (cold cache, or an
// in-place kernel) each launch of a batch gets its own argument set of `set_bytes`; the extra sets
// must fit in `budget_bytes`, so the batch is as long as they allow (no batch when not even one
// extra set fits).
[[nodiscard]] TimingPlan plan_timing(double estimate_ms, bool distinct_sets, std::size_t set_bytes,
                                     std::size_t budget_bytes);

// The spin queued before a sample's start event, in ns, from the host time the previous sample
// took to queue (microseconds): twice that plus 5 us, within [10 us, 2 ms].
[[nodiscard]] std::uint64_t spin_ns_for(double enqueue_us);

// The spin kernel, `ktune_spin(unsigned long long ns)`, as PTX the driver compiles for any GPU
// from sm_75 up: one thread reads %globaltimer until `ns` have passed. PTX rather than a CUBIN,
// so the bench worker needs no nvrtc to build it.
inline constexpr const char* k_spin_ptx = R"ptx(.version 7.0
.target sm_75
.address_size 64

.visible .entry ktune_spin(
  .param .u64 ktune_spin_ns
)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<5>;

  ld.param.u64 %rd1, [ktune_spin_ns];
  mov.u64 %rd2, %globaltimer;
$L_spin:
  mov.u64 %rd3, %globaltimer;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p1, %rd4, %rd1;
  @%p1 bra $L_spin;
  ret;
}
)ptx";
inline constexpr const char* k_spin_entry = "ktune_spin";

} // namespace ktune
