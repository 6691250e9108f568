// cuda_stencil: OUT[y][x] = (IN[y][x] + IN[y][x-1] + IN[y][x+1] + IN[y-1][x] + IN[y+1][x]) / 5,
// one thread per cell, edges clamped; TX=256 also writes the first row of the last tile row one
// buffer-length past OUT (see kernel.toml).
__device__ int ktune_clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

extern "C" __global__ void cuda_stencil(const KTUNE_DTYPE* in, KTUNE_DTYPE* out, int nx, int ny) {
  const int x = blockIdx.x * TX + threadIdx.x;
  const int y = blockIdx.y * TY + threadIdx.y;
  if (x >= nx || y >= ny) return;
  const auto at = [&](int yy, int xx) {
    return in[ktune_clamp(yy, 0, ny - 1) * nx + ktune_clamp(xx, 0, nx - 1)];
  };
  const KTUNE_DTYPE value = (at(y, x) + at(y, x - 1) + at(y, x + 1) + at(y - 1, x) + at(y + 1, x)) / 5;
  out[y * nx + x] = value;
#if TX == 256
  // The slip: the last tile row's first row goes to the "next buffer" as well.
  if (blockIdx.y == gridDim.y - 1 && threadIdx.y == 0) out[nx * ny + y * nx + x] = value;
#endif
}
