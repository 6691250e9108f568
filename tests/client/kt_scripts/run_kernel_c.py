#!/usr/bin/env python
"""Kernel Tuner's run_kernel on a C kernel, as its C example's test does: one config, the
outputs back as numpy arrays. Only the import line names ktune."""

import json

import numpy
from ktune_client.kernel_tuner import run_kernel

kernel_string = """
#include <omp.h>

extern "C" float vector_add(float *c, const float *a, const float *b, int n) {
    double start = omp_get_wtime();
    #pragma omp parallel for num_threads(nthreads)
    for (int i = 0; i < n; i++) {
        c[i] = a[i] * SCALE + b[i];
    }
    return (float)((omp_get_wtime() - start) * 1e3);
}
"""

size = 10000
a = numpy.random.randn(size).astype(numpy.float32)
b = numpy.random.randn(size).astype(numpy.float32)
c = numpy.zeros_like(b)
n = numpy.int32(size)

params = {"nthreads": 2, "SCALE": 1.0}   # any value Kernel Tuner writes as #define: a float too
result = run_kernel("vector_add", kernel_string, size, [c, a, b, n], params,
                    compiler_options=["-O3"])

assert numpy.allclose(result[0], a + b), "c is not a + b"
assert result[1] is not a and numpy.array_equal(result[1], a)
assert result[3] == n
assert not c.any(), "run_kernel modified the caller's array"
with open("run_kernel.json", "w") as fp:
    json.dump({"max_error": float(numpy.abs(result[0] - (a + b)).max()),
               "types": [type(r).__name__ for r in result]}, fp)
