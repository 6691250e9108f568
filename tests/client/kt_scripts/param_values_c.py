#!/usr/bin/env python
"""Tunable parameters of every kind Kernel Tuner takes (it writes each as #define NAME value):
a float, a bool and a string that names a type. Only the import line names ktune."""

import json

import numpy
from ktune_client.kernel_tuner import tune_kernel

kernel_string = """
#define True 1
#define False 0
void axpy(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) {
        acc_t v = (acc_t)x[i] * (acc_t)ALPHA;
        y[i] = use_add ? (float)(v + (acc_t)y[i]) : (float)v;
    }
}
"""

size = 20000
x = numpy.random.randn(size).astype(numpy.float32)
y = numpy.ones(size, dtype=numpy.float32)

tune_params = dict()
tune_params["ALPHA"] = [0.5, 2.0]
tune_params["use_add"] = [True, False]
tune_params["acc_t"] = ["float", "double"]

restrictions = ["ALPHA > 1 or use_add"]      # over the values, as Kernel Tuner evaluates it

results, env = tune_kernel("axpy", kernel_string, size, [y, x, numpy.int32(size)], tune_params,
                           restrictions=restrictions, lang="C", verbose=True)

with open("param_values.json", "w") as fp:
    json.dump({"results": results, "env": env}, fp, default=str)
