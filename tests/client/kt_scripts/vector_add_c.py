#!/usr/bin/env python
"""A C kernel tuned the way Kernel Tuner's C example is (numpy inputs, an answer, two tunable
parameters, compiler_options): only the import line names ktune."""

import json

import numpy
from ktune_client.kernel_tuner import tune_kernel

kernel_string = """
#include <omp.h>

extern "C" float vector_add(float *c, const float *a, const float *b, int n) {
    double start = omp_get_wtime();
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int i = 0; i < n; i += unroll) {
        for (int u = 0; u < unroll && i + u < n; u++) {
            c[i + u] = a[i + u] + b[i + u];
        }
    }
    return (float)((omp_get_wtime() - start) * 1e3);
}
"""

size = 100000

a = numpy.random.randn(size).astype(numpy.float32)
b = numpy.random.randn(size).astype(numpy.float32)
c = numpy.zeros_like(b)
n = numpy.int32(size)

args = [c, a, b, n]

tune_params = dict()
tune_params["nthreads"] = [1, 2]
tune_params["unroll"] = [1, 2, 4]

answer = [a + b, None, None, None]

results, env = tune_kernel("vector_add", kernel_string, size, args, tune_params, answer=answer,
                           compiler_options=["-fopenmp", "-O3"])

with open("vector_add.json", "w") as fp:
    json.dump({"results": results, "env": env}, fp, default=str)
