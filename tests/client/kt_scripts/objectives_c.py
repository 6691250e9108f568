#!/usr/bin/env python
"""Kernel Tuner's metrics as objectives: GFLOP/s with objective_higher_is_better, and
Kernel Tuner 1.4's objectives= over two metrics (a Pareto front). Only the import line names
ktune."""

import json
import sys

import numpy
from ktune_client.kernel_tuner import tune_kernel

kernel_string = """
void triad(float *c, const float *a, const float *b, int n) {
    for (int r = 0; r < repeat; r++)
        for (int i = 0; i < n; i += unroll)
            for (int u = 0; u < unroll && i + u < n; u++)
                c[i + u] = a[i + u] * 2.0f + b[i + u];
}
"""

size = 50000
a = numpy.random.randn(size).astype(numpy.float32)
b = numpy.random.randn(size).astype(numpy.float32)
c = numpy.zeros_like(b)
args = [c, a, b, numpy.int32(size)]

tune_params = dict()
tune_params["unroll"] = [1, 4]
tune_params["repeat"] = [1, 2]

metrics = dict()
metrics["GFLOP/s"] = lambda p: 2 * size * p["repeat"] / 1e9 / (p["time"] / 1e3)
metrics["energy_proxy"] = lambda p: p["time"] * (1 + p["unroll"])   # some second cost

answer = [a * 2 + b, None, None, None]

results, env = tune_kernel("triad", kernel_string, size, args, tune_params, answer=answer,
                           metrics=metrics, objective="GFLOP/s", objective_higher_is_better=True,
                           lang="C", seed=3, parallel=True, verbose="-v" in sys.argv)

multi, multi_env = tune_kernel("triad", kernel_string, size, args, tune_params, answer=answer,
                               metrics=metrics, lang="C", quiet=True,
                               objectives={"time": False, "energy_proxy": False})

with open("objectives.json", "w") as fp:
    json.dump({"results": results, "env": env, "multi": multi, "multi_env": multi_env}, fp,
              default=str)
