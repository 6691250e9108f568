// sgemm: C = A * B, row-major f32; A is M x K, B is K x N, C is M x N.
//
// Tunables (-D from the config): BM x BN blocks of C, accumulated over BK-deep slices of K; the
// innermost loop walks a row of the block UNROLL columns per step. The straightforward blocked
// loop nest a first tuning example uses, not a packed micro-kernel (kernels_src/gemm is that).
//
// ABI: extern "C" void sgemm(void** args), args = {A, B, C, &M, &N, &K} (scalars are int64_t).
#include <cstdint>

#if !defined(BM) || !defined(BN) || !defined(BK) || !defined(UNROLL)
#error "the tunables BM, BN, BK and UNROLL must be defined"
#endif

extern "C" void sgemm(void** args) {
  const float* __restrict a = static_cast<const float*>(args[0]);
  const float* __restrict b = static_cast<const float*>(args[1]);
  float* __restrict c = static_cast<float*>(args[2]);
  const std::int64_t m = *static_cast<const std::int64_t*>(args[3]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[4]);
  const std::int64_t k = *static_cast<const std::int64_t*>(args[5]);

  for (std::int64_t i = 0; i < m * n; ++i) c[i] = 0.0f;
  for (std::int64_t i0 = 0; i0 < m; i0 += BM) {
    const std::int64_t i1 = i0 + BM < m ? i0 + BM : m;
    for (std::int64_t j0 = 0; j0 < n; j0 += BN) {
      const std::int64_t j1 = j0 + BN < n ? j0 + BN : n;
      for (std::int64_t p0 = 0; p0 < k; p0 += BK) {
        const std::int64_t p1 = p0 + BK < k ? p0 + BK : k;
        for (std::int64_t i = i0; i < i1; ++i) {
          float* crow = c + i * n;
          for (std::int64_t p = p0; p < p1; ++p) {
            const float av = a[i * k + p];
            const float* brow = b + p * n;
            std::int64_t j = j0;
            for (; j + UNROLL <= j1; j += UNROLL) {
#pragma GCC unroll 8
              for (int u = 0; u < UNROLL; ++u) crow[j + u] += av * brow[j + u];
            }
            for (; j < j1; ++j) crow[j] += av * brow[j];
          }
        }
      }
    }
  }
}
