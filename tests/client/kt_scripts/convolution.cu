// A 2D convolution of an image with a filter of filter_height x filter_width (macros), one
// output tile of (block_size_x * tile_size_x) x (block_size_y * tile_size_y) per thread block,
// the input tile staged in shared memory (padded when use_padding is 1), read through the
// read-only cache when read_only is 1.
#define image_height 256
#define image_width 256
#define filter_height 7
#define filter_width 7
#define input_width (image_width + filter_width - 1)

#define tile_w (block_size_x * tile_size_x + filter_width - 1)
#define tile_h (block_size_y * tile_size_y + filter_height - 1)
#if use_padding == 1
#define padded_w (tile_w + 1)
#else
#define padded_w tile_w
#endif

#if read_only == 1
#define LOAD(p) __ldg(p)
#else
#define LOAD(p) (*(p))
#endif

__global__ void convolution_kernel(float *output, const float *input, const float *filter) {
    __shared__ float sh_input[tile_h][padded_w];
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int bx = blockIdx.x * block_size_x * tile_size_x;
    int by = blockIdx.y * block_size_y * tile_size_y;

    for (int i = ty; i < tile_h; i += block_size_y)
        for (int j = tx; j < tile_w; j += block_size_x)
            sh_input[i][j] = LOAD(&input[(by + i) * input_width + bx + j]);
    __syncthreads();

    for (int ti = 0; ti < tile_size_y; ti++) {
        for (int tj = 0; tj < tile_size_x; tj++) {
            int i = ty + ti * block_size_y;
            int j = tx + tj * block_size_x;
            float sum = 0.0f;
            for (int fi = 0; fi < filter_height; fi++)
                for (int fj = 0; fj < filter_width; fj++)
                    sum += sh_input[i + fi][j + fj] * LOAD(&filter[fi * filter_width + fj]);
            output[(by + i) * image_width + bx + j] = sum;
        }
    }
}
