// See kernel.toml: the config P = 7 does not compile.
#if P == 7
#error "P = 7 does not compile, on purpose"
#endif
extern "C" __global__ void cuda_compile_error(const KTUNE_DTYPE* x, KTUNE_DTYPE* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = P * x[i];
}
