#!/usr/bin/env python
"""A CUDA reduction tuned the way Kernel Tuner's reduction example is (the problem size is a
tunable parameter, no grid divisor, a loop_unroll_factor parameter): only the import line names
ktune. The restriction is a function, as Kernel Tuner allows."""

import json
import os

import numpy
from ktune_client.kernel_tuner import tune_kernel


def tune():
    with open(os.path.join(os.path.dirname(__file__), "reduction.cu"), "r") as f:
        kernel_string = f.read()

    tune_params = dict()
    tune_params["block_size_x"] = [64, 256, 1024]
    tune_params["vector"] = [2**i for i in range(3)]
    tune_params["num_blocks"] = [1, 8]
    tune_params["loop_unroll_factor_0"] = [0, 1, 8]
    tune_params["use_shuffle"] = [0, 1]

    problem_size = "num_blocks"
    size = 1000000

    x = numpy.random.rand(size).astype(numpy.float32)
    sum_x = numpy.zeros(1).astype(numpy.float32)
    n = numpy.int32(size)

    args = [sum_x, x, n]
    answer = [numpy.array([x.sum(dtype=numpy.float64)], dtype=numpy.float32), None, None]

    def restrict(p):
        return p["vector"] * p["block_size_x"] <= 2048

    results, env = tune_kernel("sum_floats", kernel_string, problem_size, args, tune_params,
                               grid_div_x=[], verbose=True, answer=answer, atol=1.0,
                               restrictions=restrict)
    return results


if __name__ == "__main__":
    results = tune()
    with open("reduction.json", "w") as fp:
        json.dump(results, fp)
