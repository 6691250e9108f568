// A blocked SGEMM as written for Kernel Tuner's C backend: C = A * B, row-major, typed
// arguments, tunables as #defines. ktune calls it through its declared signature (no adapter).
#ifndef BM
#define BM 32
#endif
#ifndef BN
#define BN 32
#endif
#ifndef BK
#define BK 32
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }

extern "C" void gemm_blocked(const float* A, const float* B, float* C, int M, int N, int K) {
  for (int i = 0; i < M * N; ++i) C[i] = 0.0f;
  for (int i0 = 0; i0 < M; i0 += BM) {
    const int i1 = min_int(i0 + BM, M);
    for (int k0 = 0; k0 < K; k0 += BK) {
      const int k1 = min_int(k0 + BK, K);
      for (int j0 = 0; j0 < N; j0 += BN) {
        const int j1 = min_int(j0 + BN, N);
        for (int i = i0; i < i1; ++i) {
          for (int k = k0; k < k1; k += UNROLL) {
            for (int u = 0; u < UNROLL && k + u < k1; ++u) {
              const float a = A[i * K + k + u];
              const float* b = B + (k + u) * N;
              for (int j = j0; j < j1; ++j) C[i * N + j] += a * b[j];
            }
          }
        }
      }
    }
  }
}
