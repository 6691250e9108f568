"""Kernel Tuner's `kernel_tuner.file_utils`: tune_kernel's results as a T4 results file and the
machine as a T4 metadata file (schema 1.0.0, the files `ktune export --format t4` and
`ktune import` read, docs/export-format.md). Standard library only."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from typing import Any, Sequence

from ._tune import CompilationFailedConfig, ErrorConfig, InvalidConfig, _write_atomic

__all__ = ["store_output_file", "store_metadata_file", "get_configuration_validity",
           "filename_ensure_json_extension"]

SCHEMA_VERSION = "1.0.0"
_TIMING_KEYS = ("compile_time", "benchmark_time", "framework_time", "strategy_time",
                "verification_time")
_KTUNE_KEYS = ("ktune_status", "ktune_reason", "ktune_time")


def filename_ensure_json_extension(filename: str) -> str:
    """`filename`, with .json appended unless it ends so."""
    filename = os.fspath(filename)
    return filename if filename.endswith(".json") else filename + ".json"


def get_configuration_validity(objective_value: Any, ktune_status: str = "") -> str:
    """T4's invalidity of a result: correct, compile, runtime, constraints, or (from ktune's
    status) timeout and correctness (an output that did not match the answer)."""
    if not isinstance(objective_value, ErrorConfig):
        return "correct"
    if ktune_status in ("timeout", "compile_timeout") and \
            not isinstance(objective_value, CompilationFailedConfig):
        return "timeout"
    if ktune_status == "mismatch":
        return "correctness"
    if isinstance(objective_value, CompilationFailedConfig):
        return "compile"
    if isinstance(objective_value, InvalidConfig):
        return "constraints"
    return "runtime"


def _plain(value: Any) -> Any:
    if isinstance(value, ErrorConfig):
        return str(value)
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def store_output_file(output_filename: str, results: Sequence[dict[str, Any]],
                      tune_params: dict[str, Any], objective: str = "time") -> None:
    """Writes `results` (tune_kernel's) as a T4 results file: per result its timestamp, its
    configuration (in tune_params order), its times, validity, the measured values (every
    key that is neither a parameter nor a timing) and the objective."""
    output_filename = filename_ensure_json_extension(output_filename)
    skip = set(tune_params) | set(_TIMING_KEYS) | {"timestamp", "times"} | set(_KTUNE_KEYS)
    rows = []
    for result in results:
        validity = get_configuration_validity(result.get(objective),
                                              str(result.get("ktune_status", "")))
        rows.append({
            "timestamp": result.get("timestamp", ""),
            "configuration": {k: _plain(result[k]) for k in tune_params if k in result},
            "times": {"compilation": result.get("compile_time", 0.0),
                      "benchmark": result.get("benchmark_time", 0.0),
                      "framework": result.get("framework_time", 0.0),
                      "search_algorithm": result.get("strategy_time", 0.0),
                      "validation": result.get("verification_time", 0.0),
                      "runtimes": list(result.get("times") or [])},
            "invalidity": validity,
            "correctness": 1 if validity == "correct" else 0,
            "measurements": [{"name": k, "value": _plain(v),
                              "unit": "ms" if k.startswith("time") else ""}
                             for k, v in result.items() if k not in skip],
            "objectives": [objective],
        })
    document = {"schema_version": SCHEMA_VERSION, "metadata": {"timeunit": "miliseconds"},
                "results": rows}
    _write_atomic(os.path.abspath(output_filename), json.dumps(document, default=str))


def _command_json(command: list[str]) -> Any:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return None


def store_metadata_file(metadata_filename: str) -> None:
    """Writes a T4 metadata file of this machine: the hardware as `lshw -json` reports it (an
    empty list when lshw is not installed, where Kernel Tuner raises FileNotFoundError), the
    GPUs as `nvidia-smi` does when present, and the Python environment."""
    metadata_filename = filename_ensure_json_extension(metadata_filename)
    lshw = _command_json(["lshw", "-json", "-quiet"])
    if isinstance(lshw, dict):
        lshw = [lshw]
    device_query: dict[str, Any] = {}
    try:
        smi = subprocess.run(["nvidia-smi", "--query", "-x"], capture_output=True, text=True,
                             timeout=60)
        if smi.returncode == 0:
            device_query["nvidia-smi"] = smi.stdout
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        import numpy  # noqa: PLC0415
        requirements = [f"numpy=={numpy.__version__}"]
    except ImportError:
        requirements = []
    metadata = {"hardware": {"lshw": lshw or []},
                "environment": {"device_query": device_query, "requirements": requirements,
                                "python": sys.version.split()[0],
                                "platform": platform.platform(),
                                "tuner": "ktune (ktune_client.kernel_tuner)"}}
    document = {"metadata": metadata, "schema_version": SCHEMA_VERSION}
    _write_atomic(os.path.abspath(metadata_filename), json.dumps(document, indent=2))
