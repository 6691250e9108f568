"""Kernel Tuner's `run_kernel`: one config of a kernel run once, its arguments returned as Kernel
Tuner returns them (arrays as numpy arrays holding what the kernel left in them, scalars as
given).

C kernels are compiled as ktune's host compiler compiles a candidate ($KTUNE_CXX or c++ with
-std=c++17 -O3 -march=native -shared -fPIC, then compiler_options) with the same shim
tune_kernel writes, and called in a child Python process: a kernel that crashes, hangs or exits
ends that process, and run_kernel raises KernelRunError naming the signal or the deadline; the
calling process lives on. CUDA kernels are written as a family and loaded by ktuned, compiled
with nvrtc (the compile check, no GPU needed) and submitted as a one-config tune: without a
usable GPU that raises NoDevice after saying the compile check passed; with one, the outputs
cannot be read back from ktuned's workers yet (NotSupported, docs/kernel-tuner.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any, Optional, Sequence

from ..daemon import Daemon
from ..errors import KtuneError, NoDevice, SpecError
from . import _tune

_COMPILE_FLAGS = ["-std=c++17", "-O3", "-march=native", "-shared", "-fPIC"]

# The child: loads the compiled library, calls the shim once with the arguments and saves every
# array argument back. Its argument is the run directory (run.json, arg<i>.npy, kernel.so).
_CHILD = r"""
import ctypes, json, os, sys
import numpy
run_dir = sys.argv[1]
with open(os.path.join(run_dir, "run.json")) as f:
    spec = json.load(f)
lib = ctypes.CDLL(os.path.join(run_dir, "kernel.so"), mode=ctypes.RTLD_LOCAL)
scalar_types = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32,
                "i64": ctypes.c_int64}
keep = []
pointers = (ctypes.c_void_p * len(spec["args"]))()
for i, arg in enumerate(spec["args"]):
    if arg["kind"] == "buffer":
        array = numpy.load(os.path.join(run_dir, f"arg{i}.npy"))
        keep.append(array)
        pointers[i] = array.ctypes.data
    else:
        value = scalar_types[arg["dtype"]](arg["value"])
        keep.append(value)
        pointers[i] = ctypes.addressof(value)
entry = lib.ktune_kt_entry
entry.argtypes = [ctypes.c_void_p]
entry.restype = None
entry(pointers)
for i, arg in enumerate(spec["args"]):
    if arg["kind"] == "buffer":
        numpy.save(os.path.join(run_dir, f"out{i}.npy"), keep[i], allow_pickle=False)
sys.stdout.flush()
os._exit(0)
"""


class KernelRunError(KtuneError):
    """run_kernel's kernel did not run to its end: `code` is compile_error, crash, timeout or
    runtime_error, the message says what happened (the compiler's log, the signal)."""


def _params(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise TypeError("params: expected a dict of parameter name -> value (one value each, "
                        f"as run_kernel runs one config), found {type(params).__name__}")
    out = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"params: {name!r} is not an identifier (it becomes a #define)")
        if isinstance(value, (list, tuple)):
            raise TypeError(f"params[{name!r}]: expected one value, found a "
                            f"{type(value).__name__} (fix: run_kernel runs one config; give "
                            "each parameter its value, tune_kernel takes lists)")
        out[name] = value
    return out


def _define_value(value: Any) -> str:
    """A parameter value as Kernel Tuner writes it after `#define NAME`: its str()."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    return str(value)


def _problem(problem_size: Any, params: dict[str, Any]) -> list[int]:
    """Kernel Tuner's problem size at a config: integers as they are, strings evaluated."""
    if callable(problem_size):
        problem_size = problem_size(params)
    if isinstance(problem_size, (str, int)) or hasattr(problem_size, "__index__"):
        problem_size = (problem_size,)
    out = []
    for i, entry in enumerate(problem_size):
        if isinstance(entry, str):
            entry = _tune._kt_eval(entry, params)
        try:
            out.append(int(entry))
        except (TypeError, ValueError) as e:
            raise TypeError(f"problem_size[{i}]: {entry!r} is not an integer") from e
    return (out + [1, 1, 1])[:3]


def _grid_defines(source: str, problem: list[int], params: dict[str, Any], grid_div: list[Any],
                  block_size_names: list[str]) -> list[str]:
    """grid_size_x/y/z at this config, where the source uses them (Kernel Tuner's rule: the
    problem size divided by the product of the axis' divisors, rounded up)."""
    if "grid_size_" not in source:
        return []
    lines = []
    for i, axis in enumerate("xyz"):
        div = grid_div[i]
        if div is None:
            div = [block_size_names[i]] if block_size_names[i] in params else []
        if isinstance(div, str):
            div = [div]
        if callable(div):
            divisor = div(params)
        else:
            divisor = math.prod(int(_tune._kt_eval(str(d), params)) for d in div) if div else 1
        lines.append(f"#define grid_size_{axis} {int(math.ceil(problem[i] / divisor))}")
    return lines


def run_kernel(kernel_name: str, kernel_source: Any, problem_size: Any, arguments: Sequence[Any],
               params: dict[str, Any], grid_div_x: Any = None, grid_div_y: Any = None,
               grid_div_z: Any = None, lang: Optional[str] = None, device: int = 0,
               platform: int = 0, smem_args: Any = None, cmem_args: Any = None,
               texmem_args: Any = None, compiler: Optional[str] = None,
               compiler_options: Optional[Sequence[str]] = None,
               defines: Optional[dict[str, Any]] = None,
               block_size_names: Optional[Sequence[str]] = None, quiet: bool = False,
               log: Any = None, *, timeout_s: float = 600.0, compile_check: Any = None,
               family: Optional[str] = None, kernel_dir: Optional[str] = None,
               daemon: Optional[Daemon] = None) -> list[Any]:
    """Kernel Tuner's run_kernel: runs `kernel_name` once with `params` (one value per name,
    each written as `#define NAME value`, so any value Kernel Tuner takes: integers, floats,
    booleans, strings) and returns one entry per argument: arrays as new numpy arrays with the
    kernel's output, scalars as given. The arguments passed are not modified.

    ktune's own, keyword-only: timeout_s (the kernel's deadline, C), compile_check (CUDA: the
    architectures to compile for, default $KTUNE_COMPILE_CHECK else sm_80), family and
    kernel_dir (CUDA: where the one-config family is written; default
    '<kernel_name>_run_kernel' in tune_kernel's directory), daemon.

    Raises KernelRunError (compile_error, crash, timeout, runtime_error) when the kernel does not
    run to its end, NoDevice for CUDA without a usable GPU (after the compile check passed).
    """
    np = _tune._numpy("run_kernel")
    for value, what in ((cmem_args, "cmem_args (constant memory) is"),
                        (texmem_args, "texmem_args (texture memory) is")):
        if value is not None:
            raise _tune._not_supported(f"{what} not supported (fix: pass the data as an "
                                       "argument)")
    if not isinstance(kernel_name, str) or not kernel_name.isidentifier():
        raise _tune._not_supported(f"kernel_name {kernel_name!r}: expected the function's name "
                                   "(templated kernels are not supported)")
    source, source_name, extra_files = _tune._read_source(kernel_source)
    lang = _tune._language(lang, source, compiler)
    config = _params(params)
    bs_names = list(block_size_names or []) + \
        ["block_size_x", "block_size_y", "block_size_z"][len(block_size_names or []):]
    names = _tune._param_names_in_source(source, kernel_name, len(arguments))
    args = _tune._arguments(np, arguments, names)
    if lang == "CUDA":
        return _run_cuda(np, kernel_name, source, source_name, extra_files, problem_size, args,
                         config, [grid_div_x, grid_div_y, grid_div_z], bs_names, device,
                         smem_args, list(compiler_options or []), defines, quiet,
                         compile_check, family, kernel_dir, daemon)
    if smem_args is not None:
        raise _tune._not_supported("smem_args: shared memory exists for CUDA kernels only")
    problem = _problem(problem_size, config)
    prelude = [f"#define {k} {_define_value(v)}" for k, v in config.items()]
    for key, value in (defines or {}).items():
        if callable(value):
            value = value(config)
        prelude.append(f"#define {key} {_define_value(value)}")
    prelude += [f"#define {n} {256 if i == 0 else 1}" for i, n in enumerate(bs_names[:3])
                if n not in config]
    prelude.append("#define kernel_tuner 1")
    prelude += _grid_defines(source, problem, config, [grid_div_x, grid_div_y, grid_div_z],
                             bs_names)
    text = "".join(line + "\n" for line in prelude) + f'#line 1 "{source_name}"\n' + \
        _tune._c_source(source, kernel_name, args)
    flags = list(compiler_options or [])
    if "#include <omp.h>" in source and "-fopenmp" not in flags:
        flags.append("-fopenmp")
    outputs = _run_c(np, text, extra_files, flags, args, timeout_s, kernel_name)
    return [outputs[a.index] if a.is_buffer else arguments[a.index] for a in args]


def _run_c(np: Any, text: str, extra_files: list[str], flags: list[str], args: list[Any],
           timeout_s: float, kernel_name: str) -> dict[int, Any]:
    """Compiles `text` and runs it in a child process; the outputs by argument index."""
    run_dir = tempfile.mkdtemp(prefix="ktune-run-kernel-")
    try:
        for extra in extra_files:
            shutil.copy(extra, run_dir)
        with open(os.path.join(run_dir, "kernel.cpp"), "w", encoding="utf-8") as f:
            f.write(text)
        cxx = os.environ.get("KTUNE_CXX") or "c++"
        command = [cxx, *_COMPILE_FLAGS, *flags, "-o", "kernel.so", "kernel.cpp"]
        try:
            done = subprocess.run(command, cwd=run_dir, capture_output=True, text=True,
                                  timeout=max(timeout_s, 120.0))
        except subprocess.TimeoutExpired as e:
            raise KernelRunError("compile_timeout", f"{kernel_name}: the compile did not end "
                                 f"in {e.timeout:.0f} s ({' '.join(command)})") from e
        except FileNotFoundError as e:
            raise KernelRunError("compile_error", f"{kernel_name}: no C++ compiler {cxx!r} "
                                 "(fix: install g++, or set KTUNE_CXX)") from e
        if done.returncode != 0:
            raise KernelRunError("compile_error", f"{kernel_name} does not compile "
                                 f"({' '.join(command)}):\n{done.stderr.strip()}")
        spec = {"args": []}
        for a in args:
            if a.is_buffer:
                np.save(os.path.join(run_dir, f"arg{a.index}.npy"), a.array, allow_pickle=False)
                spec["args"].append({"kind": "buffer"})
            else:
                spec["args"].append({"kind": "scalar", "dtype": a.dtype, "value": a.scalar})
        with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f)
        try:
            child = subprocess.run([sys.executable, "-c", _CHILD, run_dir], capture_output=True,
                                   text=True, timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired as e:
            raise KernelRunError("timeout", f"{kernel_name} did not return within its "
                                 f"{timeout_s:g} s deadline (timeout_s=); its process was "
                                 "killed") from e
        if child.returncode < 0:
            sig = -child.returncode
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            raise KernelRunError("crash", f"{kernel_name} crashed: its process was killed by "
                                 f"{name} (signal {sig}); the calling process is unharmed"
                                 + (f"\n{child.stderr.strip()}" if child.stderr.strip() else ""))
        if child.returncode != 0:
            raise KernelRunError("runtime_error", f"{kernel_name}: the run ended with exit "
                                 f"status {child.returncode}:\n{child.stderr.strip()[-4000:]}")
        outputs = {}
        for a in args:
            if a.is_buffer:
                out = np.load(os.path.join(run_dir, f"out{a.index}.npy"))
                outputs[a.index] = out
        return outputs
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _run_cuda(np: Any, kernel_name: str, source: str, source_name: str, extra_files: list[str],
              problem_size: Any, args: list[Any], config: dict[str, Any], grid_div: list[Any],
              bs_names: list[str], device: int, smem_args: Any, compiler_options: list[str],
              defines: Optional[dict], quiet: bool, compile_check: Any, family: Optional[str],
              kernel_dir: Optional[str], daemon: Optional[Daemon]) -> list[Any]:
    """A one-config CUDA family through ktuned: compile check, then the run (NoDevice here)."""
    real = _tune._tune_params({k: [v] for k, v in config.items()})
    coded = _tune._coded(real)
    tune_params = _tune._indexed(real, coded)
    dims, entries = _tune._shape_dims(np, problem_size, args, tune_params)
    name = family or f"{kernel_name}_run_kernel"
    fam = _tune._build_family(name=name, kernel_name=kernel_name, source=source,
                              source_name=source_name, extra_files=extra_files, lang="CUDA",
                              dims=dims, entries=entries, args=args, answer_given=False,
                              atol=1e-6, tune_params=tune_params, constraints=[],
                              default={k: v[0] for k, v in tune_params.items()},
                              grid_div=grid_div, block_size_names=bs_names,
                              smem_args=smem_args, compiler_options=compiler_options,
                              defines=defines, coded=coded)
    directory = os.path.abspath(kernel_dir or _tune.default_kernel_dir())
    spec_path = _tune._write_family(np, fam, directory)
    if compile_check is None:
        env = os.environ.get("KTUNE_COMPILE_CHECK")
        compile_check = env.split(",") if env else ["sm_80"]
    own = daemon is None
    d = daemon or Daemon(autostart=True)
    try:
        _tune._register(d, directory, spec_path, fam)
        check = d.compile_check(fam.name, compile_check, fam.shape, fam.dtype)
        if check.get("errors"):
            first = next((r for r in check.get("rows", []) if r.get("status") != "ok"), {})
            raise SpecError("spec_error", f"{kernel_name}: the compile check for "
                            f"{compile_check} failed: {first.get('message')}", check)
        passed = f"the compile check for {','.join(_arch_list(compile_check))} passed"
        if not quiet:
            print(f"{kernel_name}: {passed}")
        device_name = f"cuda:{int(device)}"
        try:
            job = d.tune(fam.name, fam.shape, fam.dtype, device_name, remeasure=True)
        except NoDevice as e:
            raise NoDevice("no_device", f"{e.message} ({kernel_name}: {passed}; the family "
                           f"{fam.name!r} is written to {os.path.dirname(spec_path)})",
                           {"family": fam.name, "compile_check": check}) from e
    finally:
        if own:
            d.close()
    raise _tune._not_supported(f"run_kernel on {device_name}: the config ran (job {job.id}, "
                               f"{job.state}), but ktuned's workers do not return a CUDA "
                               "kernel's output buffers yet (fix: check outputs with "
                               "tune_kernel's answer=)")


def _arch_list(arch: Any) -> list[str]:
    return [arch] if isinstance(arch, str) else [str(a) for a in arch]
