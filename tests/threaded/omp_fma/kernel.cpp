// omp_fma: Y[i] = 64 dependent multiply-adds of X[i], on NTHREADS OpenMP threads.
// ABI: extern "C" void omp_fma(void** args), args = {X, Y, &N} (N is int64_t).
#include <cstdint>

extern "C" void omp_fma(void** args) {
  const float* __restrict x = static_cast<const float*>(args[0]);
  float* __restrict y = static_cast<float*>(args[1]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[2]);
#pragma omp parallel for num_threads(NTHREADS) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    float a = v;
    for (int k = 0; k < 64; ++k) a = a * 0.999f + v;
    y[i] = a;
  }
}
