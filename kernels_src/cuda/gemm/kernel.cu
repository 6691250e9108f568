// gemm (CUDA): C = A * B in f32, row-major; A is M x K, B is K x N, C is M x N.
//
// Tunables (-D from the config):
//   BLOCK_M, BLOCK_N  the C tile one thread block computes;
//   BLOCK_K           the depth of the A and B tiles staged in shared memory per step;
//   TM, TN            the register tile of one thread (TM x TN accumulators);
//   VEC               the width of global loads (1, 2 or 4 floats; needs K and N divisible by it).
// A block has (BLOCK_M / TM) * (BLOCK_N / TN) threads. Each step stages A (transposed, so a
// thread's TM values of one k are contiguous) and B in static shared memory, then every thread
// accumulates its TM x TN outer products over BLOCK_K. Any M, N, K is handled: loads outside the
// matrices read zeros and stores outside C are skipped.
//
// ABI: extern "C" __global__ void gemm(const float* A, const float* B, float* C, int M, int N, int K)
// launched with grid (ceil(N / BLOCK_N), ceil(M / BLOCK_M)), block (threads, 1, 1), no dynamic
// shared memory.

#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(BLOCK_K) || !defined(TM) || !defined(TN) || !defined(VEC)
#error "the tunables BLOCK_M, BLOCK_N, BLOCK_K, TM, TN and VEC must be defined"
#endif
#if !defined(KTUNE_DTYPE_F32)
#error "gemm (CUDA) is f32 only"
#endif
#if BLOCK_M % TM != 0 || BLOCK_N % TN != 0
#error "TM must divide BLOCK_M and TN must divide BLOCK_N"
#endif
#if VEC != 1 && VEC != 2 && VEC != 4
#error "VEC must be 1, 2 or 4"
#endif
#if BLOCK_K % VEC != 0 || BLOCK_N % VEC != 0
#error "VEC must divide BLOCK_K and BLOCK_N"
#endif

#define GEMM_THREADS ((BLOCK_M / TM) * (BLOCK_N / TN))

namespace {

template <int W>
struct VecOf;
template <>
struct VecOf<1> {
  using type = float;
};
template <>
struct VecOf<2> {
  using type = float2;
};
template <>
struct VecOf<4> {
  using type = float4;
};

// W consecutive floats from 4W-byte aligned memory.
template <int W>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float (&out)[W]) {
  const typename VecOf<W>::type v = *reinterpret_cast<const typename VecOf<W>::type*>(p);
  const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
  for (int i = 0; i < W; ++i) out[i] = f[i];
}

template <int W>
__device__ __forceinline__ void store_vec(float* p, const float* in) {
  typename VecOf<W>::type v;
  float* f = reinterpret_cast<float*>(&v);
#pragma unroll
  for (int i = 0; i < W; ++i) f[i] = in[i];
  *reinterpret_cast<typename VecOf<W>::type*>(p) = v;
}

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

} // namespace

extern "C" __global__ void __launch_bounds__(GEMM_THREADS)
gemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
  constexpr int threads = GEMM_THREADS;
  constexpr int a_vectors = BLOCK_M * BLOCK_K / VEC;   // per stage
  constexpr int b_vectors = BLOCK_K * BLOCK_N / VEC;
  constexpr int store_width = TN % VEC == 0 ? VEC : 1;

  __shared__ __align__(16) float As[BLOCK_K][BLOCK_M];  // A tile, transposed
  __shared__ __align__(16) float Bs[BLOCK_K][BLOCK_N];

  const int tid = static_cast<int>(threadIdx.x);
  const int row0 = static_cast<int>(blockIdx.y) * BLOCK_M;
  const int col0 = static_cast<int>(blockIdx.x) * BLOCK_N;
  const int ty = tid / (BLOCK_N / TN);
  const int tx = tid % (BLOCK_N / TN);

  float acc[TM][TN];
#pragma unroll
  for (int m = 0; m < TM; ++m) {
#pragma unroll
    for (int n = 0; n < TN; ++n) acc[m][n] = 0.0f;
  }

  for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
#pragma unroll
    for (int j = 0; j < ceil_div(a_vectors, threads); ++j) {
      const int i = j * threads + tid;
      if (a_vectors % threads == 0 || i < a_vectors) {
        const int r = i / (BLOCK_K / VEC);
        const int kv = (i % (BLOCK_K / VEC)) * VEC;
        const int gr = row0 + r;
        const int gk = k0 + kv;
        float v[VEC];
        if (gr < M && gk < K) {
          load_vec<VEC>(A + static_cast<size_t>(gr) * K + gk, v);
        } else {
#pragma unroll
          for (int w = 0; w < VEC; ++w) v[w] = 0.0f;
        }
#pragma unroll
        for (int w = 0; w < VEC; ++w) As[kv + w][r] = v[w];
      }
    }
#pragma unroll
    for (int j = 0; j < ceil_div(b_vectors, threads); ++j) {
      const int i = j * threads + tid;
      if (b_vectors % threads == 0 || i < b_vectors) {
        const int kk = i / (BLOCK_N / VEC);
        const int nv = (i % (BLOCK_N / VEC)) * VEC;
        const int gk = k0 + kk;
        const int gn = col0 + nv;
        float v[VEC];
        if (gk < K && gn < N) {
          load_vec<VEC>(B + static_cast<size_t>(gk) * N + gn, v);
        } else {
#pragma unroll
          for (int w = 0; w < VEC; ++w) v[w] = 0.0f;
        }
        store_vec<VEC>(&Bs[kk][nv], v);
      }
    }
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < BLOCK_K; ++kk) {
      float a[TM];
      float b[TN];
#pragma unroll
      for (int m = 0; m < TM; ++m) a[m] = As[kk][ty * TM + m];
#pragma unroll
      for (int n = 0; n < TN; ++n) b[n] = Bs[kk][tx * TN + n];
#pragma unroll
      for (int m = 0; m < TM; ++m) {
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = fmaf(a[m], b[n], acc[m][n]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int m = 0; m < TM; ++m) {
    const int row = row0 + ty * TM + m;
    if (row >= M) continue;
#pragma unroll
    for (int n = 0; n < TN; n += store_width) {
      const int col = col0 + tx * TN + n;
      if (col < N) store_vec<store_width>(C + static_cast<size_t>(row) * N + col, &acc[m][n]);
    }
  }
}
