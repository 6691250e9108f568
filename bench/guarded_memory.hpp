#pragma once
// Memory fenced against a candidate's stray writes (docs/ARCHITECTURE.md § Measurement).
//
// A GuardedRegion is one anonymous mapping: a PROT_NONE guard, the usable pages, another
// PROT_NONE guard. Each guard is as large as the usable part (at least a page, at most
// k_max_guard_bytes), so a kernel that writes up to one buffer-length before or past its buffer
// faults at the first such write instead of landing in a neighbouring allocation. Guards cost
// address space only (MAP_NORESERVE, never touched); they count towards RLIMIT_AS.
//
// A SealedCopy is bytes kept in such a region and made read-only: the pristine inputs and the
// reference outputs the runner compares against. A write into one faults too, so no candidate
// can corrupt what the next candidates are judged by.
//
// Blame: install_guard_fault_handler() makes SIGSEGV and SIGBUS at an address inside a guard or
// a sealed copy write one line to stderr, k_guard_fault_prefix followed by what was hit
// ("... 4096 bytes past the end of 'out'"), before the signal takes its course; ktuned puts that
// line into the candidate's `crash` reason. Faults elsewhere are left to the previous handler.
//
// Thread safety: regions may be mapped and unmapped from one thread at a time; the fault
// handler only reads the registry of named ranges (fixed size, atomics).
#include "core/result.hpp"
#include "jobs/bench_job.hpp"  // k_guard_fault_prefix

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ktune {

class GuardedRegion {
public:
  static constexpr std::size_t k_max_guard_bytes = std::size_t{64} << 20;

  // At least `bytes` usable (rounded up to whole pages), zero-filled, read-write. `label` names
  // the region in errors and in the fault line. Errors: "runtime_error" naming label and size.
  [[nodiscard]] static Result<GuardedRegion> map(std::size_t bytes, std::string_view label);

  GuardedRegion() = default;
  GuardedRegion(GuardedRegion&& other) noexcept;
  GuardedRegion& operator=(GuardedRegion&& other) noexcept;
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;
  ~GuardedRegion();

  [[nodiscard]] unsigned char* data() { return m_usable; }
  [[nodiscard]] const unsigned char* data() const { return m_usable; }
  [[nodiscard]] std::size_t size() const { return m_usable_bytes; }
  [[nodiscard]] std::size_t guard_bytes() const { return m_guard_bytes; }

  // What a fault in the guards reports: `label`'s contents occupy [begin, begin + bytes) of the
  // usable part, and offsets are counted from there ("12 bytes past the end of 'C'").
  void name_contents(std::string_view label, const void* begin, std::size_t bytes);
  // Makes the usable part read-only (a write faults, reported as a write into `label`).
  // Errors: "runtime_error" with mprotect's reason.
  [[nodiscard]] Result<void> seal();

private:
  void release() noexcept;
  unsigned char* m_base = nullptr;
  std::size_t m_total = 0;
  unsigned char* m_usable = nullptr;
  std::size_t m_usable_bytes = 0;
  std::size_t m_guard_bytes = 0;
  int m_slot = -1;  // its entry in the fault registry, -1 when unregistered
};

// Read-only bytes in a GuardedRegion, with their XXH3-64 hash.
class SealedCopy {
public:
  // Errors: "runtime_error" (mapping or sealing failed) naming `label`.
  [[nodiscard]] static Result<SealedCopy> of(const void* data, std::size_t bytes,
                                             std::string_view label);
  SealedCopy() = default;

  [[nodiscard]] const unsigned char* data() const { return m_region.data(); }
  [[nodiscard]] std::size_t size() const { return m_bytes; }
  [[nodiscard]] bool empty() const { return m_bytes == 0; }
  [[nodiscard]] std::uint64_t hash() const { return m_hash; }

private:
  GuardedRegion m_region;
  std::size_t m_bytes = 0;
  std::uint64_t m_hash = 0;
};

// XXH3-64 of `bytes` at `data`: the cheap check that an input is unchanged (several GB/s).
[[nodiscard]] std::uint64_t content_hash(const void* data, std::size_t bytes);

// Installs the SIGSEGV/SIGBUS handler described above, on an alternate signal stack, keeping
// the dispositions it replaces as the ones a fault elsewhere meets; nothing when it is in place.
void install_guard_fault_handler();

} // namespace ktune
