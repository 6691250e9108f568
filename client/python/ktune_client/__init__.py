"""ktune's Python client, standard library only (socket, json, sqlite3, tomllib).

Two parts: `Client`, the runtime lookup below; and `Daemon` (ktune_client.daemon), everything
else the `ktune` CLI does -- tune with progress, jobs, results, export, import, history,
kernels, devices -- with the protocol's errors as exception classes (ktune_client.errors).
Kernel Tuner scripts switch with one import: `from ktune_client.kernel_tuner import tune_kernel`
(docs/kernel-tuner.md; that module needs numpy).

The lookup client:

Same ladder as libktune_client (docs/protocol.md, section lookup):
  1. the winner table ktuned publishes next to its socket (<socket without .sock>.table),
     mapped read-only (ktune_client._table): the same ladder and fields as ktuned's answer,
     source "map", also while ktuned is down (its last table). What the table cannot answer goes
     on to 2-5; with tune_on_miss (or ktuned's KTUNE_TUNE_ON_MISS=1) a non-exact answer is asked
     of ktuned, so that it queues the tune, and the table's answer stands when ktuned is down;
  2. the in-process cache of earlier answers from 3-5 (entries live `cache_ttl` seconds);
  3. ktuned over its Unix socket: exact winner, else the nearest tuned shape, else [default];
  4. when ktuned cannot be reached or does not answer in time: a read-only open of the SQLite
     database, exact winners only, as of the kernel's newest job;
  5. the kernel's [default], from the spec text stored in the database, else from
     <kernel dir>/<kernel>/kernel.toml (read with tomllib, as ktuned reads it with toml++).

Timeouts: a lookup on an open connection waits at most `timeout` seconds (default 5 ms). The
first request on a new connection may take `connect_timeout` (default 100 ms) more, since ktuned
has to accept the connection first; a new connection that still gets no answer is made once
more before the fallbacks. A connection ktuned closed meanwhile (idle_timeout, a restart) is
replaced at once. Only a connect that fails (no daemon) starts the backoff (10 ms doubling to
1 s); a daemon that is up but answered late is asked again at the next lookup, so the backoff
never hides a live daemon's answer.

    from ktune_client import Client
    client = Client()
    answer = client.lookup("gemm", "M=512,N=512,K=512")
    answer.config   # {"BM": 64, ...} in the kernel's parameter order
    answer.rung     # "exact", "stale", "nearest" or "default"; answer.reason says why not exact

One Client is used by one thread at a time.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import socket
import sqlite3
import time
import tomllib
from typing import Any, Iterable, Optional

from ._table import DEVICE_STALE_PEERS, FLAG_TUNE_ON_MISS, Damaged, MappedTable, table_path_for_socket
from .errors import *  # noqa: F401,F403 (the exception classes are the package's)
from .errors import KtuneError
from .errors import __all__ as _error_names

__all__ = ["Answer", "Client", "Daemon", "Job", "Progress", "LookupError", "default_paths",
           "parse_default_table", "shipped_kernel_dirs", *_error_names]
__version__ = "0.1.0"

_BACKOFF_MIN = 0.010
_BACKOFF_MAX = 1.0


class LookupError(KtuneError, builtins.LookupError):  # noqa: A001 (the name the client has always exported)
    """ktuned refused the lookup (code, message), or no rung of the ladder could answer.

    A KtuneError like every error of the protocol, and a subclass of the builtin LookupError, so
    `except LookupError` catches it whether or not the name was imported from ktune_client."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)


class Answer:
    """One lookup's answer.

    rung: "exact", "stale", "nearest" or "default"; exact: rung == "exact"; source: "map", "cache",
    "daemon", "database" or "spec"; config: parameter name -> int in the kernel's order; from_shape: the
    tuned shape of a nearest answer; reason: why not exact; median_ms and job: the winner's.
    """

    __slots__ = ("rung", "exact", "source", "config", "from_shape", "reason", "median_ms", "job",
                 "tune_job")

    def __init__(self, rung: str, config: dict[str, int], source: str, from_shape: str = "",
                 reason: str = "", median_ms: float = 0.0, job: int = 0,
                 tune_job: int = 0) -> None:
        self.rung = rung
        self.exact = rung == "exact"
        self.source = source
        self.config = config
        self.from_shape = from_shape
        self.reason = reason
        self.median_ms = median_ms
        self.job = job
        self.tune_job = tune_job

    def params(self) -> list[tuple[str, int]]:
        """The config as (name, value) pairs, in the kernel's parameter order."""
        return list(self.config.items())

    def __repr__(self) -> str:
        return (f"Answer(rung={self.rung!r}, source={self.source!r}, config={self.config!r}, "
                f"from_shape={self.from_shape!r}, reason={self.reason!r})")


def default_paths() -> tuple[str, str]:
    """(socket, db) as ktuned resolves them (core/paths.hpp)."""
    home = os.environ.get("KTUNE_HOME", "")
    if home:
        return os.path.join(home, "ktuned.sock"), os.path.join(home, "ktune.db")
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    runtime_dir = os.path.join(runtime, "ktune") if runtime else f"/tmp/ktune-{os.getuid()}"
    state = os.environ.get("XDG_STATE_HOME", "")
    if not state:
        state = os.path.join(os.environ.get("HOME", ""), ".local", "state")
    return os.path.join(runtime_dir, "ktuned.sock"), os.path.join(state, "ktune", "ktune.db")


def shipped_kernel_dirs() -> list[str]:
    """The kernel families installed with the ktuned on PATH (<prefix>/share/ktune/kernels)."""
    ktuned = shutil.which("ktuned")
    if ktuned is None:
        return []
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(ktuned)))
    kernels = os.path.join(prefix, "share", "ktune", "kernels")
    return [kernels] if os.path.isdir(kernels) else []


def _shape_map(shape: str) -> Optional[dict[str, int]]:
    dims = {}
    for item in shape.split(","):
        name, eq, value = item.partition("=")
        if not eq:
            return None
        try:
            number = int(value.strip())
        except ValueError:
            return None
        if number <= 0:
            return None
        dims[name.strip()] = number
    return dims


def parse_default_table(spec_text: str) -> Optional[dict[str, int]]:
    """The [default] table of a kernel.toml in file order, or None when the text is not TOML,
    has no [default] table, or a value is not an integer (booleans included)."""
    try:
        spec = tomllib.loads(spec_text)
    except tomllib.TOMLDecodeError:
        return None
    table = spec.get("default")
    if not isinstance(table, dict):
        return None
    config = {}
    for name, value in table.items():
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        config[name] = value
    return config


class Client:
    """A lookup client; see the module docstring for the ladder and the timeouts.

    socket_path, db_path: ktuned's defaults when None (default_paths()). kernel_dirs: where
    kernel.toml files are read for the last rung; None means $KTUNE_KERNEL_DIRS (':'-separated);
    the shipped families (shipped_kernel_dirs()) are searched after them. cache_ttl: seconds an
    answer is reused; None or < 0 turns the cache off. tune_on_miss: ask ktuned to tune a key
    it has no exact winner for. table_path: the winner table to answer from first; None means
    the one next to the socket, "" none.
    """

    def __init__(self, socket_path: Optional[str] = None, db_path: Optional[str] = None,
                 kernel_dirs: Optional[Iterable[str]] = None, timeout: float = 0.005,
                 cache_ttl: Optional[float] = 1.0, tune_on_miss: bool = False,
                 connect_timeout: float = 0.1, table_path: Optional[str] = None) -> None:
        default_socket, default_db = default_paths()
        self.socket_path = socket_path or default_socket
        self.db_path = db_path or default_db
        if kernel_dirs is None:
            kernel_dirs = [d for d in os.environ.get("KTUNE_KERNEL_DIRS", "").split(":") if d]
        self.kernel_dirs = list(kernel_dirs) + [d for d in shipped_kernel_dirs()
                                                if d not in kernel_dirs]
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.cache_ttl = cache_ttl
        self.tune_on_miss = tune_on_miss
        self.last_error = ""
        self._sock: Optional[socket.socket] = None
        self._buffer = b""
        self._next_id = 1
        self._retry_at = 0.0
        self._backoff = 0.0
        self._db: Optional[sqlite3.Connection] = None
        self._cache: dict[tuple[str, str, str, str], tuple[float, Answer]] = {}
        self._table = MappedTable(table_path_for_socket(self.socket_path)
                                  if table_path is None else table_path)

    def close(self) -> None:
        """Closes the connection, the database and the winner table."""
        self._disconnect()
        self._table.close()
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def clear_cache(self) -> None:
        """Drops the cached answers."""
        self._cache.clear()

    def lookup(self, kernel: str, shape: str, dtype: str = "f32", device: str = "cpu") -> Answer:
        """An Answer; raises LookupError when ktuned refuses the request or nothing answers."""
        mapped = self._from_table(kernel, shape, dtype, device)
        if mapped is not None:
            answer, ask = mapped
            if not ask:
                return answer
            # The miss is ktuned's to see (it queues the tune); without ktuned the table answers.
            self.last_error = ""
            asked = self._ask_daemon(kernel, shape, dtype, device, time.monotonic())
            return asked if asked is not None else answer
        now = time.monotonic()
        key = (kernel, shape, dtype, device)
        use_cache = self.cache_ttl is not None and self.cache_ttl >= 0
        if use_cache:
            hit = self._cache.get(key)
            if hit is not None and now < hit[0]:
                a = hit[1]
                return Answer(a.rung, a.config, "cache", a.from_shape, a.reason, a.median_ms,
                              a.job, a.tune_job)
        self.last_error = ""
        answer = self._ask_daemon(kernel, shape, dtype, device, now)
        if answer is None:
            answer = self._from_database(kernel, shape, dtype, device)
        if answer is None:
            answer = self._from_spec(kernel)
        if answer is None:
            raise LookupError("no_answer", self.last_error +
                              f"; no winner in the database and no [default] for kernel '{kernel}'")
        if use_cache:
            assert self.cache_ttl is not None
            self._cache[key] = (now + self.cache_ttl, answer)
        return answer

    # the winner table -------------------------------------------------------------------------

    def _from_table(self, kernel: str, shape: str, dtype: str,
                    device: str) -> Optional[tuple[Answer, bool]]:
        """The table's answer and whether ktuned should be asked too (a non-exact answer with
        tune-on-miss); None when the table cannot answer."""
        view = self._table.view()
        if view is None:
            return None
        try:
            found = view.answer(kernel, shape, dtype, device)
        except Damaged:
            self.last_error = f"winner table {self._table.path}: a damaged entry; asking ktuned"
            return None
        if found is None:
            return None
        answer = Answer(found["rung"], found["config"], "map", found["from_shape"],
                        found["reason"], found["median_ms"], found["job"])
        # A non-exact answer goes to ktuned too when it should see the miss (tune-on-miss) or
        # may answer `stale` (the device's hardware has winners under another environment).
        ask = answer.rung != "exact" and (
            self.tune_on_miss or bool(view.flags & FLAG_TUNE_ON_MISS) or
            bool(view.last_device_flags & DEVICE_STALE_PEERS))
        return answer, ask

    # ktuned ---------------------------------------------------------------------------------

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._buffer = b""

    def _connect_failed(self, message: str) -> None:
        self.last_error = message
        self._disconnect()
        self._backoff = _BACKOFF_MIN if self._backoff == 0 else min(self._backoff * 2, _BACKOFF_MAX)
        self._retry_at = time.monotonic() + self._backoff

    def _connect(self, now: float) -> bool:
        if self._sock is not None:
            return True
        if now < self._retry_at:
            self.last_error = f"ktuned unreachable at {self.socket_path} (next attempt after backoff)"
            return False
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.connect_timeout)
            s.connect(self.socket_path)
        except OSError as e:
            s.close()
            self._connect_failed(f"cannot connect to ktuned at {self.socket_path}: {e}")
            return False
        self._sock = s
        self._backoff = 0.0
        return True

    def _ask_daemon(self, kernel: str, shape: str, dtype: str, device: str,
                    now: float) -> Optional[Answer]:
        request_id = self._next_id
        self._next_id += 1
        request: dict[str, Any] = {"v": 1, "id": request_id, "op": "lookup", "kernel": kernel,
                                   "shape": shape, "dtype": dtype, "device": device}
        if self.tune_on_miss:
            request["tune_on_miss"] = True
        fresh_attempts = 0
        while True:
            kept = self._sock is not None
            if not self._connect(now if kept else time.monotonic()):
                return None
            if kept:
                deadline = now + self.timeout
            else:
                fresh_attempts += 1
                deadline = time.monotonic() + self.connect_timeout + self.timeout
            try:
                reply = self._exchange(request, deadline)
                self.last_error = ""
                break
            except socket.timeout:
                self.last_error = (f"ktuned did not answer within {self.timeout * 1e6:.0f} us"
                                   + ("" if kept else " (+ connect_timeout on a new connection)"))
            except (OSError, ValueError) as e:
                self.last_error = f"connection to ktuned lost: {e}"
            # The daemon accepted the connection: no backoff. Replace a kept connection; make
            # a new one once more.
            self._disconnect()
            if fresh_attempts >= 2:
                return None
        if not reply.get("ok"):
            error = reply.get("error", {})
            raise LookupError(error.get("code", "error"), error.get("message", ""))
        r = reply["result"]
        return Answer(r.get("rung", "default"), r.get("config", {}), "daemon",
                      r.get("from_shape", ""), r.get("reason", ""), r.get("median_ms") or 0.0,
                      r.get("job", 0), r.get("tune_job", 0))

    def _exchange(self, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        """Sends `request` and returns its reply. Raises socket.timeout past `deadline`,
        ConnectionError when ktuned closed the connection, OSError or ValueError otherwise."""
        assert self._sock is not None
        self._sock.settimeout(max(deadline - time.monotonic(), 1e-6))
        self._sock.sendall((json.dumps(request, separators=(",", ":")) + "\n").encode())
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line, self._buffer = self._buffer[:newline], self._buffer[newline + 1:]
                reply = json.loads(line)
                if "event" in reply or reply.get("id") != request["id"]:
                    continue
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            self._sock.settimeout(left)
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("ktuned closed the connection")
            self._buffer += chunk

    # offline fallbacks ----------------------------------------------------------------------

    def _open_db(self) -> Optional[sqlite3.Connection]:
        if self._db is None:
            if not os.path.exists(self.db_path):
                self.last_error += f"; database {self.db_path} does not exist"
                return None
            try:
                self._db = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=0.002)
            except sqlite3.Error as e:
                self.last_error += f"; database {self.db_path}: {e}"
                return None
        return self._db

    def _from_database(self, kernel: str, shape: str, dtype: str,
                       device: str) -> Optional[Answer]:
        db = self._open_db()
        wanted = _shape_map(shape)
        if db is None or wanted is None:
            return None
        try:
            rows = db.execute(
                "SELECT w.shape, w.config, w.median_ms, w.job_id FROM winners w "
                "WHERE w.kernel = ?1 AND w.dtype = ?2 "
                "AND w.source_hash = (SELECT source_hash FROM jobs WHERE kernel = ?1 "
                "ORDER BY id DESC LIMIT 1) "
                "AND w.fingerprint = (SELECT fingerprint FROM jobs WHERE kernel = ?1 "
                "AND device = ?3 ORDER BY id DESC LIMIT 1)", (kernel, dtype, device)).fetchall()
        except sqlite3.Error as e:
            self.last_error += f"; database {self.db_path}: {e}"
            return None
        for row_shape, config, median_ms, job in rows:
            if _shape_map(row_shape) == wanted:
                return Answer("exact", json.loads(config), "database", "", "", median_ms or 0.0,
                              job)
        return None

    def _from_spec(self, kernel: str) -> Optional[Answer]:
        text, source = None, "database"
        db = self._db
        if db is not None:
            try:
                row = db.execute(
                    "SELECT spec_text FROM kernels WHERE name = ?1 AND source_hash = "
                    "(SELECT source_hash FROM jobs WHERE kernel = ?1 ORDER BY id DESC LIMIT 1)",
                    (kernel,)).fetchone()
                text = row[0] if row else None
            except sqlite3.Error:
                text = None
        if text is None:
            source = "spec"
            for d in self.kernel_dirs:
                try:
                    with open(os.path.join(d, kernel, "kernel.toml"), encoding="utf-8") as f:
                        text = f.read()
                    break
                except OSError:
                    continue
        config = parse_default_table(text) if text else None
        if config is None:
            return None
        return Answer("default", config, source, "", "daemon_unreachable")


from .daemon import Daemon, Job, Progress  # noqa: E402 (uses default_paths above)
