// canary_memory: OUT[0] = X[0] + ... + X[N-1] with LANES independent f32 accumulators, summed in
// f64: one pass over a buffer larger than the caches.
#include <cstdint>

extern "C" void canary_memory(void** args) {
  const float* x = static_cast<const float*>(args[0]);
  double* out = static_cast<double*>(args[1]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[2]);
  float acc[LANES] = {};
  std::int64_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    for (int l = 0; l < LANES; ++l) acc[l] += x[i + l];
  }
  double total = 0;
  for (; i < n; ++i) total += x[i];
  for (int l = 0; l < LANES; ++l) total += acc[l];
  out[0] = total;
}
