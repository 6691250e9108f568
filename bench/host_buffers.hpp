#pragma once
// Host-side argument buffers for the runners: element types, 64-byte aligned storage between
// guard pages with canary bytes on both sides of the data (so a kernel writing past either end
// faults or is caught), deterministic initialisation from a seed, and the element-wise output
// comparison.
//
// Thread safety: none of these share state; a HostBuffer is used from one thread at a time.
#include "bench/guarded_memory.hpp"
#include "jobs/bench_job.hpp"
#include "jobs/dtype.hpp"
#include "core/result.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

// IEEE 754 binary16 conversions (round to nearest even), for f16 buffers.
[[nodiscard]] std::uint16_t float_to_half(float value);
[[nodiscard]] float half_to_float(std::uint16_t bits);

// Reads element `index` of a `dtype` array at `data` as a double.
[[nodiscard]] double element_as_double(DType dtype, const void* data, std::size_t index);
// Stores `value` (converted to `dtype`, integers truncated toward zero) into element `index`.
void store_element(DType dtype, void* data, std::size_t index, double value);

// A move-only array of `count` elements of one dtype in its own GuardedRegion
// (bench/guarded_memory.hpp): PROT_NONE guard pages as large as the buffer on both sides, so a
// write up to one buffer-length outside it faults at once. data() is 64-byte aligned, 64 bytes
// past a page boundary; the rest of the usable pages -- k_guard_bytes before the first element,
// the tail after the last -- hold canary bytes of a fixed pattern (guards_intact()), which
// catch the small overruns that stay within the page. Contents are zero until filled.
class HostBuffer {
public:
  static constexpr std::size_t k_alignment = 64;
  static constexpr std::size_t k_guard_bytes = 64;

  // Errors: "runtime_error" when count is 0, the size overflows, or the allocation fails; the
  // message names `label` and the size in bytes. With `alignment` (a power of two, at most
  // 4096) and `offset` (bytes, below alignment) data() sits `offset` bytes past an
  // `alignment` boundary instead, still behind at least k_guard_bytes of guard: a family's
  // [buffers] table, to measure under another allocator's placement.
  [[nodiscard]] static Result<HostBuffer> allocate(DType dtype, std::size_t count,
                                                   std::string_view label,
                                                   std::size_t alignment = k_alignment,
                                                   std::size_t offset = 0);

  HostBuffer(HostBuffer&& other) noexcept = default;
  HostBuffer& operator=(HostBuffer&& other) noexcept = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() = default;

  [[nodiscard]] void* data() { return m_data; }
  [[nodiscard]] const void* data() const { return m_data; }
  [[nodiscard]] DType dtype() const { return m_dtype; }
  [[nodiscard]] std::size_t count() const { return m_count; }
  [[nodiscard]] std::size_t bytes() const { return m_count * dtype_bytes(m_dtype); }

  // False when any canary byte changed since allocation or the last reset_guards().
  [[nodiscard]] bool guards_intact() const;
  void reset_guards();
  // How a fault in this buffer's guard pages names it ("output 'C'"); the label by default.
  void describe(std::string_view description);

private:
  HostBuffer() = default;
  GuardedRegion m_region;
  unsigned char* m_data = nullptr;  // inside m_region, past the leading canary
  DType m_dtype = DType::f32;
  std::size_t m_count = 0;
};

// splitmix64: the one PRNG behind every buffer initialisation, so a seed gives the same inputs
// on every machine and in every process.
class SplitMix64 {
public:
  explicit SplitMix64(std::uint64_t seed) : m_state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (m_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) with 53 random bits.
  double next_signed_unit() { return static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0; }

private:
  std::uint64_t m_state;
};

// Fills `count` elements at `data`: uniform gives floats in [-1, 1) and integers in [-8, 7]
// (with bounds: values in [a, b), integers rounded down); normal draws normal(a, b) (Box-Muller;
// integers rounded to nearest); zero and ones the constants; index gives element i the value i.
// `stream` separates the sequences of different args under one seed (pass the arg's position).
void fill_elements(DType dtype, void* data, std::size_t count, const BufferInit& init,
                   std::uint64_t seed, std::uint64_t stream);
// The same with the kind's default parameters. A file init fills nothing here: fill_input.
void fill_elements(DType dtype, void* data, std::size_t count, InitKind init, std::uint64_t seed,
                   std::uint64_t stream);

// Fills an input buffer by its init: a file init copies the file's elements (read_array_file:
// it must hold exactly `count` elements of `dtype`), every other kind is fill_elements. Errors
// ("runtime_error") name the file and what differs.
[[nodiscard]] Result<void> fill_input(DType dtype, void* data, std::size_t count,
                                      const BufferInit& init, std::uint64_t seed,
                                      std::uint64_t stream);

// What output buffers hold before a checked run, so that an element the kernel never writes
// fails the check instead of matching a reference that happened to leave zero there: the 16-bit
// word 0x7fff repeated, which reads as a quiet NaN in f16, f32 and f64 alike, and as 0x7fff7fff
// (i32) or 0x7fff7fff7fff7fff (i64). One half-word, so a device fills it with cuMemsetD16.
// Elements the reference leaves unwritten stay NaN on both sides and still match.
inline constexpr std::uint16_t k_sentinel_halfword = 0x7fff;

// Fills `count` elements of `dtype` at `data` with the sentinel.
void fill_sentinel(DType dtype, void* data, std::size_t count);

struct ElementMismatch {
  std::size_t index = 0;       // first differing element
  double got = 0, expected = 0;
  std::size_t differing = 0;   // how many elements differ in all
};

// Compares `count` elements. Floats match when |got - expected| <= atol + rtol * |expected|, or
// when both are equal (infinities) or both NaN; a NaN on one side only is a mismatch. Integers
// must be equal. nullopt when everything matches.
[[nodiscard]] std::optional<ElementMismatch> compare_elements(DType dtype, const void* got,
                                                              const void* expected,
                                                              std::size_t count, double rtol,
                                                              double atol);

// `value` with `precision` significant digits, as a mismatch message shows it.
[[nodiscard]] std::string format_value(double value, int precision);

// A run's outputs checked against what they must be, one output at a time; the failure names
// the first differing element (its value, the expected one, the tolerance) and counts them all.
class OutputCheck {
public:
  // Compares output `name` (`count` elements of `dtype`) within rtol/atol (compare_elements).
  void compare(const std::string& name, DType dtype, const void* got, const void* expected,
               std::size_t count, double rtol, double atol);
  // "<name>[i]: got x, expected y (rtol r, atol a); d of n elements differ"; nullopt when all
  // matched.
  [[nodiscard]] std::optional<std::string> failure() const;

private:
  std::size_t m_checked = 0, m_differing = 0;
  std::string m_first;
};

// Identity of the argument buffers a job needs (shape, seed and every arg's layout and init, a
// file init's file by its identity: a file rewritten at the same path is read again): runners
// reuse their buffers while it stays the same.
[[nodiscard]] std::string buffers_key(const BenchJob& job);

// The `count` elements of `dtype` in a file (an input's file init, an output's expected values):
// raw little-endian elements, or a .npy file (version 1-3, C order) whose descr is the dtype's
// ('<f4', '<f8', '<f2', '<i4', '<i8') and whose element count is `count`. Errors
// ("runtime_error") name the file and what differs.
[[nodiscard]] Result<std::vector<unsigned char>> read_array_file(const std::string& path,
                                                                 DType dtype, std::size_t count);

// A reference artifact is identified by its path and the file's identity (device, inode, size,
// mtime), so a rebuilt file at the same path is run again.
[[nodiscard]] std::string reference_identity(const std::string& path);

} // namespace ktune
