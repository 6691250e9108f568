"""Kernel Tuner's `tune_kernel`, run on ktuned: a Kernel Tuner script switches with one line,

    from ktune_client.kernel_tuner import tune_kernel

and gets `(results, env)` back as Kernel Tuner returns them, every config measured by ktuned's
workers and kept in its store (lookups, history, export and sweeps work on it like on any
family). docs/kernel-tuner.md says what maps to what, what differs and what is not supported.

What a call does:
  1. writes a kernel family into a kernel directory (default: $KTUNE_HOME/kernel_tuner, else
     $XDG_DATA_HOME/ktune/kernel_tuner, else ~/.local/share/ktune/kernel_tuner): kernel.toml,
     the kernel source (C: with a small shim that calls the function from ktune's argument
     array; CUDA: wrapped in extern "C" as Kernel Tuner's CUDA backends do), and the arguments'
     contents as .npy files under data/<shape>/, which the workers read (`init = "file:..."`);
     the answers become the outputs' expected files;
  2. asks ktuned to load that directory (`add_kernel_dir`; it starts ktuned when none runs);
  3. submits the tune (exhaustive unless `strategy` says otherwise) and waits for it;
  4. returns each measured config as a dict: the tunable parameters, `time` (ms: ktune's median),
     `times` (the samples, from the store), compile_time, verification_time, benchmark_time,
     strategy_time, framework_time, timestamp, and the `metrics` computed here.

The module imports without numpy; tune_kernel needs it (it says so when missing).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import sqlite3
import struct
import sys
import tempfile
import warnings
from typing import Any, Optional, Sequence, Union

from .. import kt_space
from ..daemon import Daemon, Job
from ..errors import EmptySpace, KtuneError, NoDevice, NotSupported, SpecError

__all__ = ["tune_kernel", "default_kernel_dir", "ErrorConfig", "InvalidConfig",
           "CompilationFailedConfig", "RuntimeFailedConfig"]


class ErrorConfig(str):
    """The `time` of a config that has none, as in Kernel Tuner (a str subclass)."""

    def __str__(self) -> str:
        return self.__class__.__name__

    def __repr__(self) -> str:
        return self.__class__.__name__


class InvalidConfig(ErrorConfig):
    """The config cannot be launched (out of resources, an invalid launch)."""


class CompilationFailedConfig(ErrorConfig):
    """The config does not compile (or its compile timed out)."""


class RuntimeFailedConfig(ErrorConfig):
    """The config crashed, timed out, threw, or its output did not match the answer."""


_ERROR_OF_STATUS = {
    "compile_error": CompilationFailedConfig, "compile_timeout": CompilationFailedConfig,
    "invalid_config": InvalidConfig, "launch_error": InvalidConfig,
}

_NUMPY_DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32",
                 "int64": "i64"}
_SCALAR_C_TYPES = {"f32": "float", "f64": "double", "i32": "int", "i64": "long long"}

_STRATEGIES = {
    None: "exhaustive", "brute_force": "exhaustive", "random_sample": "random",
    "simulated_annealing": "annealing", "dual_annealing": "annealing",
    "basinhopping": "annealing", "genetic_algorithm": "genetic", "diff_evo": "genetic",
    "pso": "genetic", "firefly_algorithm": "genetic", "greedy_mls": "local",
    "greedy_ils": "local", "ordered_greedy_mls": "local", "mls": "local", "minimize": "local",
    "bayes_opt": "bayes",
}

_SHIM_TEMPLATE = """
// ktune's entry: calls {name} with the arguments ktune passes as an array of pointers
// (buffers as the declared pointer types, scalars read in the dtype they were given).
template <decltype(sizeof 0) I, class F> struct ktune_kt_param;
template <class R, class A0, class... A>
struct ktune_kt_param<0, R (*)(A0, A...)> {{ using type = A0; }};
template <decltype(sizeof 0) I, class R, class A0, class... A>
struct ktune_kt_param<I, R (*)(A0, A...)> : ktune_kt_param<I - 1, R (*)(A...)> {{}};
extern "C" void ktune_kt_entry(void** args) {{
  (void){name}({call});
}}
"""


def _numpy(entry: str = "tune_kernel") -> Any:
    try:
        import numpy  # noqa: PLC0415 (optional: the package imports without it)
    except ImportError as e:
        raise ImportError(f"ktune_client.kernel_tuner.{entry} needs numpy for the kernel's "
                          "arguments, and it is not installed (Debian: apt install python3-numpy; "
                          "pip: pip install numpy)") from e
    return numpy


def default_kernel_dir() -> str:
    """Where tune_kernel writes its families unless told: $KTUNE_HOME/kernel_tuner, else
    $XDG_DATA_HOME/ktune/kernel_tuner, else ~/.local/share/ktune/kernel_tuner."""
    home = os.environ.get("KTUNE_HOME")
    if home:
        return os.path.join(home, "kernel_tuner")
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(data, "ktune", "kernel_tuner")


# ----------------------------------------------------------------------------------------------
# Inputs


class _Arg:
    """One argument: a buffer (its array) or a scalar (its value)."""

    def __init__(self, index: int, name: str, dtype: str, array: Any = None,
                 scalar: Any = None) -> None:
        self.index = index
        self.name = name
        self.dtype = dtype
        self.array = array
        self.scalar = scalar
        self.answer: Any = None

    @property
    def is_buffer(self) -> bool:
        return self.array is not None


def _not_supported(message: str) -> NotSupported:
    return NotSupported("not_supported", message)


def _read_source(kernel_source: Any) -> tuple[str, str, list[str]]:
    """(text, name for messages, extra files) of Kernel Tuner's kernel_source."""
    extra: list[str] = []
    if isinstance(kernel_source, (list, tuple)):
        if not kernel_source:
            raise ValueError("kernel_source: an empty list")
        extra = [os.fspath(f) for f in kernel_source[1:]]
        kernel_source = kernel_source[0]
    if callable(kernel_source):
        raise _not_supported("kernel_source: a code generator function is not supported (ktune "
                             "compiles one source for every config: write the source with the "
                             "tunable parameters as macros)")
    if isinstance(kernel_source, os.PathLike):
        kernel_source = os.fspath(kernel_source)
    if not isinstance(kernel_source, str):
        raise TypeError("kernel_source: expected a source string or a file name, found "
                        f"{type(kernel_source).__name__}")
    for f in extra:
        if not os.path.isfile(f):
            raise FileNotFoundError(f"kernel_source: {f} does not exist")
    looks_like_file = len(kernel_source) < 256 and "\n" not in kernel_source and \
        re.search(r"\.(c|cc|cpp|cxx|cu|cuh|h|hpp|cl)$", kernel_source.strip()) is not None
    if looks_like_file and os.path.isfile(kernel_source.strip()):
        path = kernel_source.strip()
        with open(path, encoding="utf-8") as f:
            return f.read(), os.path.basename(path), extra
    return kernel_source, "kernel_source", extra


def _param_names_in_source(source: str, kernel_name: str, count: int) -> list[str]:
    """The kernel's parameter names from its definition in the source, or arg0.. when they
    cannot be read."""
    fallback = [f"arg{i}" for i in range(count)]
    match = re.search(r"\b" + re.escape(kernel_name) + r"\s*\(([^)]*)\)\s*\{", source)
    if match is None:
        return fallback
    names = []
    for param in match.group(1).split(","):
        ident = re.findall(r"[A-Za-z_]\w*", param)
        if not ident:
            return fallback
        names.append(ident[-1])
    if len(names) != count or len(set(names)) != count:
        return fallback
    reserved = {"ktune", "args"}
    return [n if n not in reserved else f"arg{i}" for i, n in enumerate(names)]


def _arguments(np: Any, arguments: Sequence[Any], names: list[str]) -> list[_Arg]:
    args = []
    for i, a in enumerate(arguments):
        if isinstance(a, np.ndarray):
            dtype = _NUMPY_DTYPES.get(a.dtype.name)
            if dtype is None:
                raise _not_supported(f"arguments[{i}]: numpy dtype {a.dtype.name} is not "
                                     f"supported (expected one of {', '.join(_NUMPY_DTYPES)})")
            if a.size == 0:
                raise ValueError(f"arguments[{i}]: an empty array")
            array = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)
            args.append(_Arg(i, names[i], dtype, array=array))
        elif isinstance(a, np.generic):
            dtype = _NUMPY_DTYPES.get(np.asarray(a).dtype.name)
            if dtype is None or dtype == "f16":
                raise _not_supported(f"arguments[{i}]: a numpy {np.asarray(a).dtype.name} scalar "
                                     "is not supported (expected int32, int64, float32 or "
                                     "float64)")
            value = a.item()
            args.append(_Arg(i, names[i], dtype, scalar=value))
        else:
            raise TypeError(f"arguments[{i}]: expected a numpy array or a numpy scalar, found "
                            f"{type(a).__name__} (fix: e.g. numpy.int32({a!r}))")
    return args


def _check_answer(np: Any, answer: Any, args: list[_Arg]) -> None:
    """Kernel Tuner's checks of `answer`, with its errors."""
    if answer is None:
        return
    if len(answer) != len(args):
        raise TypeError("The length of argument list and provided results do not match.")
    for i, (expected, arg) in enumerate(zip(answer, args)):
        if expected is None:
            continue
        if not arg.is_buffer:
            raise _not_supported(f"answer[{i}]: only array arguments are checked by ktune "
                                 "(a scalar cannot be an output)")
        if not isinstance(expected, np.ndarray):
            raise TypeError(f"Element {i} of expected results list is not a numpy/cupy ndarray, "
                            "torch Tensor or numpy scalar.")
        if expected.dtype != arg.array.dtype:
            raise TypeError(f"Element {i} of the expected results list is not of the same dtype "
                            f"as the kernel output: {expected.dtype} != {arg.array.dtype}.")
        if expected.size != arg.array.size:
            raise TypeError(f"Element {i} of the expected results list has a size different from "
                            f"the kernel argument: {expected.size} != {arg.array.size}.")
        arg.answer = np.ascontiguousarray(expected).astype(expected.dtype.newbyteorder("<"),
                                                           copy=False)


def _tune_params(tune_params: Any) -> dict[str, list[int]]:
    if not isinstance(tune_params, dict) or not tune_params:
        raise ValueError("tune_params: expected a non-empty dict of parameter name -> values")
    out: dict[str, list[int]] = {}
    for name, values in tune_params.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"tune_params: {name!r} is not an identifier")
        if name in ("grid_size_x", "grid_size_y", "grid_size_z", "time"):
            raise ValueError(f"Tune parameter {name} with value {values} has a forbidden name!")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise ValueError(f"tune_params[{name!r}]: expected a list of values")
        kept: list[Any] = []
        for v in values:
            if hasattr(v, "item") and not isinstance(v, (str, bytes)):
                v = v.item()  # a numpy scalar
            if not isinstance(v, bool) and hasattr(v, "__index__"):
                kept.append(int(v.__index__()))
            elif isinstance(v, (bool, float, str)):
                kept.append(v)
            else:
                raise _not_supported(f"tune_params[{name!r}]: value {v!r}: expected an integer, "
                                     "a float, a bool or a string (Kernel Tuner writes it as "
                                     f"#define {name} <value>)")
        if not kept:
            raise ValueError(f"tune_params[{name!r}]: no values")
        out[name] = kept
    return out


def _coded(params: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The params with a value that is not an integer (a float, a bool, a string): ktune tunes
    each as the index of its value, and the source defines the value (_coded_prelude)."""
    return {n: vs for n, vs in params.items()
            if any(isinstance(v, bool) or not isinstance(v, int) for v in vs)}


def _indexed(params: dict[str, list[Any]], coded: dict[str, list[Any]]) -> dict[str, list[int]]:
    """The params as ktune tunes them: a coded one as the indices of its values."""
    return {n: (list(range(len(vs))) if n in coded else vs) for n, vs in params.items()}


def _coded_prelude(coded: dict[str, list[Any]]) -> list[str]:
    """For each coded param: the value of the index ktune passes as -DNAME=<index>, written as
    Kernel Tuner writes it (#define NAME str(value))."""
    lines = []
    for name, values in coded.items():
        for i, v in enumerate(values):
            lines += [f"#{'if' if i == 0 else 'elif'} {name} == {i}", f"#undef {name}",
                      f"#define {name} {v}"]
        lines.append("#endif")
    return lines


def _decoded(config: dict[str, Any], coded: dict[str, list[Any]]) -> dict[str, Any]:
    """A config as ktune stores it with each coded param's index replaced by its value."""
    out = dict(config)
    for name, values in coded.items():
        index = out.get(name)
        if isinstance(index, int) and 0 <= index < len(values):
            out[name] = values[index]
    return out


# ----------------------------------------------------------------------------------------------
# Expressions: Kernel Tuner's Python strings as ktune's (kt_space.translate), checked exactly


def _exact_expression(text: str, tune_params: dict[str, list[int]], what: str) -> str:
    """The ktune expression of a string Kernel Tuner evaluates as int(eval(...)) (grid divisors,
    problem size entries, shared memory sizes), when it gives the same integer for every
    combination of the params it names; NotSupported otherwise."""
    translated = kt_space.translate(str(text), list(tune_params))
    if translated is None:
        raise _not_supported(f"{what}: {text!r} is outside ktune's expression subset "
                             "(docs/kernel-tuner.md)")
    kt, fn, used = translated
    import itertools  # noqa: PLC0415

    for values in itertools.product(*(tune_params[n] for n in used)):
        config = dict(zip(used, values))
        try:
            theirs = int(_kt_eval(str(text), config))
            ours = fn(**config)
        except (ZeroDivisionError, ArithmeticError, TypeError, ValueError) as e:
            raise _not_supported(f"{what}: {text!r} cannot be evaluated at {config}: {e}") from e
        if ours != theirs:
            raise _not_supported(f"{what}: {text!r} gives {theirs} in Python but {ours} with "
                                 f"C's integer arithmetic at {config} (fix: write it with // or "
                                 "an exact division)")
    return kt


def _kt_eval(text: str, config: dict[str, Any]) -> Any:
    replaced = "".join(str(config[p]) if p in config else p
                       for p in re.split(r"([a-zA-Z0-9_]+)", text))
    return eval(replaced, {"__builtins__": {}, "min": min, "max": max})  # noqa: S307


def _c_text(kt_expression: str) -> Optional[str]:
    """A ktune expression as C preprocessor arithmetic, or None (functions, ?:)."""
    if re.search(r"\b(min|max|ceil_div)\s*\(", kt_expression) or "?" in kt_expression:
        return None
    return kt_expression


# ----------------------------------------------------------------------------------------------
# The family


class _Family:
    """What tune_kernel writes: spec text, source text, data files, and what it tunes."""

    def __init__(self) -> None:
        self.name = ""
        self.language = ""
        self.source_name = ""
        self.source_text = ""
        self.spec_text = ""
        self.shape = ""
        self.dtype = ""
        self.data: dict[str, Any] = {}     # relative path -> array
        self.extra_files: list[str] = []


def _shape_dims(np: Any, problem_size: Any, args: list[_Arg], tune_params: dict[str, Any]
                ) -> tuple[list[tuple[str, int]], list[Union[str, int]]]:
    """(ktune shape dims, problem size entries): integer entries of problem_size are the dims
    X, Y, Z by position; string entries (params) are kept as expressions. A problem size of
    strings only gets the dim N, the largest array's element count."""
    if callable(problem_size):
        raise _not_supported("problem_size: a function is not supported (ktune's shape is "
                             "fixed per tune: pass integers, or strings of tunable parameters)")
    if isinstance(problem_size, (str, int, np.integer)):
        problem_size = (problem_size,)
    entries = list(problem_size)
    if not 1 <= len(entries) <= 3:
        raise ValueError("problem_size: expected 1 to 3 entries")
    dims = []
    for i, entry in enumerate(entries):
        if isinstance(entry, (int, np.integer)) and not isinstance(entry, bool):
            if entry < 1:
                raise ValueError(f"problem_size[{i}]: expected a positive integer, found {entry}")
            dims.append(("XYZ"[i], int(entry)))
            entries[i] = int(entry)
        elif not isinstance(entry, str):
            raise TypeError("Error: problem_size should only contain strings or integers")
    if not dims:
        dims.append(("N", max((a.array.size for a in args if a.is_buffer), default=1)))
    for name, _ in dims:
        if name in tune_params:
            raise _not_supported(f"tune_params: {name!r} is the name of a shape dimension "
                                 "(X, Y, Z for the problem size; N when it has none): rename "
                                 "the parameter")
    return dims, entries


def _size_expression(value: int, dims: list[tuple[str, int]]) -> str:
    """An element count or scalar as an expression over the dims when one matches (so the spec
    stays the same at other problem sizes), else the number."""
    names = [d[0] for d in dims]
    values = dict(dims)
    candidates = [[n] for n in names]
    if len(names) >= 2:
        candidates += [[a, b] for i, a in enumerate(names) for b in names[i + 1:]]
    if len(names) == 3:
        candidates.append(names)
    for combo in candidates:
        if math.prod(values[n] for n in combo) == value:
            return " * ".join(combo)
    return str(value)


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(type(value).__name__)


def _unroll_guards(source: str, tune_params: dict[str, Any]) -> str:
    """Kernel Tuner's rule for loop_unroll_factor params in CUDA: value 0 drops the
    `#pragma unroll <name>` that names it. ktune passes the value as a macro, so the pragma is
    kept under `#if <name> != 0` (line numbers preserved with #line)."""
    names = [n for n in tune_params if "loop_unroll_factor" in n]
    if not names:
        return source
    pattern = re.compile(r"^\s*#\s*pragma\s+unroll\s+(" + "|".join(map(re.escape, names)) +
                         r")\b")
    out = []
    for number, line in enumerate(source.split("\n"), start=1):
        m = pattern.match(line)
        if m:
            out += [f"#if {m.group(1)} != 0", line, "#endif", f"#line {number + 1}"]
        else:
            out.append(line)
    return "\n".join(out)


class _Launch:
    """The launch geometry as ktune expressions: problem size, grid divisors, block, shared
    memory bytes (Kernel Tuner's rules: a divisor list None is the block size name of that axis
    where it is a parameter; a block size name that is not one is 256, 1, 1)."""

    def __init__(self, entries: list[Union[str, int]], dims: list[tuple[str, int]],
                 grid_div: list[Any], block_size_names: list[str],
                 tune_params: dict[str, list[int]], smem_args: Any) -> None:
        self.problem = []
        for i in range(3):
            e = entries[i] if i < len(entries) else 1
            if isinstance(e, str):
                self.problem.append(_exact_expression(e, tune_params, f"problem_size[{i}]"))
            else:
                self.problem.append("XYZ"[i] if ("XYZ"[i], e) in dims else str(e))
        self.divisors = []
        for i, div in enumerate(grid_div):
            axis = "xyz"[i]
            if div is None:
                div = [block_size_names[i]] if block_size_names[i] in tune_params else []
            if callable(div):
                raise _not_supported(f"grid_div_{axis}: a function is not supported (write the "
                                     "divisors as strings)")
            if isinstance(div, str):
                div = [div]
            terms = [_exact_expression(d, tune_params, f"grid_div_{axis}") for d in div]
            self.divisors.append(" * ".join(f"({t})" for t in terms) if terms else "1")
        self.block = [block_size_names[i] if block_size_names[i] in tune_params else
                      ("256" if i == 0 else "1") for i in range(3)]
        self.shared = "0"
        if smem_args is not None:
            size = smem_args.get("size") if isinstance(smem_args, dict) else None
            if size is None or callable(size):
                raise _not_supported("smem_args: only {'size': int or string} is supported")
            self.shared = _exact_expression(str(size), tune_params, "smem_args['size']")

    def grid(self) -> list[str]:
        return [p if d == "1" else f"ceil_div({p}, {d})"
                for p, d in zip(self.problem, self.divisors)]


def _prelude(source: str, launch: _Launch, dims: list[tuple[str, int]],
             defines: Optional[dict]) -> list[str]:
    """#defines Kernel Tuner makes that ktune's -D flags do not: the user's `defines`, and
    grid_size_x/y/z where the source uses them (C preprocessor arithmetic)."""
    prelude = []
    for key, value in (defines or {}).items():
        if callable(value) or not str(key).isidentifier():
            raise _not_supported(f"defines[{key!r}]: only constant values are supported")
        prelude.append(f"#define {key} {value}")
    if "grid_size_" in source:
        for i, axis in enumerate("xyz"):
            p, d = _c_text(launch.problem[i]), _c_text(launch.divisors[i])
            if p is None or d is None:
                raise _not_supported(f"the source uses grid_size_{axis}, whose expression "
                                     f"{launch.problem[i]} / {launch.divisors[i]} is not C "
                                     "arithmetic")
            p = str(dict(dims).get(p, p))
            prelude.append(f"#define grid_size_{axis} ((({p}) + ({d}) - 1) / ({d}))")
    return prelude


def _threads_param(block_size_names: list[str], tune_params: dict[str, list[int]],
                   coded: dict[str, list[Any]]) -> Optional[str]:
    """The parameter that says how many threads a C config runs (docs/kernel-spec.md § Threads):
    the first name given in block_size_names (not Kernel Tuner's default block_size_x/y/z) that is
    an integer tunable -- Kernel Tuner's OpenMP tests name it there -- else a tunable called
    `nthreads`; None: the configs are single-threaded."""
    given = [n for n in block_size_names[:3] if n not in kt_space.DEFAULT_BLOCK_SIZE_NAMES]
    for name in given + ["nthreads"]:
        if name in tune_params and name not in coded:
            return name
    return None


def _flags(compiler_options: list[str], launch: _Launch, block_size_names: list[str],
           tune_params: dict[str, Any], source: str, cuda: bool) -> list[str]:
    """compiler_options plus Kernel Tuner's macros ktune does not define: block sizes that are
    not parameters, kernel_tuner; -fopenmp for a C source that includes <omp.h>. CUDA
    architecture options are left out (ktune compiles for the tuned device)."""
    flags = list(compiler_options)
    if cuda:
        arch = [f for f in flags if re.match(r"^(-arch|--gpu-architecture|-gencode)", f)]
        if arch:
            warnings.warn(f"compiler_options {arch} are left out: ktune compiles for the "
                          "architecture of the device it tunes on", UserWarning, stacklevel=4)
            flags = [f for f in flags if f not in arch]
    elif "#include <omp.h>" in source and "-fopenmp" not in flags:
        flags.append("-fopenmp")
    for i, name in enumerate(block_size_names[:3]):
        if name not in tune_params:
            flags.append(f"-D{name}={launch.block[i]}")
    flags.append("-Dkernel_tuner=1")
    return flags


def _c_source(source: str, kernel_name: str, args: list[_Arg]) -> str:
    """The C source and the shim that calls `kernel_name` from ktune's argument array."""
    # The shim calls the function, so it needs no C linkage; with C++ linkage several configs
    # share a translation unit (batched compiles). Other extern "C" declarations (a C library's
    # functions) keep theirs.
    body = re.sub(r'extern\s*"C"(?=\s*[^{;]*?\b' + re.escape(kernel_name) + r'\s*\()',
                  'extern "C++"', source, count=1)
    call = []
    for a in args:
        param = f"typename ktune_kt_param<{a.index}, decltype(&{kernel_name})>::type"
        if a.is_buffer:
            call.append(f"static_cast<{param}>(args[{a.index}])")
        else:
            c_type = _SCALAR_C_TYPES[a.dtype]
            call.append(f"static_cast<{param}>(*static_cast<const {c_type}*>(args[{a.index}]))")
    return body + "\n" + _SHIM_TEMPLATE.format(name=kernel_name, call=",\n      ".join(call))


def _spec_args(args: list[_Arg], dims: list[tuple[str, int]], answer_given: bool,
               data: dict[str, Any]) -> list[dict[str, Any]]:
    """The [[args]] entries; every array's contents (and answer) go into `data` by file name.
    Answered arrays are inout (they start with the user's contents), the others in; without an
    answer every array is inout (nothing says which the kernel writes)."""
    if not any(a.is_buffer for a in args):
        raise _not_supported("arguments: ktune needs at least one array argument")
    data_dir = "data/{shape}"
    items = []
    for a in args:
        item: dict[str, Any] = {"name": a.name}
        if a.is_buffer:
            item["kind"] = "inout" if (a.answer is not None or not answer_given) else "in"
            item["dtype"] = a.dtype
            item["count"] = _size_expression(a.array.size, dims)
            item["init"] = f"file:{data_dir}/{a.name}.npy"
            data[f"{data_dir}/{a.name}.npy"] = a.array
            if a.answer is not None:
                item["expected"] = f"{data_dir}/{a.name}.expected.npy"
                data[item["expected"]] = a.answer
        else:
            item["kind"] = "scalar"
            item["dtype"] = a.dtype
            item["value"] = _size_expression(int(a.scalar), dims) \
                if a.dtype in ("i32", "i64") else repr(float(a.scalar))
        items.append(item)
    return items


def _build_family(*, name: str, kernel_name: str, source: str, source_name: str,
                  extra_files: list[str], lang: str, dims: list[tuple[str, int]],
                  entries: list[Union[str, int]], args: list[_Arg], answer_given: bool,
                  atol: float, tune_params: dict[str, list[int]], constraints: list[str],
                  default: dict[str, int], grid_div: list[Any], block_size_names: list[str],
                  smem_args: Any, compiler_options: list[str], defines: Optional[dict],
                  coded: Optional[dict[str, list[Any]]] = None) -> _Family:
    """The family tune_kernel writes (docs/kernel-tuner.md, What a call does). Raises
    NotSupported for what cannot be written, before anything is."""
    cuda = lang == "CUDA"
    if smem_args is not None and not cuda:
        raise _not_supported("smem_args: shared memory exists for CUDA kernels only")
    fam = _Family()
    fam.name = name
    fam.language = "cuda" if cuda else "cpp"
    fam.shape = ",".join(f"{n}={v}" for n, v in dims)
    fam.extra_files = extra_files
    launch = _Launch(entries, dims, grid_div, block_size_names, tune_params, smem_args)
    flags = _flags(compiler_options, launch, block_size_names, tune_params, source, cuda)
    coded = coded or {}
    for param in coded:
        if param in block_size_names[:3] or any(param in str(d) for d in grid_div if d):
            raise _not_supported(f"tune_params[{param!r}]: a launch parameter (block size, grid "
                                 "divisor) takes integers only")
    prelude = "".join(line + "\n" for line in _coded_prelude(coded) +
                      _prelude(source, launch, dims, defines))
    located = f'#line 1 "{source_name}"\n'
    if cuda:
        wrapped = 'extern "C" {\n' if 'extern "C"' not in source else ""
        fam.source_name, entry = "kernel.cu", kernel_name
        fam.source_text = prelude + wrapped + located + _unroll_guards(source, tune_params) + \
            ("\n}\n" if wrapped else "\n")
    else:
        fam.source_name, entry = "kernel.cpp", "ktune_kt_entry"
        fam.source_text = prelude + located + _c_source(source, kernel_name, args)
    items = _spec_args(args, dims, answer_given, fam.data)
    outputs = [a for a in args if a.is_buffer and a.answer is not None]
    fam.dtype = (outputs or [a for a in args if a.is_buffer])[0].dtype

    lines = ["# Written by ktune_client.kernel_tuner.tune_kernel for Kernel Tuner's",
             f"# tune_kernel({kernel_name!r}, ...); it is written again by the next call.",
             "[kernel]", f"name = {_toml(name)}", f"language = {_toml(fam.language)}",
             f"source = {_toml(fam.source_name)}", f"entry = {_toml(entry)}",
             f"shape = {_toml([d[0] for d in dims])}", f"flags = {_toml(flags)}"]
    threads = None if cuda else _threads_param(block_size_names, tune_params, coded)
    if threads is not None:
        lines.append(f"threads = {_toml(threads)}")
    lines += ["", "[params]"]
    for p, v in tune_params.items():
        if p in coded:
            lines.append(f"# {p}: the index of its value in {_toml(coded[p])} (the source "
                         "defines the value)")
        lines.append(f"{p} = {_toml(v)}")
    lines += ["", "[space]", f"constraints = {_toml(constraints)}", ""]
    if cuda:
        lines += ["[launch]", f"grid = {_toml(launch.grid())}", f"block = {_toml(launch.block)}",
                  f"shared_bytes = {_toml(launch.shared)}", ""]
    for item in items:
        lines += ["[[args]]"] + [f"{k} = {_toml(v)}" for k, v in item.items()] + [""]
    if answer_given and outputs:
        lines += ["[check]", 'reference = "files"', f"atol = {_toml(float(atol))}",
                  "rtol = 1e-05"]
    else:
        lines += ["[check]", 'reference = "none"']
    lines += ["", "[default]"] + [f"{p} = {v}" for p, v in default.items()]
    fam.spec_text = "\n".join(lines) + "\n"
    return fam


def _write_atomic(path: str, data: Union[bytes, str]) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    try:
        with open(path, "rb") as f:
            if f.read() == payload:
                return  # unchanged: keep its identity (ktuned's workers reuse what they read)
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _npy_bytes(np: Any, array: Any) -> bytes:
    import io  # noqa: PLC0415

    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def _write_family(np: Any, fam: _Family, kernel_dir: str) -> str:
    directory = os.path.join(kernel_dir, fam.name)
    os.makedirs(kernel_dir, mode=0o700, exist_ok=True)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for relative, array in fam.data.items():
        path = os.path.join(directory, relative.replace("{shape}", fam.shape))
        _write_atomic(path, _npy_bytes(np, array))
    for extra in fam.extra_files:
        with open(extra, "rb") as f:
            _write_atomic(os.path.join(directory, os.path.basename(extra)), f.read())
    _write_atomic(os.path.join(directory, fam.source_name), fam.source_text)
    spec_path = os.path.join(directory, "kernel.toml")
    _write_atomic(spec_path, fam.spec_text)
    return os.path.realpath(spec_path)


# ----------------------------------------------------------------------------------------------
# Results


def _samples(db_path: Optional[str], job_id: int) -> dict[int, tuple[list[float], int]]:
    """result id -> (samples in ms, created_at ms) from the store, read-only; {} when it cannot
    be read."""
    if not db_path or not os.path.exists(db_path):
        return {}
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return {}
    try:
        rows = db.execute("SELECT id, samples, created_at FROM results WHERE job_id = ?",
                          (job_id,)).fetchall()
    except sqlite3.Error:
        return {}
    finally:
        db.close()
    out = {}
    for rid, blob, created in rows:
        samples = list(struct.unpack(f"<{len(blob) // 4}f", blob[:len(blob) // 4 * 4])) \
            if blob else []
        out[rid] = ([float(s) for s in samples], created or 0)
    return out


def _process_metrics(params: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """Kernel Tuner's metrics: strings evaluated with the result's values, callables called with
    the result dict; in order, so a metric may use the ones before it."""
    if not isinstance(metrics, dict):
        raise ValueError("metrics should be a dictionary to preserve order and support "
                         "composability")
    for key, value in metrics.items():
        if isinstance(value, str):
            params[key] = _kt_eval(value, params)
        elif callable(value):
            params[key] = value(params)
        else:
            raise ValueError("metric dicts values should be strings or callable")
    return params


def _results(job: Job, tune_params: dict[str, list[int]], samples: dict[int, Any],
             metrics: Optional[dict], coded: dict[str, list[Any]]) -> list[dict[str, Any]]:
    out = []
    for row in sorted(job.results, key=lambda r: r.get("config_index", 0)):
        config = _decoded(row.get("config") or {}, coded)
        entry: dict[str, Any] = {name: config.get(name) for name in tune_params}
        status = row.get("status", "")
        times, created = samples.get(row.get("id", -1), ([], 0))
        if status == "ok":
            entry["time"] = row.get("median_ms")
            entry["times"] = times
        else:
            entry["time"] = _ERROR_OF_STATUS.get(status, RuntimeFailedConfig)()
        entry["compile_time"] = row.get("compile_ms") or 0.0
        entry["verification_time"] = 0.0
        entry["benchmark_time"] = float(sum(times)) if times else \
            float((row.get("median_ms") or 0.0) * (row.get("n") or 0))
        if status == "ok" and metrics:
            _process_metrics(entry, metrics)
        entry["strategy_time"] = 0.0
        entry["framework_time"] = 0.0
        stamp = created or job.raw.get("job", {}).get("finished_at") or 0
        entry["timestamp"] = str(datetime.datetime.fromtimestamp(stamp / 1000,
                                                                 datetime.timezone.utc))
        entry["ktune_status"] = status
        if row.get("reason"):
            entry["ktune_reason"] = row["reason"]
        out.append(entry)
    return out


def _write_cache(path: str, results: list[dict[str, Any]], header: dict[str, Any]) -> None:
    """A Kernel Tuner cache file of `results`, merged into an existing one of the same
    parameters (ktune's entries replace theirs)."""
    if not path.endswith(".json"):
        path += ".json"
    existing: dict[str, Any] = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            text = f.read().rstrip()
        try:
            old = json.loads(text)
        except json.JSONDecodeError:
            old = json.loads(text.rstrip(",") + "}\n}")  # an interrupted Kernel Tuner cache
        if old.get("tune_params_keys") != header["tune_params_keys"]:
            raise ValueError(f"cache {path}: it holds results for parameters "
                             f"{old.get('tune_params_keys')}, not {header['tune_params_keys']}")
        existing = old.get("cache", {})
    for r in results:
        key = ",".join(str(r[k]) for k in header["tune_params_keys"])
        existing[key] = {k: (str(v) if isinstance(v, ErrorConfig) else v) for k, v in r.items()}
    document = dict(header)
    document["cache"] = existing
    _write_atomic(os.path.abspath(path), json.dumps(document, indent=1))


# ----------------------------------------------------------------------------------------------


def tune_kernel(kernel_name: str, kernel_source: Any, problem_size: Any, arguments: Sequence[Any],
                tune_params: dict[str, Sequence[int]], grid_div_x: Any = None,
                grid_div_y: Any = None, grid_div_z: Any = None, restrictions: Any = None,
                answer: Optional[Sequence[Any]] = None, atol: float = 1e-6, verify: Any = None,
                verbose: bool = False, lang: Optional[str] = None, device: int = 0,
                platform: int = 0, smem_args: Any = None, cmem_args: Any = None,
                texmem_args: Any = None, compiler: Optional[str] = None,
                compiler_options: Optional[Sequence[str]] = None,
                defines: Optional[dict[str, Any]] = None, log: Any = None, iterations: int = 7,
                block_size_names: Optional[Sequence[str]] = None, quiet: bool = False,
                strategy: Optional[str] = None, strategy_options: Optional[dict] = None,
                cache: Optional[str] = None, metrics: Optional[dict[str, Any]] = None,
                simulation_mode: bool = False, observers: Any = None, objective: Any = None,
                objective_higher_is_better: Any = None, *, seed: Optional[int] = None,
                objectives: Optional[dict[str, bool]] = None, parallel: Any = None,
                family: Optional[str] = None, kernel_dir: Optional[str] = None,
                daemon: Optional[Daemon] = None, compile_check: Any = None,
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Kernel Tuner's tune_kernel, run by ktuned; returns (results, env) as Kernel Tuner does.

    Kernel Tuner's arguments keep their meaning (docs/kernel-tuner.md lists the differences and
    what is refused with NotSupported). ktune's own, keyword-only:
      seed        the strategy's seed (random, annealing, genetic, bayes)
      objectives  Kernel Tuner 1.4's several objectives, {name: higher_is_better} (time or
                  metrics): env["pareto_front"] holds the results no other result beats in all
      parallel    accepted, changes nothing: ktuned compiles and measures in its worker pool
                  already ([workers] in ktuned.toml), and measures one config at a time per
                  device so that timings do not disturb each other
      family      the family name (default: kernel_name); a family of that name in another
                  kernel directory is an error naming both
      kernel_dir  where the family is written (default: default_kernel_dir())
      daemon      a ktune_client.Daemon to use (default: ktuned's default socket, started
                  when none runs)
      compile_check  an architecture ("sm_90") or a list: every admitted config is compiled
                  for it first (CUDA), without a GPU; a config that fails raises SpecError.
                  Unset, $KTUNE_COMPILE_CHECK (comma-separated) is used, so an unchanged
                  script can check its space on a machine without a GPU
    Raises NoDevice (with ktuned's reason) when the device cannot run the tune, after writing
    the family and running compile_check.
    """
    np = _numpy()
    _refuse(verify=verify, cmem_args=cmem_args, texmem_args=texmem_args, observers=observers,
            simulation_mode=simulation_mode, kernel_name=kernel_name)
    ranking = _objectives(objective, objective_higher_is_better, objectives, metrics)
    if iterations < 1:
        raise ValueError("Iterations should be at least one!")
    source, source_name, extra_files = _read_source(kernel_source)
    lang = _language(lang, source, compiler)
    params = _tune_params(tune_params)
    if block_size_names is not None:
        if not isinstance(block_size_names, (list, tuple)) or len(block_size_names) > 3:
            raise ValueError("block_size_names should be a list of at most 3 strings")
        bs_names = list(block_size_names) + list(kt_space.DEFAULT_BLOCK_SIZE_NAMES[
            len(block_size_names):3])
    else:
        bs_names = list(kt_space.DEFAULT_BLOCK_SIZE_NAMES[:3])

    names = _param_names_in_source(source, kernel_name, len(arguments))
    args = _arguments(np, arguments, names)
    _check_answer(np, answer, args)
    dims, entries = _shape_dims(np, problem_size, args, params)

    coded = _coded(params)
    constraints, default = _space(restrictions, params, coded)
    real_params, params = params, _indexed(params, coded)

    fam = _build_family(name=family or kernel_name, kernel_name=kernel_name, source=source,
                        source_name=source_name, extra_files=extra_files, lang=lang, dims=dims,
                        entries=entries, args=args,
                        answer_given=answer is not None and any(a is not None for a in answer),
                        atol=atol, tune_params=params, constraints=constraints,
                        default=default, grid_div=[grid_div_x, grid_div_y, grid_div_z],
                        block_size_names=bs_names, smem_args=smem_args,
                        compiler_options=list(compiler_options or []), defines=defines,
                        coded=coded)
    directory = os.path.abspath(kernel_dir or default_kernel_dir())
    spec_path = _write_family(np, fam, directory)

    own = daemon is None
    d = daemon or Daemon(autostart=True)
    try:
        _register(d, directory, spec_path, fam)
        device_name = f"cuda:{int(device)}" if lang == "CUDA" else "cpu"
        device_label = _device_label(d, device_name)
        if not quiet:
            print(f"Using: {device_label}")
        if compile_check is None and lang == "CUDA" and os.environ.get("KTUNE_COMPILE_CHECK"):
            compile_check = os.environ["KTUNE_COMPILE_CHECK"].split(",")
        passed = ""
        if compile_check is not None:
            check = d.compile_check(fam.name, compile_check, fam.shape, fam.dtype)
            if check.get("errors"):
                first = next((r for r in check.get("rows", []) if r.get("status") != "ok"), {})
                raise SpecError("spec_error", f"{check['errors']} of {check.get('compiled')} "
                                f"compiles failed for {compile_check}: config "
                                f"{_decoded(_ordered(first.get('config') or {}, params), coded)}: "
                                f"{first.get('message')}", check)
            arch = [compile_check] if isinstance(compile_check, str) else list(compile_check)
            passed = (f"the compile check passed: {check.get('compiled')} compiles of the "
                      f"admitted configs for {','.join(map(str, arch))}")
            if not quiet:
                print(passed[0].upper() + passed[1:])
        strategy_fields = _strategy(strategy, strategy_options)
        # Kernel Tuner measures every config of every call unless it has a cache file: without
        # `cache`, configs the store measured before are measured again.
        strategy_fields["remeasure"] = cache is None
        if seed is not None:
            strategy_fields["seed"] = int(seed)

        def progress(p: Any) -> None:
            if verbose and p.last:
                last = p.last
                config = ", ".join(f"{k}={v}" for k, v in _decoded(
                    _ordered(last.get("config") or {}, params), coded).items())
                shown = f"{last.get('median_ms'):.3f}ms" if last.get("status") == "ok" \
                    else last.get("status")
                print(f"{config}, time={shown}")

        try:
            job = d.tune(fam.name, fam.shape, fam.dtype, device_name, progress=progress,
                         **strategy_fields)
        except NoDevice as e:
            raise NoDevice("no_device", f"{e.message} (the family {fam.name!r} is written to "
                           f"{os.path.dirname(spec_path)} and loaded by ktuned"
                           f"{'; ' + passed if passed else ''})",
                           {"family": fam.name, "shape": fam.shape,
                            "kernel_dir": directory}) from e
        assert isinstance(job, Job)
        # A job whose every candidate failed ends failed with its rows: they are the results.
        if job.state != "done" and not (job.state == "failed" and job.results):
            raise KtuneError("job_" + job.state, f"job {job.id} ended {job.state}: {job.error}",
                             job)
        stats = d.stats()
    finally:
        if own:
            d.close()

    results = _results(job, params, _samples(stats.get("db"), job.id), metrics, coded)
    env = _environment(job, fam, directory, device_label, device_name, compiler_options,
                       iterations, problem_size, results, ranking, params, coded)
    if not quiet and ranking.note:
        print(ranking.note)
    if cache:
        _write_cache(cache, results, {
            "device_name": device_label, "kernel_name": kernel_name,
            "problem_size": problem_size if not isinstance(problem_size, tuple)
            else list(problem_size),
            "tune_params_keys": list(params), "tune_params": real_params,
            "objective": ranking.name})
    if not quiet and env.get("best_config"):
        best = env["best_config"]
        print("best performing configuration:")
        shown = f", time={best['time']:.3f}ms"
        if ranking.name != "time":
            shown += f", {ranking.name}={best[ranking.name]}"
        print(", ".join(f"{k}={best[k]}" for k in params) + shown)
    return results, env


def _refuse(*, verify: Any, cmem_args: Any, texmem_args: Any, observers: Any,
            simulation_mode: bool, kernel_name: Any) -> None:
    """NotSupported for Kernel Tuner's arguments ktune has no equivalent of."""
    for value, what in ((verify, "verify (write the expected outputs as answer) is"),
                        (cmem_args, "cmem_args (constant memory) is"),
                        (texmem_args, "texmem_args (texture memory) is"),
                        (observers, "observers (ktune measures time only) are")):
        if value is not None:
            hint = " (fix: pass the data as an argument)" if "mem_args" in what else ""
            raise _not_supported(f"{what} not supported{hint}")
    if simulation_mode:
        raise _not_supported("simulation_mode: replay a recorded space with `ktune replay`")
    if not isinstance(kernel_name, str) or not kernel_name.isidentifier():
        raise _not_supported(f"kernel_name {kernel_name!r}: expected the function's name "
                             "(templated kernels are not supported)")


def _language(lang: Optional[str], source: str, compiler: Optional[str]) -> str:
    """"C" or "CUDA": Kernel Tuner's detection when lang is None; CUPY and NVCUDA are CUDA."""
    if lang is None:
        lang = "CUDA" if "__global__" in source else ("OpenCL" if "__kernel" in source else "C")
    lang = str(lang).upper()
    if lang in ("CUPY", "NVCUDA"):
        lang = "CUDA"
    if lang not in ("C", "CUDA"):
        raise _not_supported(f"lang {lang!r}: ktune runs C (the host compiler) and CUDA (nvrtc)")
    if lang == "C" and compiler not in (None, "g++", "gcc", "c++", "cc"):
        raise _not_supported(f"compiler {compiler!r}: ktune compiles C with the system's C++ "
                             "compiler")
    return lang


def _space(restrictions: Any, params: dict[str, list[Any]], coded: dict[str, list[Any]]
           ) -> tuple[list[str], dict[str, int]]:
    """The family's constraints (each restriction as one, then Kernel Tuner's threads per block
    limit) and its [default]: the first admitted config, coded params as indices. EmptySpace
    when none is admitted."""
    import itertools  # noqa: PLC0415

    parsed = kt_space.parse_restrictions(restrictions, params)
    constraints = [kt_space.restriction_constraint(r, params, list(coded)) for r in parsed]
    limit = kt_space.max_threads_restriction(params)
    if limit:
        constraints.append(limit)
        parsed.append(kt_space.Restriction(lambda c: kt_space.kt_eval_string(limit, c), [],
                                           limit, limit))
    names = list(params)
    for values in itertools.product(*params.values()):
        config = dict(zip(names, values))
        if all(r.admits(config) for r in parsed):
            return constraints, {n: (coded[n].index(v) if n in coded else v)
                                 for n, v in config.items()}
    raise EmptySpace("empty_space", "the restrictions admit no config of tune_params "
                     "(Kernel Tuner's search space would be empty)")


def _strategy(strategy: Optional[str], options: Optional[dict]) -> dict[str, Any]:
    if strategy is not None and not isinstance(strategy, str):
        raise _not_supported("strategy: a user-defined strategy object is not supported")
    if strategy not in _STRATEGIES:
        raise ValueError(f"Unkown strategy {strategy}, must be one of: "
                         f"{', '.join(k for k in _STRATEGIES if k)}")
    fields: dict[str, Any] = {"strategy": _STRATEGIES[strategy]}
    options = dict(options or {})
    if "max_fevals" in options:
        fields["budget"] = int(options.pop("max_fevals"))
    if "time_limit" in options:
        fields["budget_s"] = float(options.pop("time_limit"))
    if "fraction" in options:
        if strategy != "random_sample":
            raise ValueError('It is not possible to use fraction in combination with strategies '
                             'other than "random_sample". Please set strategy="random_sample", '
                             'when using "fraction" in strategy_options')
        fields["budget_fraction"] = float(options.pop("fraction"))
    if "budget" in fields and "budget_fraction" in fields:
        del fields["budget_fraction"]
    if options:
        warnings.warn(f"strategy_options {sorted(options)} have no ktune equivalent and are "
                      f"ignored (ktune's {fields['strategy']} strategy tunes itself)",
                      UserWarning, stacklevel=3)
    return fields


def _register(d: Daemon, directory: str, spec_path: str, fam: _Family) -> None:
    """Has ktuned load the family; errors name why it did not."""
    reply = d.add_kernel_dir(directory)
    for k in reply.get("kernels", []):
        if os.path.realpath(k.get("path", "")) == spec_path:
            return
    for b in reply.get("broken", []):
        if os.path.realpath(b.get("path", "")) == spec_path:
            hint = (f" (fix: pass family='...' to tune_kernel, another directory has a family "
                    f"named {fam.name!r})") if "second definition" in b.get("error", "") or \
                "defined" in b.get("error", "") else ""
            raise SpecError("spec_error", b.get("error", "") + hint)
    raise SpecError("spec_error", f"ktuned did not load {spec_path} from {directory}")


def _device_label(d: Daemon, device_name: str) -> str:
    try:
        for dev in d.devices():
            if dev.name == device_name:
                return str(dev.details.get("name") or dev.details.get("model") or device_name)
    except KtuneError:
        pass
    return device_name


class _Ranking:
    """How results are ranked: `name` (time or a metric) and its direction, and Kernel Tuner
    1.4's several `objectives` ({name: higher_is_better}) when given; `note` says, after the
    tune, how the ranking relates to ktune's (the winner lookups answer is the fastest)."""

    def __init__(self, name: str, higher: bool, objectives: Optional[dict[str, bool]]) -> None:
        self.name = name
        self.higher = higher
        self.objectives = objectives
        self.note = ""

    def valid(self, result: dict[str, Any], name: Optional[str] = None) -> bool:
        value = result.get(name or self.name)
        return isinstance(value, (int, float)) and not isinstance(value, bool) and \
            not isinstance(result.get("time"), ErrorConfig) and not math.isnan(value)

    def best(self, results: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
        ok = [r for r in results if self.valid(r)]
        if not ok:
            return None
        return (max if self.higher else min)(ok, key=lambda r: r[self.name])

    def pareto_front(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The results no other result is at least as good as in every objective and better
        in one, in the results' order."""
        assert self.objectives is not None
        signs = {n: (-1.0 if h else 1.0) for n, h in self.objectives.items()}
        ok = [r for r in results if all(self.valid(r, n) for n in signs)]
        keys = [[signs[n] * float(r[n]) for n in signs] for r in ok]

        def dominates(a: list[float], b: list[float]) -> bool:
            return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

        return [r for i, r in enumerate(ok)
                if not any(dominates(keys[j], keys[i]) for j in range(len(ok)) if j != i)]

    def explain(self, results: list[dict[str, Any]], winner: Any) -> None:
        if self.name == "time" and not self.higher:
            return
        ok = sorted((r for r in results if self.valid(r)), key=lambda r: r["time"])
        values = [r[self.name] for r in ok]
        same = all((a >= b) if self.higher else (a <= b) for a, b in zip(values, values[1:]))
        if same:
            self.note = (f"objective {self.name!r} ranks the configs as time does: best_config "
                         "is the fastest, the config ktune's lookups answer")
        else:
            config = (winner or {}).get("config")
            self.note = (f"objective {self.name!r} ranks the configs differently from time: "
                         f"best_config is the best {self.name}; ktune's stored winner (what "
                         f"lookups and exports answer) is the fastest, {config}")


def _objectives(objective: Any, higher: Any, objectives: Any, metrics: Any) -> _Ranking:
    """The ranking of tune_kernel's objective arguments; errors name the argument and the fix."""
    names = ["time"] + (list(metrics) if isinstance(metrics, dict) else [])

    def check(name: Any, what: str) -> str:
        if not isinstance(name, str):
            raise TypeError(f"{what}: expected the name of time or of a metrics entry, found "
                            f"{type(name).__name__}")
        if name not in names:
            raise ValueError(f"{what} {name!r}: neither 'time' nor a key of metrics (fix: add "
                             f"it to metrics=, e.g. metrics={{{name!r}: lambda p: ...}}; "
                             f"known: {names})")
        return name

    multi = None
    if objectives is not None:
        if not isinstance(objectives, dict) or not objectives:
            raise TypeError("objectives: expected a dict of name -> higher_is_better, e.g. "
                            "{'time': False, 'GFLOP/s': True}")
        multi = {check(n, "objectives"): bool(h) for n, h in objectives.items()}
    if objective is None:
        if multi:
            first = next(iter(multi))
            return _Ranking(first, multi[first], multi)
        return _Ranking("time", bool(higher), None)
    return _Ranking(check(objective, "objective"), bool(higher), multi)


def _ordered(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """`config` with its parameters in tune_params order (ktuned answers them sorted)."""
    out = {k: config[k] for k in params if k in config}
    out.update({k: v for k, v in config.items() if k not in out})
    return out


def _environment(job: Job, fam: _Family, directory: str, device_label: str, device_name: str,
                 compiler_options: Any, iterations: int, problem_size: Any,
                 results: list[dict[str, Any]], ranking: _Ranking,
                 params: dict[str, Any], coded: dict[str, list[Any]]) -> dict[str, Any]:
    winner = dict(job.winner) if isinstance(job.winner, dict) else job.winner
    if isinstance(winner, dict) and isinstance(winner.get("config"), dict):
        winner["config"] = _ordered(winner["config"], params)
        winner["values"] = _decoded(winner["config"], coded)
    best = ranking.best(results)
    ranking.explain(results, winner)
    env: dict[str, Any] = {
        "device_name": device_label,
        "problem_size": problem_size if not isinstance(problem_size, tuple)
        else list(problem_size),
        "compiler_options": list(compiler_options or []),
        "iterations": iterations,
        "python_version": sys.version.split()[0],
        "ktune": {"job": job.id, "state": job.state, "error": job.error,
                  "family": fam.name, "kernel_dir": directory,
                  "shape": fam.shape, "dtype": fam.dtype, "device": device_name,
                  "strategy": job.strategy, "winner": winner,
                  "timing": job.raw.get("job", {}).get("timing")},
    }
    if best is not None:
        env["best_config"] = best
    env["objective"] = ranking.name
    env["objective_higher_is_better"] = ranking.higher
    if ranking.objectives is not None:
        env["objectives"] = dict(ranking.objectives)
        env["pareto_front"] = ranking.pareto_front(results)
    for key in ("framework", "strategy", "compile", "verification", "benchmark"):
        env[f"total_{key}_time"] = sum(float(r.get(f"{key}_time") or 0.0) for r in results)
    timing = env["ktune"]["timing"] or {}
    env["overhead_time"] = float(timing.get("overhead_ms") or 0.0)
    return env
