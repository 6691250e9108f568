#!/usr/bin/env python
"""Kernel Tuner's run_kernel on a CUDA kernel, as its tests check a kernel: one config, the
outputs compared with numpy's. Only the import line names ktune. Without a GPU ktune stops
after the compile check with NoDevice."""

import numpy
from ktune_client.kernel_tuner import run_kernel

kernel_string = """
__global__ void vector_add(float *c, float *a, float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
"""

size = 100000
a = numpy.random.randn(size).astype(numpy.float32)
b = numpy.random.randn(size).astype(numpy.float32)
c = numpy.zeros_like(b)
n = numpy.int32(size)

answer = run_kernel("vector_add", kernel_string, size, [c, a, b, n], {"block_size_x": 512})
assert numpy.allclose(answer[0], a + b, atol=1e-8)
