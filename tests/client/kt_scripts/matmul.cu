// A tiled matrix multiplication C = A * B (row-major, WIDTH x WIDTH): each thread block computes
// a (block_size_y * tile_size_y) x (block_size_x * tile_size_x) tile of C, staging the rows of A
// it needs in shared memory (block_size_x == block_size_y * tile_size_y makes that square).
#define WIDTH 512

__global__ void matmul_kernel(float *C, const float *A, const float *B) {
    __shared__ float sA[block_size_y * tile_size_y][block_size_x];

    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int x = blockIdx.x * block_size_x * tile_size_x + tx;
    int y = blockIdx.y * block_size_y * tile_size_y + ty;
    float sum[tile_size_y][tile_size_x];
    for (int i = 0; i < tile_size_y; i++)
        for (int j = 0; j < tile_size_x; j++)
            sum[i][j] = 0.0f;

    for (int k = 0; k < WIDTH; k += block_size_x) {
        __syncthreads();
        for (int i = 0; i < tile_size_y; i++)
            sA[ty + block_size_y * i][tx] = A[(y + i * block_size_y) * WIDTH + k + tx];
        __syncthreads();
        for (int kb = 0; kb < block_size_x; kb++)
            for (int i = 0; i < tile_size_y; i++)
                for (int j = 0; j < tile_size_x; j++)
                    sum[i][j] += sA[ty + block_size_y * i][kb] *
                                 B[(k + kb) * WIDTH + x + j * block_size_x];
    }
    for (int i = 0; i < tile_size_y; i++)
        for (int j = 0; j < tile_size_x; j++)
            C[(y + i * block_size_y) * WIDTH + x + j * block_size_x] = sum[i][j];
}
