"""The winner table ktuned publishes next to its socket (docs/protocol.md, section Winner table),
read through mmap with the standard library only: the same ladder and reply fields as ktuned's
lookup, bounds-checked, every entry's check (XXH64) verified before it answers.

TableView(buffer) reads a mapped table; MappedTable follows the file at one path (a superseded
table is replaced by the new file at the next lookup; a missing one is tried again after a
backoff of 10 ms doubling to 1 s).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import time
from typing import Optional

MAGIC = b"KTUNETBL"
LAYOUT_VERSION = 1
HEADER_BYTES = 256
SUPERSEDED_OFFSET = 200
FLAG_TUNE_ON_MISS = 1

_SECTIONS = 9
_MIN_BYTES = (32, 8, 48, 8, 40, 8, 72, 8, 1)
_DEVICE_LOCAL = 1
_DEVICE_HAS_WINNERS = 2
DEVICE_STALE_PEERS = 4  # another environment of the device's hardware has winners: ask ktuned
_KERNEL_DTYPE_AXIS = 1
_SEP = "\x1f"
_MAX_DIM = 1 << 40
_TIE = 1e-9

_M64 = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_4U64 = struct.Struct("<4Q")


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M64
    acc = ((acc << 31) | (acc >> 33)) & _M64
    return (acc * _P1) & _M64


def xxh64(data, seed: int = 0) -> int:
    """XXH64 of `data` (bytes-like) with `seed`, as libxxhash computes it."""
    n = len(data)
    i = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M64
        v2 = (seed + _P2) & _M64
        v3 = seed
        v4 = (seed - _P1) & _M64
        while i + 32 <= n:
            a, b, c, d = _4U64.unpack_from(data, i)
            v1 = _round(v1, a)
            v2 = _round(v2, b)
            v3 = _round(v3, c)
            v4 = _round(v4, d)
            i += 32
        h = (((v1 << 1) | (v1 >> 63)) + ((v2 << 7) | (v2 >> 57)) + ((v3 << 12) | (v3 >> 52)) +
             ((v4 << 18) | (v4 >> 46))) & _M64
        for v in (v1, v2, v3, v4):
            h ^= _round(0, v)
            h = (h * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, _U64.unpack_from(data, i)[0])
        h = ((((h << 27) | (h >> 37)) & _M64) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (_U32.unpack_from(data, i)[0] * _P1) & _M64
        h = ((((h << 23) | (h >> 41)) & _M64) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = ((((h << 11) | (h >> 53)) & _M64) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


def table_path_for_socket(socket_path: str) -> str:
    """The table next to a socket: its ".sock" suffix replaced by ".table" (else appended)."""
    if socket_path.endswith(".sock") and len(socket_path) > len(".sock"):
        return socket_path[:-len(".sock")] + ".table"
    return socket_path + ".table"


class TableError(Exception):
    """A table that cannot be read: code "unknown_layout" (another layout version) or
    "bad_table"."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Damaged(Exception):
    """A bound or a check failed while answering."""


def _canonical_shape(shape: str, dims: list[str]) -> Optional[str]:
    """The shape as the kernel's canonical text, or None for anything ktuned should judge
    (the same rules as core/winner_table.cpp)."""
    items: dict[str, int] = {}
    for raw in shape.split(","):
        name, eq, value = raw.partition("=")
        name, value = name.strip(" \t"), value.strip(" \t")
        if not eq or not name or not value or len(value) > 20 or not value.isascii() \
                or not value.isdigit() or name in items or len(items) == 64:
            return None
        number = int(value)
        if number <= 0 or number > _MAX_DIM:
            return None
        items[name] = number
    if len(items) != len(dims) or any(d not in items for d in dims):
        return None
    return ",".join(f"{d}={items[d]}" for d in dims)


class TableView:
    """A winner table in `buf` (an mmap or bytes). Raises TableError when the header does not
    check out."""

    def __init__(self, buf) -> None:
        if len(buf) < HEADER_BYTES:
            raise TableError("bad_table", f"winner table of {len(buf)} bytes: shorter than its header")
        if bytes(buf[0:8]) != MAGIC:
            raise TableError("bad_table", "not a winner table (magic)")
        version, header_bytes = struct.unpack_from("<II", buf, 8)
        if version != LAYOUT_VERSION:
            raise TableError("unknown_layout", f"winner table layout version {version}; this "
                                               f"reader knows version {LAYOUT_VERSION}")
        generation, file_bytes, published, flags, sections = struct.unpack_from("<QQQII", buf, 16)
        if header_bytes < HEADER_BYTES or header_bytes > len(buf) or file_bytes != len(buf):
            raise TableError("bad_table", "winner table header sizes do not match the file")
        if _U64.unpack_from(buf, 192)[0] != xxh64(bytes(buf[0:192])):
            raise TableError("bad_table", "winner table header check failed")
        if sections < _SECTIONS or 48 + 16 * sections > 192:
            raise TableError("bad_table", f"winner table with {sections} sections")
        self._sections = []
        for s in range(_SECTIONS):
            offset, count, entry = struct.unpack_from("<QII", buf, 48 + 16 * s)
            slots = _MIN_BYTES[s] == 8
            if entry < _MIN_BYTES[s] or (slots and entry != 8) or (s == 8 and entry != 1) or \
                    (slots and count & (count - 1)) or offset < header_bytes or \
                    offset > len(buf) or count * entry > len(buf) - offset:
                raise TableError("bad_table", f"winner table section {s} is malformed")
            self._sections.append((offset, count, entry))
        self.buf = buf
        self.generation = generation
        self.flags = flags
        self.last_device_flags = 0  # of the device the last answer() resolved
        self.published_unix_ms = published
        self._arena, self._arena_bytes, _ = self._sections[8]
        self._strings: dict[int, str] = {}
        # What was verified or resolved in this table (it never changes while mapped).
        self._sound_blobs: dict[int, int] = {}   # blob offset -> its check
        self._sound_records: set[int] = set()
        self._resolved: dict[tuple[str, str], tuple] = {}
        self._group_hashes: dict[str, int] = {}

    def superseded(self) -> bool:
        return _U64.unpack_from(self.buf, SUPERSEDED_OFFSET)[0] != 0

    # -- reading, bounds-checked --------------------------------------------------------------

    def _string(self, ref: int) -> str:
        cached = self._strings.get(ref)
        if cached is not None:
            return cached
        if ref < 4 or ref >= self._arena_bytes:
            raise Damaged()
        length = _U32.unpack_from(self.buf, self._arena + ref - 4)[0]
        if length >= self._arena_bytes - ref or self.buf[self._arena + ref + length] != 0:
            raise Damaged()
        try:
            text = bytes(self.buf[self._arena + ref:self._arena + ref + length]).decode()
        except UnicodeDecodeError:
            raise Damaged() from None
        self._strings[ref] = text
        return text

    def _blob(self, offset: int) -> tuple[int, int, int]:
        """(start in the file, bytes, check) of a config blob whose own check holds."""
        if offset > self._arena_bytes or self._arena_bytes - offset < 16:
            raise Damaged()
        start = self._arena + offset
        check, count, text = struct.unpack_from("<QII", self.buf, start)
        nul = 16 + 16 * count + text
        size = (nul + 1 + 7) // 8 * 8
        if size > self._arena_bytes - offset or self.buf[start + nul] != 0:
            raise Damaged()
        if self._sound_blobs.get(offset) != check:
            if check != xxh64(bytes(self.buf[start + 8:start + size])):
                raise Damaged()
            self._sound_blobs[offset] = check
        return start, size, check

    def _config(self, offset: int) -> dict[str, int]:
        start, _, _ = self._blob(offset)
        count = _U32.unpack_from(self.buf, start + 8)[0]
        config = {}
        for i in range(count):
            name_ref, _, value = struct.unpack_from("<IIq", self.buf, start + 16 + 16 * i)
            config[self._string(name_ref)] = value
        return config

    def _entry(self, section: int, index: int) -> int:
        offset, count, entry = self._sections[section]
        if index >= count:
            raise Damaged()
        return offset + index * entry

    def _entry_hash(self, section: int, at: int) -> int:
        size = self._sections[section][2]
        return xxh64(bytes(self.buf[at + 8:at + size]))

    def _probe(self, slots: int, entries: int, key_hash: int):
        offset, capacity, _ = self._sections[slots]
        limit = self._sections[entries][1]
        if capacity == 0:
            return
        mask = capacity - 1
        for step in range(capacity):
            slot = _U64.unpack_from(self.buf, offset + 8 * ((key_hash + step) & mask))[0]
            index = slot & 0xFFFFFFFF
            if index == 0:
                return
            if slot >> 32 == key_hash >> 32 and index - 1 < limit:
                yield self._entry(entries, index - 1)

    def _record_shape(self, at: int) -> str:
        payload, = _U32.unpack_from(self.buf, at + 32)
        ndims = struct.unpack_from("<H", self.buf, at + 44)[0]
        if payload > self._arena_bytes or 8 * ndims + 4 > self._arena_bytes - payload:
            raise Damaged()
        return self._string(payload + 8 * ndims + 4)

    def _record_sound(self, at: int) -> bool:
        if at in self._sound_records:
            return True
        payload, payload_bytes, blob = struct.unpack_from("<III", self.buf, at + 32)
        if payload > self._arena_bytes or payload_bytes > self._arena_bytes - payload:
            return False
        _, _, blob_check = self._blob(blob)
        size = self._sections[6][2]
        h = xxh64(bytes(self.buf[at + 8:at + size]), blob_check)
        start = self._arena + payload
        if _U64.unpack_from(self.buf, at)[0] != xxh64(bytes(self.buf[start:start + payload_bytes]), h):
            return False
        self._sound_records.add(at)
        return True

    # -- the ladder ---------------------------------------------------------------------------

    def _resolve(self, kernel: str, device: str) -> Optional[tuple]:
        """The device and the kernel family it runs, as ktuned resolves them; None when the
        table lacks either."""
        buf = self.buf
        found = None
        device_hash = xxh64(device.encode())
        for at in self._probe(1, 0, device_hash):
            if _U64.unpack_from(buf, at + 8)[0] == device_hash and \
                    self._string(_U32.unpack_from(buf, at + 16)[0]) == device:
                found = at
                break
        if found is None:
            return None
        if _U64.unpack_from(buf, found)[0] != self._entry_hash(0, found):
            raise Damaged()
        fp_ref, family, device_flags = struct.unpack_from("<III", buf, found + 20)
        fingerprint = self._string(fp_ref)
        kernel_at = None
        for attempt in range(2):
            if attempt == 1:
                if device_flags & _DEVICE_LOCAL or family != 1:
                    break
                family = 0
            key = (kernel + _SEP + ("cuda" if family == 1 else "cpp")).encode()
            key_hash = xxh64(key)
            for at in self._probe(3, 2, key_hash):
                if _U64.unpack_from(buf, at + 8)[0] == key_hash and \
                        _U32.unpack_from(buf, at + 20)[0] == family and \
                        self._string(_U32.unpack_from(buf, at + 16)[0]) == kernel:
                    kernel_at = at
                    break
            if kernel_at is not None:
                break
        if kernel_at is None:
            return None
        source_ref, dims_ref, dtypes_ref, default_blob, tuned_ref, kernel_flags = \
            struct.unpack_from("<IIIIII", buf, kernel_at + 24)
        _, _, blob_check = self._blob(default_blob)
        size = self._sections[2][2]
        if _U64.unpack_from(buf, kernel_at)[0] != xxh64(bytes(buf[kernel_at + 8:kernel_at + size]),
                                                         blob_check):
            raise Damaged()
        dtypes_text = self._string(dtypes_ref)
        return (fingerprint, device_flags, kernel_flags, self._string(source_ref),
                self._string(dims_ref).split(","), dtypes_text.split(",") if dtypes_text else [],
                self._string(tuned_ref).split(","), default_blob)

    def answer(self, kernel: str, shape: str, dtype: str, device: str) -> Optional[dict]:
        """The answer as ktuned gives it ({"rung", "config", "from_shape", "reason",
        "median_ms", "job"}), or None when the table cannot answer (a device, kernel, dtype or
        shape it cannot vouch for). Raises Damaged when a bound or a check fails."""
        buf = self.buf
        resolved = self._resolved.get((device, kernel))
        if resolved is None:
            resolved = self._resolve(kernel, device)
            if resolved is None:
                return None
            self._resolved[(device, kernel)] = resolved
        fingerprint, device_flags, kernel_flags, source_hash, dims, dtypes, tuned_on, \
            default_blob = resolved
        self.last_device_flags = device_flags

        if not kernel_flags & _KERNEL_DTYPE_AXIS and dtype == "f32" and dtypes:
            dtype = dtypes[0]
        if dtype not in dtypes:
            return None
        canonical = _canonical_shape(shape, dims)
        if canonical is None:
            return None

        def winner(at: int, rung: str) -> dict:
            median, gflops, job = struct.unpack_from("<ddq", buf, at + 48)
            return {"rung": rung, "config": self._config(_U32.unpack_from(buf, at + 40)[0]),
                    "from_shape": "", "reason": "",
                    "median_ms": median if math.isfinite(median) else 0.0,
                    "gflops": gflops if math.isfinite(gflops) else 0.0, "job": job}

        source_changed = False
        group_key = kernel + _SEP + dtype + _SEP + fingerprint
        group_hash = self._group_hashes.get(group_key)
        if group_hash is None:
            group_hash = self._group_hashes[group_key] = xxh64(group_key.encode())
        key_hash = xxh64(canonical.encode(), group_hash)
        for at in self._probe(7, 6, key_hash):
            k_ref, d_ref, f_ref, s_ref = struct.unpack_from("<IIII", buf, at + 16)
            if _U64.unpack_from(buf, at + 8)[0] != key_hash or self._string(k_ref) != kernel or \
                    self._string(d_ref) != dtype or self._string(f_ref) != fingerprint or \
                    self._record_shape(at) != canonical:
                continue
            if self._string(s_ref) != source_hash:
                source_changed = True
                continue
            if not self._record_sound(at):
                raise Damaged()
            return winner(at, "exact")

        group_found = False
        for at in self._probe(5, 4, group_hash):
            k_ref, d_ref, f_ref, first, count = struct.unpack_from("<IIIII", buf, at + 16)
            if _U64.unpack_from(buf, at + 8)[0] != group_hash or self._string(k_ref) != kernel or \
                    self._string(d_ref) != dtype or self._string(f_ref) != fingerprint:
                continue
            if _U64.unpack_from(buf, at)[0] != self._entry_hash(4, at):
                raise Damaged()
            records = self._sections[6][1]
            if first > records or count > records - first:
                raise Damaged()
            group_found = count > 0
            wanted = [math.log(int(item.partition("=")[2])) for item in canonical.split(",")]
            best, best_shape, best_distance = None, "", math.inf
            for r in range(first, first + count):
                rec = self._entry(6, r)
                record_shape = self._record_shape(rec)
                if record_shape == canonical:
                    continue
                if self._string(_U32.unpack_from(buf, rec + 28)[0]) != source_hash:
                    continue
                ndims = struct.unpack_from("<H", buf, rec + 44)[0]
                if ndims != len(wanted):
                    continue
                logs = struct.unpack_from(f"<{ndims}d", buf,
                                          self._arena + _U32.unpack_from(buf, rec + 32)[0])
                distance = math.sqrt(sum((w - v) * (w - v) for w, v in zip(wanted, logs)))
                tie = best is not None and abs(distance - best_distance) <= _TIE
                if (not tie and distance < best_distance) or (tie and record_shape < best_shape):
                    best, best_shape, best_distance = rec, record_shape, distance
            if best is not None:
                if not self._record_sound(best):
                    raise Damaged()
                out = winner(best, "nearest")
                out["from_shape"] = best_shape
                out["reason"] = "source_changed" if source_changed else "shape_not_tuned"
                return out
            break

        if source_changed or group_found:
            reason = "source_changed"
        elif not device_flags & _DEVICE_HAS_WINNERS:
            reason = "device_never_tuned"
        elif fingerprint in tuned_on:
            reason = "dtype_not_tuned"
        else:
            reason = "no_results_for_kernel"
        return {"rung": "default", "config": self._config(default_blob), "from_shape": "",
                "reason": reason, "median_ms": 0.0, "gflops": 0.0, "job": 0}


class MappedTable:
    """The table at `path` ("" = none), mapped read-only and replaced when superseded."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.error = ""
        self._map: Optional[mmap.mmap] = None
        self._view: Optional[TableView] = None
        self._retry_at = 0.0
        self._backoff = 0.0

    def close(self) -> None:
        self._view = None
        if self._map is not None:
            self._map.close()
            self._map = None

    def view(self) -> Optional[TableView]:
        view = self._view
        if view is not None and not view.superseded():
            return view
        if not self.path:
            return None
        now = time.monotonic()
        if view is None and now < self._retry_at:
            return None
        self.close()
        for _ in range(3):
            try:
                with open(self.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size <= 0:
                        raise OSError("empty file")
                    m = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
            except (OSError, ValueError) as e:
                self.error = f"winner table {self.path}: {e}"
                break
            try:
                v = TableView(m)
            except TableError as e:
                m.close()
                self.error = f"winner table {self.path}: {e}"
                break
            if not v.superseded():
                self._map, self._view = m, v
                self.error = ""
                self._backoff = 0.0
                return v
            m.close()
        self._backoff = 0.010 if self._backoff == 0 else min(self._backoff * 2, 1.0)
        self._retry_at = now + self._backoff
        return None
