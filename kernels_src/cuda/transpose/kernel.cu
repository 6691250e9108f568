// transpose (CUDA): OUT = IN^T for a ROWS x COLS f32 matrix (OUT is COLS x ROWS), row-major.
//
// Tunables (-D from the config):
//   TILE        the square tile a block moves through shared memory (TILE x TILE);
//   BLOCK_ROWS  thread rows per block: a block is TILE x BLOCK_ROWS threads and each thread
//               moves TILE / BLOCK_ROWS elements of the tile;
//   PAD         extra columns per shared row (1 avoids bank conflicts on the transposed read).
// Reads and writes are both coalesced along rows; any ROWS and COLS are handled.
//
// ABI: extern "C" __global__ void transpose(const float* IN, float* OUT, int rows, int cols)
// launched with grid (ceil(COLS / TILE), ceil(ROWS / TILE)), block (TILE, BLOCK_ROWS), no dynamic
// shared memory.

#if !defined(TILE) || !defined(BLOCK_ROWS) || !defined(PAD)
#error "the tunables TILE, BLOCK_ROWS and PAD must be defined"
#endif
#if !defined(KTUNE_DTYPE_F32)
#error "transpose (CUDA) is f32 only"
#endif
#if TILE % BLOCK_ROWS != 0
#error "BLOCK_ROWS must divide TILE"
#endif

extern "C" __global__ void __launch_bounds__(TILE * BLOCK_ROWS)
transpose(const float* __restrict__ IN, float* __restrict__ OUT, int rows, int cols) {
  __shared__ float tile[TILE][TILE + PAD];

  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int in_col = static_cast<int>(blockIdx.x) * TILE + tx;
  const int in_row0 = static_cast<int>(blockIdx.y) * TILE;
#pragma unroll
  for (int j = ty; j < TILE; j += BLOCK_ROWS) {
    const int r = in_row0 + j;
    if (in_col < cols && r < rows) tile[j][tx] = IN[static_cast<size_t>(r) * cols + in_col];
  }
  __syncthreads();

  // This block writes OUT rows [blockIdx.x * TILE, +TILE) and columns [blockIdx.y * TILE, +TILE).
  const int out_col = static_cast<int>(blockIdx.y) * TILE + tx;
  const int out_row0 = static_cast<int>(blockIdx.x) * TILE;
#pragma unroll
  for (int j = ty; j < TILE; j += BLOCK_ROWS) {
    const int r = out_row0 + j;
    if (out_col < rows && r < cols) OUT[static_cast<size_t>(r) * rows + out_col] = tile[tx][j];
  }
}
