// See kernel.toml: FAULT selects how the candidate behaves.
extern "C" __global__ void cuda_faults(const KTUNE_DTYPE* x, KTUNE_DTYPE* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
#if FAULT == 1
  if (i == 0) *reinterpret_cast<volatile float*>(16) = 1.0f;
#endif
  if (i < n) y[i] = 2 * x[i];
}
