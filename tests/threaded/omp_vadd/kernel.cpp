// omp_vadd: C = A + B on NTHREADS OpenMP threads.
// ABI: extern "C" void omp_vadd(void** args), args = {C, A, B, &N} (N is int64_t).
#include <cstdint>

extern "C" void omp_vadd(void** args) {
  float* __restrict c = static_cast<float*>(args[0]);
  const float* __restrict a = static_cast<const float*>(args[1]);
  const float* __restrict b = static_cast<const float*>(args[2]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[3]);
#pragma omp parallel for num_threads(NTHREADS) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
