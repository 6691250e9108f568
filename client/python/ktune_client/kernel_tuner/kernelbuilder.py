"""Kernel Tuner's `kernel_tuner.kernelbuilder.PythonKernel`: a kernel at one config that Python
calls like a function. Each call runs it through run_kernel (C: a child process, so a crash is a
KernelRunError; CUDA: ktuned's compile check, then NoDevice without a GPU)."""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from ._run import run_kernel

__all__ = ["PythonKernel"]


class PythonKernel:
    """`kernel_name` from `kernel_string` at the config `params`, or at the config a results
    file of integration.store_results names for `device_name` (results_file=; the best one at
    its problem size when it has several sizes, the first device when none is named).

    `inputs` / `outputs` say which arguments are copied in / returned (default: all); a call
    returns the output arrays, in argument order."""

    def __init__(self, kernel_name: str, kernel_string: Any, problem_size: Any,
                 arguments: Sequence[Any], params: Optional[dict[str, Any]] = None,
                 inputs: Optional[Sequence[bool]] = None,
                 outputs: Optional[Sequence[bool]] = None, device: int = 0, platform: int = 0,
                 block_size_names: Optional[Sequence[str]] = None, grid_div_x: Any = None,
                 grid_div_y: Any = None, grid_div_z: Any = None, smem_args: Any = None,
                 cmem_args: Any = None, texmem_args: Any = None, lang: Optional[str] = None,
                 defines: Optional[dict[str, Any]] = None, results_file: Optional[str] = None,
                 *, device_name: Optional[str] = None,
                 compiler_options: Optional[Sequence[str]] = None) -> None:
        if params is None:
            if results_file is None:
                raise TypeError("PythonKernel: give params (the config) or results_file (a "
                                "file of integration.store_results)")
            params = _params_from_results(results_file, device_name)
        self.kernel_name = kernel_name
        self.kernel_string = kernel_string
        self.problem_size = problem_size
        self.params = dict(params)
        self.arguments = list(arguments)
        count = len(self.arguments)
        self.inputs = list(inputs) if inputs is not None else [True] * count
        self.outputs = list(outputs) if outputs is not None else [True] * count
        for what, flags in (("inputs", self.inputs), ("outputs", self.outputs)):
            if len(flags) != count:
                raise ValueError(f"PythonKernel: {what} has {len(flags)} entries for {count} "
                                 "arguments (fix: one bool per argument)")
        self._options = dict(grid_div_x=grid_div_x, grid_div_y=grid_div_y,
                             grid_div_z=grid_div_z, lang=lang, device=device, platform=platform,
                             smem_args=smem_args, cmem_args=cmem_args, texmem_args=texmem_args,
                             defines=defines, block_size_names=block_size_names,
                             compiler_options=compiler_options, quiet=True)

    def update_gpu_args(self, args: Sequence[Any]) -> list[Any]:
        """Takes the arguments marked as inputs from `args` for the next run."""
        if len(args) != len(self.arguments):
            raise ValueError(f"PythonKernel: {len(args)} arguments, expected "
                             f"{len(self.arguments)}")
        self.arguments = [a if self.inputs[i] else self.arguments[i] for i, a in enumerate(args)]
        return self.arguments

    def run_kernel(self, args: Sequence[Any]) -> list[Any]:
        """Runs the kernel on `args` once; every argument as run_kernel returns them."""
        self.update_gpu_args(args)
        return run_kernel(self.kernel_name, self.kernel_string, self.problem_size,
                          self.arguments, self.params, **self._options)

    def get_gpu_result(self, results: Sequence[Any]) -> list[Any]:
        """The output arrays among `results` (a run's arguments), in argument order."""
        return [r for i, r in enumerate(results) if self.outputs[i] and hasattr(r, "shape")]

    def __call__(self, *args: Any) -> list[Any]:
        """Runs the kernel on `args` (all arguments, as passed to the constructor) and returns
        the output arrays."""
        return self.get_gpu_result(self.run_kernel(args))


def _params_from_results(results_file: str, device_name: Optional[str]) -> dict[str, Any]:
    with open(results_file, encoding="utf-8") as f:
        stored = json.load(f)
    data = stored.get("data") or []
    if device_name is not None:
        data = [d for d in data if d.get("device_name") == device_name]
    if not data:
        raise ValueError(f"PythonKernel: {results_file} has no results"
                         + (f" for device {device_name!r}" if device_name else ""))
    objective = stored.get("objective", "time")
    pick = max if stored.get("objective_higher_is_better") else min
    best = pick(data, key=lambda d: d[objective])
    return {k: best[k] for k in stored["tune_params_keys"]}
