// softmax (CUDA): row-wise softmax of a ROWS x COLS f32 matrix, Y[r][c] = exp(X[r][c] - max_r) / sum_r.
//
// Tunables (-D from the config):
//   THREADS  threads per block;
//   GROUP    threads working on one row (a multiple of 32); a block handles THREADS / GROUP rows;
//   VEC      floats per global load and store (needs COLS divisible by it).
// One read pass keeps a running (max, sum of exp) pair per thread (online softmax), the pairs are
// combined across the warp with shuffles and across the group's warps in shared memory, then a
// second pass writes exp(x - max) / sum.
//
// ABI: extern "C" __global__ void softmax(const float* X, float* Y, int rows, int cols)
// launched with grid (ceil(ROWS / (THREADS / GROUP))), block (THREADS), no dynamic shared memory.

#if !defined(THREADS) || !defined(GROUP) || !defined(VEC)
#error "the tunables THREADS, GROUP and VEC must be defined"
#endif
#if !defined(KTUNE_DTYPE_F32)
#error "softmax (CUDA) is f32 only"
#endif
#if GROUP % 32 != 0 || THREADS % GROUP != 0
#error "GROUP must be a multiple of 32 that divides THREADS"
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

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

// (m, s): the running maximum and the sum of exp(x - m) of the values seen so far.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  if (m2 == negative_infinity()) return;
  if (m == negative_infinity()) {
    m = m2;
    s = s2;
    return;
  }
  const float top = fmaxf(m, m2);
  s = s * expf(m - top) + s2 * expf(m2 - top);
  m = top;
}

} // namespace

extern "C" __global__ void __launch_bounds__(THREADS)
softmax(const float* __restrict__ X, float* __restrict__ Y, int rows, int cols) {
  using V = typename VecOf<VEC>::type;
  constexpr int rows_per_block = THREADS / GROUP;
  constexpr int warps_per_group = GROUP / 32;
  __shared__ float shared_m[THREADS / 32];
  __shared__ float shared_s[THREADS / 32];

  const int tid = static_cast<int>(threadIdx.x);
  const int group = tid / GROUP;
  const int lane = tid % GROUP;
  const int row = static_cast<int>(blockIdx.x) * rows_per_block + group;
  const bool active = row < rows;
  const float* x = X + static_cast<size_t>(active ? row : 0) * cols;
  float* y = Y + static_cast<size_t>(active ? row : 0) * cols;

  float m = negative_infinity();
  float s = 0.0f;
  if (active) {
    for (int c = lane * VEC; c < cols; c += GROUP * VEC) {
      const V v = *reinterpret_cast<const V*>(x + c);
      const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
      for (int w = 0; w < VEC; ++w) {
        if (f[w] > m) {
          s = s * expf(m - f[w]) + 1.0f;
          m = f[w];
        } else {
          s += expf(f[w] - m);
        }
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    combine(m, s, m2, s2);
  }
  if (warps_per_group > 1) {
    const int warp = tid / 32;
    if (tid % 32 == 0) {
      shared_m[warp] = m;
      shared_s[warp] = s;
    }
    __syncthreads();
    const int first = group * warps_per_group;
    m = shared_m[first];
    s = shared_s[first];
    for (int w = 1; w < warps_per_group; ++w) combine(m, s, shared_m[first + w], shared_s[first + w]);
  }
  if (!active) return;

  const float inv = 1.0f / s;
  for (int c = lane * VEC; c < cols; c += GROUP * VEC) {
    V v = *reinterpret_cast<const V*>(x + c);
    float* f = reinterpret_cast<float*>(&v);
#pragma unroll
    for (int w = 0; w < VEC; ++w) f[w] = expf(f[w] - m) * inv;
    *reinterpret_cast<V*>(y + c) = v;
  }
}
