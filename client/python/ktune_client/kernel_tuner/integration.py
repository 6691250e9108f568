"""Kernel Tuner's `kernel_tuner.integration`: keep the best configs of tuning runs per device and
problem size in a results file (store_results) and turn them into a header that selects a config
per device at compile time (create_device_targets). The header can also be made from ktune's
stored winners (create_device_targets with `kernel=` and no results file). Standard library
only."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Optional, Sequence

from ..daemon import Daemon
from .util import get_best_config, get_instance_string, is_valid_result
from ._tune import _write_atomic

__all__ = ["store_results", "create_device_targets"]

_VERSION = "1.0"


def _objective(objective: Optional[str], higher: Optional[bool]) -> tuple[str, bool]:
    """Kernel Tuner's defaults: time, lower is better."""
    return (objective or "time"), bool(higher)


def _problem_size_string(problem_size: Any) -> str:
    if not isinstance(problem_size, (list, tuple)):
        problem_size = (problem_size,)
    return "x".join(str(p) for p in problem_size)


def store_results(results_filename: str, kernel_name: str, kernel_string: Any,
                  tune_params: dict[str, Any], problem_size: Any,
                  results: Sequence[dict[str, Any]], env: dict[str, Any], top: float = 3,
                  objective: Optional[str] = None,
                  objective_higher_is_better: Optional[bool] = None) -> None:
    """Adds the configs within `top` percent of the best `objective` of `results` to the
    results file (JSON), for env["device_name"] and `problem_size`; entries of that device and
    problem size already there are replaced. A file of another kernel, other parameters or
    another objective is an error (ValueError naming the field)."""
    objective, higher = _objective(objective, objective_higher_is_better)
    best = get_best_config(results, objective, higher)
    if best is None:
        raise ValueError(f"store_results: no result has a valid {objective!r} (every config "
                         "failed, or the objective is not a metric of the results)")
    bound = best[objective] * (1 - top / 100 if higher else 1 + top / 100)
    keep = [r for r in results if is_valid_result(r, objective) and
            (r[objective] >= bound if higher else r[objective] <= bound)]
    device = str(env.get("device_name", "unknown"))
    size = _problem_size_string(problem_size)
    keys = list(tune_params)
    header = {"version_number": _VERSION, "kernel_name": kernel_name,
              "kernel_string": kernel_string if isinstance(kernel_string, str) else "",
              "objective": objective, "objective_higher_is_better": higher,
              "tune_params_keys": keys,
              "tune_params": {k: [_plain(v) for v in vs] for k, vs in tune_params.items()}}
    data: list[dict[str, Any]] = []
    if os.path.isfile(results_filename):
        with open(results_filename, encoding="utf-8") as f:
            old = json.load(f)
        for field in ("kernel_name", "tune_params_keys", "objective"):
            if old.get(field) != header[field]:
                raise ValueError(f"store_results: {results_filename} holds {field} "
                                 f"{old.get(field)!r}, not {header[field]!r} (fix: another "
                                 "results_filename)")
        data = [d for d in old.get("data", [])
                if not (d.get("device_name") == device and d.get("problem_size") == size)]
    for r in keep:
        entry = {"device_name": device, "problem_size": size}
        entry.update({k: _plain(r[k]) for k in keys})
        entry[objective] = r[objective]
        data.append(entry)
    header["data"] = data
    _write_atomic(os.path.abspath(results_filename), json.dumps(header, indent=1))


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


def _target_name(device: str) -> str:
    return re.sub(r"\W", "_", device.strip()) or "unknown"


def _common_config(groups: dict[str, list[dict[str, Any]]], keys: list[str], objective: str,
                   higher: bool) -> dict[str, Any]:
    """The config that is among the kept ones of the most groups (problem sizes, or devices and
    problem sizes); of those, the best summed objective."""
    count: dict[str, int] = {}
    total: dict[str, float] = {}
    params: dict[str, dict[str, Any]] = {}
    for entries in groups.values():
        for e in entries:
            config = {k: e[k] for k in keys}
            name = get_instance_string(config)
            count[name] = count.get(name, 0) + 1
            total[name] = total.get(name, 0.0) + float(e[objective])
            params[name] = config
    most = max(count.values())
    candidates = [n for n in count if count[n] == most]
    pick = max if higher else min
    return params[pick(candidates, key=lambda n: total[n])]


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _write_header(header_filename: str, targets: dict[str, dict[str, Any]],
                  default: dict[str, Any], source: str) -> None:
    lines = [f"/* header file generated by ktune ({source}), do not modify by hand */",
             "#pragma once", "#ifndef kernel_tuner /* only use these when not tuning */", ""]
    for i, (device, config) in enumerate(targets.items()):
        lines.append(f"#{'if' if i == 0 else 'elif'} defined(TARGET_{_target_name(device)})"
                     f"  /* {device} */")
        lines += [f"#define {k} {_value_text(v)}" for k, v in config.items()]
    lines.append("#else /* default configuration */" if targets else "/* default configuration */")
    lines += [f"#define {k} {_value_text(v)}" for k, v in default.items()]
    if targets:
        lines.append("#endif /* device targets */")
    lines += ["", "#endif /* kernel_tuner */", ""]
    _write_atomic(os.path.abspath(header_filename), "\n".join(lines))


def create_device_targets(header_filename: str, results_filename: Optional[str] = None,
                          objective: Optional[str] = None,
                          objective_higher_is_better: Optional[bool] = None, *,
                          kernel: Optional[str] = None, daemon: Optional[Daemon] = None) -> None:
    """Writes a header that defines each tunable parameter per device: compiled with
    -DTARGET_<device> (the device name with every non-identifier character as `_`) it gets that
    device's config, without one a default; nothing while tuning (`kernel_tuner` defined).

    From a results file of store_results: a device's config is its best at its one problem
    size, or the config kept at the most problem sizes (the best summed objective among equals);
    the default is chosen the same way over every device and problem size.
    From ktune's store (ktune's own: `kernel=` the family, no results file): the winners ktuned
    answers lookups with (`ktune export`), by device name, chosen the same way over shapes."""
    if results_filename is None:
        if kernel is None:
            raise TypeError("create_device_targets: give results_filename (a file of "
                            "store_results) or kernel= (a family in ktune's store)")
        groups = _groups_from_store(kernel, daemon)
        source = f"ktune's stored winners of {kernel}"
        objective, higher = "median_ms", False
    else:
        if not os.path.isfile(results_filename):
            raise ValueError(f"create_device_targets: results file {results_filename} does not "
                             "exist (fix: write it with store_results)")
        with open(results_filename, encoding="utf-8") as f:
            stored = json.load(f)
        if not stored.get("data"):
            raise ValueError(f"create_device_targets: {results_filename} holds no results")
        objective, higher = _objective(objective or stored.get("objective"),
                                       objective_higher_is_better
                                       if objective_higher_is_better is not None
                                       else stored.get("objective_higher_is_better"))
        groups = {}
        for d in stored["data"]:
            groups.setdefault(d["device_name"], {}).setdefault(d["problem_size"], []).append(d)
        keys_list = stored["tune_params_keys"]
        groups = {dev: {"keys": keys_list, "sizes": sizes} for dev, sizes in groups.items()}
        source = os.path.basename(results_filename)
    targets = {}
    merged: dict[str, list[dict[str, Any]]] = {}
    for device, g in groups.items():
        keys, sizes = g["keys"], g["sizes"]
        if len(sizes) == 1:
            entries = next(iter(sizes.values()))
            best = (max if higher else min)(entries, key=lambda e: float(e[objective]))
            targets[device] = {k: best[k] for k in keys}
        else:
            targets[device] = _common_config(sizes, keys, objective, higher)
        for size, entries in sizes.items():
            merged[f"{device}:{size}"] = [{**{k: e[k] for k in keys}, objective: e[objective]}
                                          for e in entries]
    all_keys = next(iter(groups.values()))["keys"]
    default = _common_config(merged, all_keys, objective, higher)
    _write_header(header_filename, targets, default, source)


def _groups_from_store(kernel: str, daemon: Optional[Daemon]) -> dict[str, Any]:
    own = daemon is None
    d = daemon or Daemon(autostart=False)
    try:
        table = d.export("json", kernel=kernel)
    finally:
        if own:
            d.close()
    rows = [r for r in table.get("rows", []) if r.get("kernel") == kernel]
    if not rows:
        raise ValueError(f"create_device_targets: ktune's store has no winners of {kernel!r} "
                         "(fix: tune it first, or give a results file)")
    groups: dict[str, Any] = {}
    for r in rows:
        device = r.get("device") or {}
        details = device.get("details") or {}
        name = str(details.get("name") or details.get("model") or device.get("name") or
                   r["fingerprint"][:12])
        g = groups.setdefault(name, {"keys": list(r["config"]), "sizes": {}})
        g["sizes"].setdefault(f"{r['shape']}/{r['dtype']}", []).append(
            {**r["config"], "median_ms": r["median_ms"]})
    return groups
