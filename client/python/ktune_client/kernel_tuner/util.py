"""Kernel Tuner's `kernel_tuner.util` helpers that scripts import, with their behaviour: picking
the best result, writing a config as text, and the launch arithmetic. Standard library only."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

from ._tune import (CompilationFailedConfig, ErrorConfig, InvalidConfig, RuntimeFailedConfig,
                    _kt_eval)

__all__ = ["ErrorConfig", "InvalidConfig", "CompilationFailedConfig", "RuntimeFailedConfig",
           "default_block_size_names", "get_best_config", "get_config_string",
           "get_instance_string", "get_problem_size", "get_thread_block_dimensions",
           "get_grid_dimensions", "is_valid_result"]

default_block_size_names = ["block_size_x", "block_size_y", "block_size_z", "ngangs",
                            "nworkers", "vlength"]


def is_valid_result(result: dict[str, Any], objective: str = "time") -> bool:
    """Whether `result` has a measured value of `objective` (not an ErrorConfig, not missing)."""
    value = result.get(objective)
    return value is not None and not isinstance(value, (ErrorConfig, str))


def get_best_config(results: Sequence[dict[str, Any]], objective: str,
                    objective_higher_is_better: bool = False) -> Optional[dict[str, Any]]:
    """The result with the best `objective` among those that have one (the lowest, or the
    highest with objective_higher_is_better); the first of equals; None when none has one."""
    valid = [r for r in results if is_valid_result(r, objective)]
    if not valid:
        return None
    pick: Callable[..., Any] = max if objective_higher_is_better else min
    return pick(valid, key=lambda r: r[objective])


def get_config_string(params: dict[str, Any], keys: Optional[Sequence[str]] = None,
                      units: Optional[dict[str, str]] = None) -> str:
    """`name=value<unit>` for each entry of `params` (only `keys` when given), in the dict's
    order, joined with ", "."""
    wanted = params.keys() if not keys else keys
    parts = []
    for name, value in params.items():
        if name in wanted:
            unit = units.get(name, "") if isinstance(units, dict) else ""
            parts.append(f"{name}={value}{unit}")
    return ", ".join(parts)


def get_instance_string(params: dict[str, Any]) -> str:
    """The values of `params` joined with "_" (a config's name in files and kernel names)."""
    return "_".join(str(v) for v in params.values())


def get_problem_size(problem_size: Any, params: dict[str, Any]) -> tuple[int, int, int]:
    """The problem size at a config as three integers: a function is called with the params,
    strings are evaluated over them, missing axes are 1."""
    if callable(problem_size):
        problem_size = problem_size(params)
    if isinstance(problem_size, (str, int)) or hasattr(problem_size, "__index__"):
        problem_size = (problem_size,)
    if not isinstance(problem_size, (list, tuple)):
        raise TypeError("problem_size: expected an int, a string, a tuple of those or a "
                        f"function, found {type(problem_size).__name__}")
    out = [int(_kt_eval(p, params)) if isinstance(p, str) else int(p) for p in problem_size]
    return tuple((out + [1, 1, 1])[:3])  # type: ignore[return-value]


def get_thread_block_dimensions(params: dict[str, Any],
                                block_size_names: Optional[Sequence[str]] = None
                                ) -> tuple[int, int, int]:
    """The thread block of a config: the block size parameters it has, else 256, 1, 1."""
    names = list(block_size_names or default_block_size_names)
    return tuple(int(params.get(names[i], 256 if i == 0 else 1))  # type: ignore[return-value]
                 for i in range(3))


def get_grid_dimensions(current_problem_size: Sequence[int], params: dict[str, Any],
                        grid_div: Sequence[Any], block_size_names: Sequence[str]
                        ) -> tuple[int, int, int]:
    """The grid of a config: each axis' problem size divided by the product of its divisors
    (a divisor list None is that axis' block size name), rounded up."""
    out = []
    for i in range(3):
        div = grid_div[i]
        if div is None:
            div = [block_size_names[i]] if block_size_names[i] in params else []
        if callable(div):
            divisor = div(params)
        else:
            if isinstance(div, str):
                div = [div]
            divisor = math.prod(int(_kt_eval(str(d), params)) for d in div) if div else 1
        out.append(int(math.ceil(current_problem_size[i] / divisor)))
    return tuple(out)  # type: ignore[return-value]
