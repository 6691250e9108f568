"""Engine-style tables (`ktune export --format engine-json --by M -o DIR`), read the way an
inference engine reads its tuned configs, standard library only.

Each file holds the configs of one (kernel, fixed dims, dtype, device): its keys are the values
of one dim (the batch dim M), each entry a config, and its `metadata` says what it was tuned
with and how to answer a value between keys (docs/export-format.md, section engine-json):

  - a value that is a key takes its entry;
  - with `lookup.between_keys` "buckets" (a rule `ktune distill` stored), the config of the
    bucket it falls in: from <= value < below, below null meaning no end;
  - with "nearest", the key nearest in log space (|ln value - ln key| least; ties: the smaller
    key), as ktuned's nearest rung.

    from ktune_client.engine_tables import find_table
    table = find_table("gemm_configs", "gemm", {"N": 4096, "K": 4096}, "f32", "NVIDIA_H100_80GB_HBM3")
    config = table.config(M)            # {"BM": 64, ...}
    table.metadata["toolchain"]         # what the configs were tuned with

A file of another format version, or one whose fingerprint or source hash you do not expect, is
yours to refuse: `matches()` compares them.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Mapping, Optional

FORMAT = "ktune-engine-json"
SCHEMA_VERSION = 1

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class EngineTableError(ValueError):
    """A file that is not an engine table ktune wrote, naming the file and the field."""


def device_name(text: str) -> str:
    """A device name as the file names spell it: every character but letters, digits, '_', '-'
    and '.' replaced by '_' ("NVIDIA H100 80GB HBM3" -> "NVIDIA_H100_80GB_HBM3")."""
    return _UNSAFE.sub("_", text) or "unknown"


def file_name(kernel: str, fixed: Mapping[str, int], dtype: str, device: str) -> str:
    """The file of (kernel, fixed dims in the kernel's order, dtype, device name)."""
    parts = [kernel] + ["%s=%d" % (dim, value) for dim, value in fixed.items()]
    return ",".join(parts + ["dtype=" + device_name(dtype), "device_name=" + device_name(device)]) + ".json"


class EngineTable:
    """One engine-json file: `configs` ({value: config}), `metadata` and `config(value)`."""

    def __init__(self, document: Mapping[str, Any], where: str = "table"):
        meta = document.get("metadata") if isinstance(document, Mapping) else None
        if not isinstance(meta, Mapping) or meta.get("format") != FORMAT:
            raise EngineTableError("%s: not an engine table (metadata.format is not %r)" % (where, FORMAT))
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise EngineTableError("%s: metadata.schema_version %r, this reader knows %d"
                                   % (where, meta.get("schema_version"), SCHEMA_VERSION))
        self.metadata: dict = dict(meta)
        self.configs: dict[int, dict] = {}
        for key, config in document.items():
            if key == "metadata":
                continue
            if not key.isdigit() or int(key) <= 0 or not isinstance(config, dict):
                raise EngineTableError("%s: %r: expected a positive integer key with a config" % (where, key))
            self.configs[int(key)] = config
        if not self.configs:
            raise EngineTableError("%s: no entries" % where)
        self.keys = sorted(self.configs)
        lookup = meta.get("lookup") or {}
        self.between_keys = lookup.get("between_keys", "nearest")
        self.buckets = lookup.get("buckets") or []
        if self.between_keys not in ("nearest", "buckets"):
            raise EngineTableError("%s: metadata.lookup.between_keys %r is not nearest or buckets"
                                   % (where, self.between_keys))

    @classmethod
    def load(cls, path: str) -> "EngineTable":
        with open(path, encoding="utf-8") as f:
            try:
                document = json.load(f)
            except json.JSONDecodeError as e:
                raise EngineTableError("%s: not JSON: %s" % (path, e)) from None
        return cls(document, path)

    def config(self, value: int) -> dict:
        """The config for `value` of the keyed dim, by the file's lookup rule."""
        if value <= 0:
            raise ValueError("%s must be positive, got %r" % (self.metadata.get("by", "the dim"), value))
        if value in self.configs:
            return self.configs[value]
        if self.between_keys == "buckets":
            for bucket in self.buckets:
                below = bucket.get("below")
                if bucket["from"] <= value and (below is None or value < below):
                    return bucket["config"]
        return self.configs[self.nearest_key(value)]

    def nearest_key(self, value: int) -> int:
        """The key nearest to `value` in log space; ties go to the smaller key."""
        target = math.log(value)
        return min(self.keys, key=lambda k: (abs(math.log(k) - target), k))

    def matches(self, fingerprint: Optional[str] = None, source_hash: Optional[str] = None) -> bool:
        """Whether the file was tuned on `fingerprint` (a prefix will do) from `source_hash`."""
        if fingerprint is not None and not str(self.metadata.get("fingerprint", "")).startswith(fingerprint):
            return False
        return source_hash is None or self.metadata.get("source_hash") == source_hash


def find_table(directory: str, kernel: str, fixed: Mapping[str, int], dtype: str,
               device: str) -> Optional[EngineTable]:
    """The table of (kernel, fixed dims, dtype, device) in `directory`, or None when there is no
    such file (an engine then falls back to its default config)."""
    path = os.path.join(directory, file_name(kernel, fixed, dtype, device))
    if not os.path.exists(path):
        return None
    return EngineTable.load(path)
