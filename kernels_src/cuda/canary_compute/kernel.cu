// canary_compute (CUDA): OUT[t] = x_N for x_0 = 1 + t * 1e-7, x <- x * 0.999999 + 1e-6, one
// recurrence per thread of a fixed grid: dependent FMAs, no memory traffic but one store.
//
// ABI: extern "C" __global__ void canary_compute(float* OUT, int n)
// launched with grid (BLOCKS), block (THREADS).

extern "C" __global__ void canary_compute(float* out, int n) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  float x = 1.0f + 1e-7f * static_cast<float>(t);
  float y = 1.0f - 1e-7f * static_cast<float>(t);
  for (int i = 0; i < n; ++i) {
    x = fmaf(x, 0.999999f, 1e-6f);
    y = fmaf(y, 0.999999f, 1e-6f);
  }
  out[t] = x + y;
}
