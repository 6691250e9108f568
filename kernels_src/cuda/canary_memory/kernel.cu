// canary_memory (CUDA): OUT[t] = the sum of X[t], X[t + S], X[t + 2S], ... (S the grid's thread
// count): one coalesced pass over a buffer larger than the L2.
//
// ABI: extern "C" __global__ void canary_memory(const float* X, float* OUT, int n)
// launched with grid (BLOCKS), block (THREADS).

extern "C" __global__ void canary_memory(const float* x, float* out, int n) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int stride = gridDim.x * blockDim.x;
  float acc = 0.0f;
  for (int i = t; i < n; i += stride) acc += x[i];
  out[t] = acc;
}
