#!/usr/bin/env python
"""A CUDA matrix multiplication tuned the way Kernel Tuner's matmul example is: grid divisors,
a restriction, an answer and a metric; only the import line names ktune."""

import json
import os

import numpy
from ktune_client.kernel_tuner import tune_kernel


def tune():
    problem_size = (512, 512)

    A = numpy.random.randn(*problem_size).astype(numpy.float32)
    B = numpy.random.randn(*problem_size).astype(numpy.float32)
    C = numpy.zeros_like(A)

    args = [C, A, B]
    tune_params = dict()
    tune_params["block_size_x"] = [16 * 2**i for i in range(3)]
    tune_params["block_size_y"] = [2**i for i in range(6)]
    tune_params["tile_size_x"] = [2**i for i in range(4)]
    tune_params["tile_size_y"] = [2**i for i in range(4)]

    grid_div_x = ["block_size_x", "tile_size_x"]
    grid_div_y = ["block_size_y", "tile_size_y"]

    restrict = ["block_size_x==block_size_y*tile_size_y"]

    answer = [numpy.dot(A, B), None, None]

    metrics = dict()
    metrics["GFLOP/s"] = lambda p: (2 * 512**3 / 1e9) / (p["time"] / 1e3)

    res, env = tune_kernel("matmul_kernel", os.path.join(os.path.dirname(__file__), "matmul.cu"),
                           problem_size, args, tune_params, grid_div_y=grid_div_y,
                           grid_div_x=grid_div_x, restrictions=restrict, verbose=True,
                           iterations=32, metrics=metrics, answer=answer, atol=1e-3)

    with open("matmul.json", "w") as fp:
        json.dump(res, fp)


if __name__ == "__main__":
    tune()
