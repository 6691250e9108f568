// A sum of n floats: each thread accumulates `vector` elements at a time in a grid-stride loop
// over num_blocks blocks, the block reduces in shared memory (or with warp shuffles when
// use_shuffle is 1) and adds its partial sum to out[0] atomically.
__global__ void sum_floats(float *out, const float *in, int n) {
    __shared__ float partial[block_size_x];
    int tid = threadIdx.x;
    int stride = block_size_x * num_blocks * vector;
    float sum = 0.0f;
    #pragma unroll loop_unroll_factor_0
    for (int i = (blockIdx.x * block_size_x + tid) * vector; i < n; i += stride) {
        for (int v = 0; v < vector && i + v < n; v++) {
            sum += in[i + v];
        }
    }
    partial[tid] = sum;
    __syncthreads();
#if use_shuffle == 1
    for (int s = block_size_x / 2; s >= 32; s /= 2) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid < 32) {
        float v = tid < block_size_x ? partial[tid] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_down_sync(0xffffffff, v, offset);
        if (tid == 0) atomicAdd(out, v);
    }
#else
    for (int s = block_size_x / 2; s > 0; s /= 2) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, partial[0]);
#endif
}
