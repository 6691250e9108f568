#!/usr/bin/env python
"""Kernel Tuner's helper modules after a tune: util, file_utils (T4 files), integration (a
results file and a header of device targets) and kernelbuilder.PythonKernel. Only the import
lines name ktune."""

import json
import subprocess

import numpy
from ktune_client.kernel_tuner import tune_kernel
from ktune_client.kernel_tuner import util
from ktune_client.kernel_tuner.file_utils import store_metadata_file, store_output_file
from ktune_client.kernel_tuner.integration import create_device_targets, store_results
from ktune_client.kernel_tuner.kernelbuilder import PythonKernel

kernel_string = """
void scale(float *c, const float *a, int n) {
    for (int i = 0; i < n; i += block)
        for (int j = i; j < i + block && j < n; j++)
            c[j] = a[j] * 3.0f;
}
"""
size = 40000
a = numpy.arange(size, dtype=numpy.float32)
c = numpy.zeros_like(a)
args = [c, a, numpy.int32(size)]
tune_params = {"pad": [0, 1], "block": [64, 1, 16]}   # not sorted: output keeps this order

results, env = tune_kernel("scale", kernel_string, size, args, tune_params,
                           answer=[3 * a, None, None], lang="C", quiet=True, verbose=True)

best = util.get_best_config(results, "time")
line = util.get_config_string(best, list(tune_params), units={"time": "ms"})
store_output_file("scale_T4.json", results, tune_params)
store_metadata_file("scale_metadata.json")
store_results("scale_results.json", "scale", kernel_string, tune_params, size, results, env)
create_device_targets("scale_targets.h", "scale_results.json")
create_device_targets("scale_store.h", kernel="scale")

# The header works as Kernel Tuner's does: compiled for this device, outside tuning.
target = "TARGET_" + "".join(ch if ch.isalnum() else "_" for ch in env["device_name"].strip())
probe = subprocess.run(["c++", "-x", "c++", "-", "-fsyntax-only", f"-D{target}"],
                       input='#include "scale_targets.h"\nstatic_assert(block == '
                             f'{best["block"]}, "device target");\nint main() {{}}\n',
                       text=True, capture_output=True)
assert probe.returncode == 0, probe.stderr

kernel = PythonKernel("scale", kernel_string, size, args, results_file="scale_results.json",
                      lang="C")
out = kernel(c, a, numpy.int32(size))

with open("helpers.json", "w") as fp:
    json.dump({"best": best, "line": line, "kernel_params": kernel.params,
               "python_kernel_ok": bool(numpy.allclose(out[0], 3 * a)),
               "outputs": len(out), "result_keys": list(results[0])}, fp, default=str)
