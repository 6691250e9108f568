"""ktune runtime lookup client, standard library only (socket, json, sqlite3).

Same ladder as libktune_client (docs/protocol.md, section lookup):
  1. the in-process cache of earlier answers (entries live cache_ttl seconds);
  2. ktuned over its Unix socket: exact winner, else the nearest tuned shape, else [default];
  3. when ktuned cannot be reached or does not answer within `timeout` seconds (default 5 ms):
     a read-only open of the SQLite database, exact winners only, as of the kernel's newest job;
  4. the kernel's [default], from the spec text stored in the database, else from
     <kernel dir>/<kernel>/kernel.toml.
The connection is kept between lookups. When ktuned closed it meanwhile (idle_timeout, a
restart), the next lookup finds it closed, connects again at once and sends the lookup again;
a connection that cannot be made is retried with exponential backoff (10 ms doubling to 1 s).

    client = Client()
    answer = client.lookup("gemm", "M=512,N=512,K=512")
    answer.config   # {"BM": 64, ...} in the kernel's parameter order
    answer.rung     # "exact", "nearest" or "default"; answer.reason says why not exact

One Client is used by one thread at a time.
"""

import json
import os
import socket
import sqlite3
import time

__all__ = ["Answer", "Client", "LookupError", "default_paths"]

_BACKOFF_MIN = 0.010
_BACKOFF_MAX = 1.0


class LookupError(Exception):
    """ktuned refused the request (code, message), or no rung of the ladder could answer."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Answer:
    __slots__ = ("rung", "exact", "source", "config", "from_shape", "reason", "median_ms", "job",
                 "tune_job")

    def __init__(self, rung, config, source, from_shape="", reason="", median_ms=0.0, job=0,
                 tune_job=0):
        self.rung = rung
        self.exact = rung == "exact"
        self.source = source
        self.config = config
        self.from_shape = from_shape
        self.reason = reason
        self.median_ms = median_ms
        self.job = job
        self.tune_job = tune_job

    def params(self):
        """The config as (name, value) pairs, in the kernel's parameter order."""
        return list(self.config.items())

    def __repr__(self):
        return (f"Answer(rung={self.rung!r}, source={self.source!r}, config={self.config!r}, "
                f"from_shape={self.from_shape!r}, reason={self.reason!r})")


def default_paths():
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


def _shape_map(shape):
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


def _parse_default_table(spec_text):
    """The [default] table of a kernel.toml as an ordered dict of ints, or None."""
    config, inside, found = {}, False, False
    for line in spec_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            inside = line == "[default]"
            found = found or inside
            continue
        if inside:
            name, eq, value = line.partition("=")
            if not eq:
                return None
            try:
                config[name.strip()] = int(value.strip())
            except ValueError:
                return None
    return config if found else None


class Client:
    def __init__(self, socket_path=None, db_path=None, kernel_dirs=None, timeout=0.005,
                 cache_ttl=1.0, tune_on_miss=False):
        default_socket, default_db = default_paths()
        self.socket_path = socket_path or default_socket
        self.db_path = db_path or default_db
        if kernel_dirs is None:
            kernel_dirs = [d for d in os.environ.get("KTUNE_KERNEL_DIRS", "").split(":") if d]
        self.kernel_dirs = list(kernel_dirs)
        self.timeout = timeout
        self.cache_ttl = cache_ttl   # None or < 0: no cache
        self.tune_on_miss = tune_on_miss
        self.last_error = ""
        self._sock = None
        self._buffer = b""
        self._next_id = 1
        self._retry_at = 0.0
        self._backoff = 0.0
        self._db = None
        self._cache = {}

    def close(self):
        self._disconnect()
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def clear_cache(self):
        self._cache.clear()

    def lookup(self, kernel, shape, dtype="f32", device="cpu"):
        """An Answer; raises LookupError when ktuned refuses the request or nothing answers."""
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
            answer = self._from_database(kernel, shape, dtype, device, now)
        if answer is None:
            answer = self._from_spec(kernel)
        if answer is None:
            raise LookupError("no_answer", self.last_error +
                              f"; no winner in the database and no [default] for kernel '{kernel}'")
        if use_cache:
            self._cache[key] = (now + self.cache_ttl, answer)
        return answer

    # ktuned ---------------------------------------------------------------------------------

    def _disconnect(self):
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._buffer = b""

    def _failed(self, message):
        self.last_error = message
        self._disconnect()
        self._backoff = _BACKOFF_MIN if self._backoff == 0 else min(self._backoff * 2, _BACKOFF_MAX)
        self._retry_at = time.monotonic() + self._backoff

    def _connect(self, now):
        if self._sock is not None:
            return True
        if now < self._retry_at:
            self.last_error = f"ktuned unreachable at {self.socket_path} (next attempt after backoff)"
            return False
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.socket_path)
        except OSError as e:
            s.close()
            self._failed(f"cannot connect to ktuned at {self.socket_path}: {e}")
            return False
        self._sock = s
        self._backoff = 0.0
        return True

    def _ask_daemon(self, kernel, shape, dtype, device, now):
        request_id = self._next_id
        self._next_id += 1
        request = {"v": 1, "id": request_id, "op": "lookup", "kernel": kernel, "shape": shape,
                   "dtype": dtype, "device": device}
        if self.tune_on_miss:
            request["tune_on_miss"] = True
        deadline = now + self.timeout
        # A kept connection that ktuned closed gets the lookup (idempotent) once more on a fresh
        # connection; a fresh connection that fails counts towards the backoff.
        while True:
            kept = self._sock is not None
            if not self._connect(now):
                return None
            try:
                reply = self._exchange(request, deadline)
                break
            except socket.timeout:
                self._failed(f"ktuned did not answer within {self.timeout * 1e6:.0f} us")
                return None
            except ConnectionError as e:
                if kept:
                    self._disconnect()
                    continue
                self._failed(f"connection to ktuned lost: {e}")
                return None
            except (OSError, ValueError) as e:
                self._failed(f"connection to ktuned lost: {e}")
                return None
        if not reply.get("ok"):
            error = reply.get("error", {})
            raise LookupError(error.get("code", "error"), error.get("message", ""))
        r = reply["result"]
        return Answer(r.get("rung", "default"), r.get("config", {}), "daemon",
                      r.get("from_shape", ""), r.get("reason", ""), r.get("median_ms") or 0.0,
                      r.get("job", 0), r.get("tune_job", 0))

    def _exchange(self, request, deadline):
        """Sends `request` and returns its reply. Raises socket.timeout past `deadline`,
        ConnectionError when ktuned closed the connection, OSError or ValueError otherwise."""
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

    def _open_db(self):
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

    def _from_database(self, kernel, shape, dtype, device, now):
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

    def _from_spec(self, kernel):
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
        config = _parse_default_table(text) if text else None
        if config is None:
            return None
        return Answer("default", config, source, "", "daemon_unreachable")
