// reduce_sum: OUT[0] = X[0] + ... + X[N-1]; element type KTUNE_DTYPE.
//
// Tunables (-D from the config):
//   LANES  independent accumulators: with one, every add waits for the previous one; with a
//          SIMD register's worth or more, the adds vectorize and overlap;
//   CHUNK  elements summed into the lanes before they are folded into the total, which bounds
//          the magnitude (and so the rounding error) of the running sums.
//
// ABI: extern "C" void reduce_sum(void** args), args = {X, OUT, &N} (N is int64_t).
#include <cstdint>

#ifndef KTUNE_DTYPE
#error "KTUNE_DTYPE (the element type) must be defined"
#endif
#if !defined(LANES) || !defined(CHUNK)
#error "the tunables LANES and CHUNK must be defined"
#endif
#if LANES <= 0 || CHUNK <= 0
#error "LANES and CHUNK must be positive"
#endif

namespace {

using T = KTUNE_DTYPE;

T sum_chunk(const T* __restrict x, std::int64_t len) {
  T acc[LANES] = {};
  std::int64_t i = 0;
  for (; i + LANES <= len; i += LANES)
    for (int l = 0; l < LANES; ++l) acc[l] += x[i + l];
  for (int l = 0; i < len; ++i, ++l) acc[l] += x[i];
  // Fold the lanes pairwise.
  for (int width = LANES; width > 1;) {
    const int half = width / 2;
    for (int l = 0; l < half; ++l) acc[l] += acc[width - 1 - l];
    width -= half;
  }
  return acc[0];
}

} // namespace

extern "C" void reduce_sum(void** args) {
  const T* x = static_cast<const T*>(args[0]);
  T* out = static_cast<T*>(args[1]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[2]);
  T total = T(0);
  for (std::int64_t start = 0; start < n; start += CHUNK)
    total += sum_chunk(x + start, n - start < CHUNK ? n - start : CHUNK);
  out[0] = total;
}
