#!/usr/bin/env python
"""A CUDA convolution tuned the way Kernel Tuner's convolution example is (toggles, a
restriction with `or`, grid divisors, an answer): only the import line names ktune."""

import json
import os

import numpy
from ktune_client.kernel_tuner import tune_kernel


def tune():
    with open(os.path.join(os.path.dirname(__file__), "convolution.cu"), "r") as f:
        kernel_string = f.read()

    tune_params = dict()
    tune_params["block_size_x"] = [16 * i for i in range(1, 5)]
    tune_params["block_size_y"] = [2**i for i in range(4)]
    tune_params["tile_size_x"] = [1, 2]
    tune_params["tile_size_y"] = [1, 2]
    tune_params["use_padding"] = [0, 1]
    tune_params["read_only"] = [0, 1]

    restrict = ["use_padding==0 or (block_size_x % 32 != 0)"]

    problem_size = (256, 256)
    size = numpy.prod(problem_size)
    input_size = (problem_size[0] + 7 - 1) * (problem_size[1] + 7 - 1)

    output_image = numpy.zeros(size).astype(numpy.float32)
    input_image = numpy.random.randn(input_size).astype(numpy.float32)
    filter_weights = numpy.random.randn(7 * 7).astype(numpy.float32)

    image = input_image.reshape(256 + 6, 256 + 6)
    weights = filter_weights.reshape(7, 7)
    reference = numpy.zeros((256, 256), dtype=numpy.float32)
    for fi in range(7):
        for fj in range(7):
            reference += weights[fi, fj] * image[fi:fi + 256, fj:fj + 256]

    args = [output_image, input_image, filter_weights]

    grid_div_x = ["block_size_x", "tile_size_x"]
    grid_div_y = ["block_size_y", "tile_size_y"]

    results, env = tune_kernel("convolution_kernel", kernel_string, problem_size, args,
                               tune_params, grid_div_y=grid_div_y, grid_div_x=grid_div_x,
                               verbose=True, restrictions=restrict,
                               answer=[reference.ravel(), None, None], atol=1e-3)
    return results, env


if __name__ == "__main__":
    results = tune()
    with open("convolution.json", "w") as fp:
        json.dump(results, fp)
