#pragma once
// HostRunner: dlopens the candidate's shared object (RTLD_NOW | RTLD_LOCAL, closed after the
// run) and calls
//   extern "C" void <entry>(void** args)
// with one pointer per spec arg (buffers: the buffer; scalars: a pointer to the value held in
// the arg's dtype), the array shape cuLaunchKernel takes.
//
// Buffers (bench/host_buffers.hpp) are 64-byte aligned, each between guard pages as large as
// itself with canary bytes around the data, and allocated once per key (shape, every arg's
// name/kind/dtype/count/init/value, seed); only the latest key's buffers are kept, so memory
// stays bounded by one shape's working set. Inputs are filled deterministically from the seed
// and kept as a pristine copy with its hash, read-only (bench/guarded_memory.hpp: SealedCopy).
// Reference outputs are computed once per (reference artifact and symbol, key) and kept with the
// buffers, read-only too (a reference function: BenchJob::reference_entry, once per shape and
// seed); a reference file rebuilt at the same path (other inode, size or mtime) is run again.
// The constructor installs the guard fault handler: a write into a guard page or a read-only
// copy kills the process with SIGSEGV after one stderr line naming the buffer.
//
// Per candidate: inputs restored from the pristine copy, outputs zeroed, one checked run (the
// first launch, never timed). A write into a canary is `mismatch` ("wrote past buffer end of 'C'");
// an `in` buffer whose hash changed is restored and `mismatch` ("wrote outside its outputs:
// input 'B' changed in its checked run (...)"), checked again every k_integrity_interval
// (100 ms) of sampling and when sampling ends ("... while it was sampled");
// outputs differing from the reference are `mismatch` naming the first element and the count
// ("C[17]: got 1.5, expected 2.25 (rtol 0.001, atol 1e-05); 312 of 65536 elements differ";
// integer outputs must match exactly; an output with its own rtol/atol is compared with those). A load or symbol failure, a failing reference and an
// allocation failure are `runtime_error` with the reason. Then warm-up for warmup_ms, then
// samples (for inplace jobs a restore of the inout buffers, then cold caches: the argument buffers' cache lines
// evicted with clflush / dc civac when they are smaller than the flush buffer, else a sweep --
// write then read a buffer of 2 x the last-level cache, allocated on first use -- both untimed
// before each sample) until the
// Sampler (bench/sampler.hpp) stops them: converged, noise settled, capped (the wall-time cap
// counts flushes and restores, so a cheap kernel behind an expensive flush cannot run far past
// it) or pruned (slower than BenchJob::prune_above_ms). At least one sample is always taken.
// Not thread-safe: one runner per bench worker.
#include "bench/runner.hpp"

#include <cstddef>
#include <map>
#include <memory>

namespace ktune {

class HostRunner final : public Runner {
public:
  HostRunner();
  // `flush_bytes`: size of the cache-flush buffer; 0 means 2 x last_level_cache_bytes(), at most 64 MiB.
  explicit HostRunner(std::size_t flush_bytes);
  ~HostRunner() override;
  [[nodiscard]] BenchOutcome run(const BenchJob& job) override;

private:
  struct State;
  std::unique_ptr<State> m_state;
};

} // namespace ktune
