// reduce_sum (CUDA): OUT[0] += X[0] + ... + X[N-1], X in f32, OUT in f64.
//
// Tunables (-D from the config):
//   THREADS  threads per block;
//   ITEMS    vector loads per thread (unrolled);
//   VEC      floats per load (needs N divisible by it).
// A block sums THREADS * ITEMS * VEC consecutive elements in f32 (per thread, then across the
// warp with shuffles, then across warps in shared memory) and adds its partial sum to OUT with
// one double-precision atomicAdd, so the order of the blocks barely moves the result. OUT must
// hold 0 before a launch (the spec declares it inout with init = "zero" and the family inplace,
// so the runner restores it before every launch).
//
// ABI: extern "C" __global__ void reduce_sum(const float* X, double* OUT, int n)
// launched with grid (ceil(N / (THREADS * ITEMS * VEC))), block (THREADS), no dynamic shared memory.

#if !defined(THREADS) || !defined(ITEMS) || !defined(VEC)
#error "the tunables THREADS, ITEMS and VEC must be defined"
#endif
#if !defined(KTUNE_DTYPE_F32)
#error "reduce_sum (CUDA) is f32 only"
#endif
#if THREADS % 32 != 0
#error "THREADS must be a multiple of 32"
#endif
#if VEC != 1 && VEC != 2 && VEC != 4
#error "VEC must be 1, 2 or 4"
#endif

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

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
reduce_sum(const float* __restrict__ X, double* __restrict__ OUT, int n) {
  using V = typename VecOf<VEC>::type;
  constexpr int per_block = THREADS * ITEMS * VEC;
  __shared__ float partial[THREADS / 32];

  const int tid = static_cast<int>(threadIdx.x);
  const size_t base = static_cast<size_t>(blockIdx.x) * per_block;
  float sum = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const size_t i = base + (static_cast<size_t>(it) * THREADS + tid) * VEC;
    if (i < static_cast<size_t>(n)) {
      const V v = *reinterpret_cast<const V*>(X + i);
      const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
      for (int w = 0; w < VEC; ++w) sum += f[w];
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (tid % 32 == 0) partial[tid / 32] = sum;
  __syncthreads();
  if (tid < 32) {
    float total = tid < THREADS / 32 ? partial[tid] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_down_sync(0xffffffffu, total, offset);
    if (tid == 0) atomicAdd(OUT, static_cast<double>(total));
  }
}
