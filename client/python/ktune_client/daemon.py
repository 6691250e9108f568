"""ktune as a Python library: everything the `ktune` CLI does, over ktuned's socket.

    from ktune_client import Daemon
    with Daemon() as d:                                   # ktuned's default socket
        job = d.tune("gemm", "M=256,N=256,K=256", progress=lambda p: print(p.done, p.total))
        job.winner["config"]                              # {"BM": 64, ...}
        job.results                                       # one dict per candidate
        job.dataframe()                                   # a pandas DataFrame (pandas optional)
        d.export("json")                                  # the winners as an exported table

Requests go to ktuned over its Unix socket as NDJSON (docs/protocol.md): tune (waiting or not,
with a progress callback), job, jobs, cancel, kernels, devices, stats, compile_check, import,
add_kernel_dir, confirm (an A/B of two builds of a key) and canary (the speed canary). What the CLI reads from the database itself (export, history) and the import of
a table file (json or T4, split to fit the daemon's message limit) run the `ktune` command next
to ktuned, so there is one implementation of each format. Errors are the protocol's, as the
exception classes of ktune_client.errors (UnknownKernel, BadShape, NoDevice, ...).

Standard library only. One Daemon is used by one thread at a time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import time
from typing import Any, Callable, Iterable, Optional, Union

from .errors import CommandFailed, DaemonUnreachable, KtuneError, error_for

__all__ = ["Daemon", "Job", "Progress", "Kernel", "Device", "find_ktune_command",
           "results_dataframe"]


@dataclasses.dataclass
class Progress:
    """One progress event of a waiting tune (docs/protocol.md, tune): `done` of `total`
    candidates finished, `failed` of them not ok, the best so far, and the last candidate's
    result (`last`: config, config_index, status, reason, median_ms)."""

    job: int
    done: int
    total: int
    failed: int
    best_config: Optional[dict[str, int]]
    best_median_ms: Optional[float]
    last: dict[str, Any]
    raw: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Progress":
        return cls(job=data.get("job", 0), done=data.get("done", 0), total=data.get("total", 0),
                   failed=data.get("failed", 0), best_config=data.get("best_config"),
                   best_median_ms=data.get("best_median_ms"), last=data.get("last") or {},
                   raw=data)


@dataclasses.dataclass
class Job:
    """A job as the `job` op answers it: its fields (id, kernel, shape, dtype, device, strategy,
    state, total, done, failed, error, timing, ...), its `winner` (config, median_ms, ...; None
    until a candidate succeeded), the kernel's `params` in spec order and `results`, one plain
    dict per finished candidate (empty in a tune's summary, which carries none: see
    Daemon.job)."""

    id: int
    kernel: str
    shape: str
    dtype: str
    device: str
    strategy: str
    state: str
    total: int
    done: int
    failed: int
    error: str
    winner: Optional[dict[str, Any]]
    params: list[str]
    results: list[dict[str, Any]]
    raw: dict[str, Any]

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> "Job":
        """From a `job` reply ({"job": {...}, "winner": ..., "results": [...]}) or a bare job
        object (a `jobs` entry)."""
        job = reply.get("job") if isinstance(reply.get("job"), dict) else reply
        return cls(id=job.get("id", 0), kernel=job.get("kernel", ""), shape=job.get("shape", ""),
                   dtype=job.get("dtype", ""), device=job.get("device", ""),
                   strategy=job.get("strategy", ""), state=job.get("state", ""),
                   total=job.get("total", 0), done=job.get("done", 0),
                   failed=job.get("failed", 0), error=job.get("error", ""),
                   winner=reply.get("winner"), params=list(reply.get("params") or []),
                   results=list(reply.get("results") or []), raw=reply)

    @property
    def finished(self) -> bool:
        """Whether the job ended (done, failed, cancelled or interrupted)."""
        return self.state not in ("queued", "running")

    def rows(self) -> list[dict[str, Any]]:
        """The results flattened for tables: the config's params as columns (spec order), then
        status, reason and the statistics."""
        return [_flat_row(r, self.params) for r in self.results]

    def dataframe(self) -> Any:
        """rows() as a pandas DataFrame. Raises ImportError when pandas is not installed (it is
        never required: rows() holds the same data)."""
        return results_dataframe(self.rows())


@dataclasses.dataclass
class Kernel:
    """A loaded kernel family (the `kernels` op): name, language (cpp, cuda), shape dims,
    dtypes, params (name -> values, in spec order), space_size, default config, source_hash,
    path of its kernel.toml."""

    name: str
    language: str
    shape: list[str]
    dtypes: list[str]
    params: dict[str, list[int]]
    space_size: int
    default: dict[str, int]
    source_hash: str
    path: str

    @classmethod
    def from_json(cls, k: dict[str, Any]) -> "Kernel":
        order = k.get("param_names") or list(k.get("params", {}))
        params = {name: k.get("params", {}).get(name, []) for name in order}
        return cls(name=k.get("name", ""), language=k.get("language", ""),
                   shape=list(k.get("shape", [])), dtypes=list(k.get("dtypes", [])),
                   params=params, space_size=k.get("space_size", 0),
                   default=dict(k.get("default", {})), source_hash=k.get("source_hash", ""),
                   path=k.get("path", ""))


@dataclasses.dataclass
class Device:
    """A device ktuned can tune on: name (cpu, cuda:N), fingerprint, details (model, arch, ...)."""

    name: str
    fingerprint: str
    details: dict[str, Any]
    uuid: str = ""


def _flat_row(result: dict[str, Any], params: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    config = result.get("config") or {}
    for name in params or list(config):
        row[name] = config.get(name)
    for key, value in result.items():
        if key != "config":
            row[key] = value
    return row


def results_dataframe(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of `rows` (plain dicts). ImportError when pandas is not installed."""
    try:
        import pandas  # noqa: PLC0415 (optional dependency, imported on use)
    except ImportError as e:
        raise ImportError("a DataFrame needs pandas, which is not installed (the same results "
                          "are available as plain dicts)") from e
    return pandas.DataFrame(rows)


def find_ktune_command(bin_dir: Optional[str] = None) -> Optional[str]:
    """The `ktune` executable: in `bin_dir`, else next to the ktuned on PATH, else on PATH."""
    if bin_dir:
        candidate = os.path.join(bin_dir, "ktune")
        return candidate if os.access(candidate, os.X_OK) else None
    ktuned = shutil.which("ktuned")
    if ktuned:
        candidate = os.path.join(os.path.dirname(os.path.realpath(ktuned)), "ktune")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("ktune")


class Daemon:
    """A connection to ktuned for everything but hot-path lookups (ktune_client.Client).

    socket_path: ktuned's socket; None = the default (ktune_client.default_paths()).
    autostart: when nothing answers, start ktuned the way the CLI does (`ktune daemon start`,
    which needs the ktune command: bin_dir, else next to ktuned on PATH, else on PATH).
    connect_timeout: seconds to wait for a connection. Requests wait for their reply as long as
    the daemon takes (a waiting tune takes as long as the job), unless `timeout` is given.
    """

    def __init__(self, socket_path: Optional[str] = None, *, autostart: bool = False,
                 bin_dir: Optional[str] = None, connect_timeout: float = 5.0,
                 timeout: Optional[float] = None) -> None:
        from . import default_paths  # noqa: PLC0415 (the package imports this module)

        self.socket_path = socket_path or default_paths()[0]
        self._explicit_socket = socket_path is not None
        self.autostart = autostart
        self.bin_dir = bin_dir
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._sock: Optional[socket.socket] = None
        self._buffer = b""
        self._next_id = 1

    # connection -------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection (a job keeps running)."""
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._buffer = b""

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        try:
            self._sock = self._open()
        except OSError as first:
            if not self.autostart:
                raise DaemonUnreachable("daemon_unreachable",
                                        f"cannot connect to ktuned at {self.socket_path}: {first} "
                                        "(start it with `ktune daemon start`)") from first
            self._start_daemon()
            try:
                self._sock = self._open()
            except OSError as second:
                raise DaemonUnreachable("daemon_unreachable",
                                        f"started ktuned, but cannot connect at "
                                        f"{self.socket_path}: {second}") from second
        return self._sock

    def _open(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.connect_timeout)
            s.connect(self.socket_path)
        except OSError:
            s.close()
            raise
        return s

    def _start_daemon(self) -> None:
        args = ["daemon", "start"]
        self._run_ktune(args, what="start ktuned")

    def _run_ktune(self, args: list[str], what: str, stdin: Optional[bytes] = None) -> str:
        command = find_ktune_command(self.bin_dir)
        if command is None:
            raise CommandFailed("command_failed",
                                f"cannot {what}: no `ktune` command (looked in "
                                f"{self.bin_dir or 'the directory of ktuned on PATH, then PATH'})")
        full = [command]
        if self._explicit_socket:
            full += ["--socket", self.socket_path]
        full += args
        done = subprocess.run(full, input=stdin, capture_output=True, check=False)
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip() or \
                done.stdout.decode(errors="replace").strip()
            raise CommandFailed("command_failed",
                                f"cannot {what}: `{' '.join(full)}` exited {done.returncode}: "
                                f"{message}")
        return done.stdout.decode()

    # requests ---------------------------------------------------------------------------------

    def request(self, op: str, fields: Optional[dict[str, Any]] = None,
                on_event: Optional[Callable[[str, dict[str, Any]], None]] = None) -> Any:
        """Sends one request and returns its `result`; raises the error class of an error reply.
        Events of the request (progress) go to on_event(name, data) as they come."""
        message: dict[str, Any] = {"v": 1, "id": self._next_id, "op": op}
        self._next_id += 1
        message.update(fields or {})
        sock = self._connect()
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        try:
            sock.settimeout(self.timeout)
            sock.sendall(line)
            reply = self._read_reply(sock, message["id"], on_event)
        except socket.timeout as e:
            self.close()
            raise error_for("timeout", f"ktuned did not answer {op} within {self.timeout} s") from e
        except OSError as e:
            self.close()
            raise DaemonUnreachable("daemon_unreachable",
                                    f"connection to ktuned at {self.socket_path} lost during "
                                    f"{op}: {e}") from e
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise error_for(error.get("code", "internal"), error.get("message", ""))
        return reply.get("result")

    def _read_reply(self, sock: socket.socket, request_id: int,
                    on_event: Optional[Callable[[str, dict[str, Any]], None]]) -> dict[str, Any]:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line, self._buffer = self._buffer[:newline], self._buffer[newline + 1:]
                if not line.strip():
                    continue
                reply = json.loads(line)
                if reply.get("id") not in (request_id, None):
                    continue
                if "event" in reply:
                    if on_event is not None and reply.get("id") == request_id:
                        on_event(reply["event"], reply.get("data") or {})
                    continue
                if reply.get("id") is None and reply.get("ok", True):
                    continue
                return reply
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("ktuned closed the connection")
            self._buffer += chunk

    # ops --------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The daemon's state: pid, version, db, socket, kernel_dirs, jobs, workers, measure, ..."""
        return self.request("stats")

    def devices(self) -> list[Device]:
        """The devices this daemon can tune on (the CPU, the CUDA devices a worker sees)."""
        result = self.request("devices")
        return [Device(d.get("name", ""), d.get("fingerprint", ""), d.get("details") or {},
                       d.get("uuid", "")) for d in result.get("devices", [])]

    def kernels(self) -> list[Kernel]:
        """The loaded kernel families (rescans the kernel directories). Families whose spec does
        not load are in broken_kernels()."""
        return [Kernel.from_json(k) for k in self.request("kernels").get("kernels", [])]

    def broken_kernels(self) -> list[dict[str, str]]:
        """Families that do not load: {"path": kernel.toml, "error": why}."""
        return list(self.request("kernels").get("broken", []))

    def add_kernel_dir(self, path: str) -> dict[str, Any]:
        """Makes ktuned load the families of directory `path` from now on, also after a restart
        (docs/protocol.md, add_kernel_dir). Returns {"path", "added", "kernel_dirs", "kernels",
        "broken"}: the families found under it and those whose spec does not load."""
        return self.request("add_kernel_dir", {"path": os.path.abspath(path)})

    def remove_kernel_dir(self, path: str) -> dict[str, Any]:
        """Undoes add_kernel_dir for `path`."""
        return self.request("remove_kernel_dir", {"path": os.path.abspath(path)})

    def tune(self, kernel: str, shape: str, dtype: str = "f32", device: str = "cpu", *,
             strategy: str = "exhaustive", budget: Optional[int] = None,
             budget_fraction: Optional[float] = None, budget_s: Optional[float] = None,
             seed: Optional[int] = None, remeasure: bool = False, retry_failed: bool = False,
             cold: bool = False, compile_timeout_s: Optional[float] = None,
             bench_timeout_s: Optional[float] = None, wait: bool = True,
             progress: Optional[Callable[[Progress], None]] = None) -> Union[Job, list[Job]]:
        """Queues a tuning job (docs/protocol.md, tune). With wait (the default) it returns once
        the job ended, calling progress(Progress) after every finished candidate, and the Job
        has its results; without, it returns the queued job (see wait_for()). device "all" gives
        a list of jobs, one per device. A job that ended failed is returned, not raised: check
        job.state and job.error."""
        fields: dict[str, Any] = {"kernel": kernel, "shape": shape, "dtype": dtype,
                                  "device": device, "strategy": strategy, "wait": wait}
        for key, value in (("budget", budget), ("budget_fraction", budget_fraction),
                           ("budget_s", budget_s), ("seed", seed),
                           ("compile_timeout_s", compile_timeout_s),
                           ("bench_timeout_s", bench_timeout_s)):
            if value is not None:
                fields[key] = value
        for key, flag in (("remeasure", remeasure), ("retry_failed", retry_failed),
                          ("cold", cold)):
            if flag:
                fields[key] = True

        def on_event(name: str, data: dict[str, Any]) -> None:
            if name == "progress" and progress is not None:
                progress(Progress.from_json(data))

        result = self.request("tune", fields, on_event)
        if "jobs" in result:
            ids = [j["job"]["id"] if isinstance(j.get("job"), dict) else j.get("job")
                   for j in result["jobs"]]
            return [self.job(i) if wait else Job.from_reply({"job": dict(j, id=i)})
                    for i, j in zip(ids, result["jobs"])]
        if wait:
            return self.job(result["job"]["id"])
        queued = Job.from_reply({"job": {"id": result["job"], "kernel": kernel, "shape": shape,
                                         "dtype": dtype, "device": result.get("device", device),
                                         "strategy": strategy, "state": result.get("state", ""),
                                         "total": result.get("total", 0)}})
        queued.raw = result
        return queued

    def job(self, job_id: int) -> Job:
        """One job with every candidate's result (UnknownJob when there is none)."""
        return Job.from_reply(self.request("job", {"job": int(job_id)}))

    def jobs(self, limit: int = 50) -> list[Job]:
        """The newest jobs first, without their results."""
        return [Job.from_reply(j) for j in self.request("jobs", {"limit": int(limit)})["jobs"]]

    def wait_for(self, job_id: int, poll_s: float = 0.2,
                 progress: Optional[Callable[[Job], None]] = None,
                 timeout_s: Optional[float] = None) -> Job:
        """Polls a job until it ended; progress(Job) after each poll that changed `done`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last_done = -1
        while True:
            job = self.job(job_id)
            if progress is not None and job.done != last_done:
                progress(job)
                last_done = job.done
            if job.finished:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise error_for("timeout", f"job {job_id} still {job.state} after {timeout_s} s")
            time.sleep(poll_s)

    def cancel(self, job_id: int) -> str:
        """Cancels a queued or running job; returns its state (cancelled, or running while it
        winds down)."""
        return self.request("cancel", {"job": int(job_id)}).get("state", "")

    def results(self, job_id: int) -> list[dict[str, Any]]:
        """Every candidate's result of a job as plain dicts (config, status, median_ms, ...)."""
        return self.job(job_id).results

    def results_dataframe(self, job_id: int) -> Any:
        """A job's results as a pandas DataFrame (ImportError without pandas)."""
        return self.job(job_id).dataframe()

    def compile_check(self, kernel: str, arch: Union[str, Iterable[str]],
                      shape: Optional[str] = None, dtype: Optional[str] = None,
                      progress: Optional[Callable[[dict[str, Any]], None]] = None
                      ) -> dict[str, Any]:
        """Compiles every admitted config of a CUDA family for each architecture, no GPU needed
        (docs/protocol.md, compile_check). Returns the reply: configs, compiled, errors, rows."""
        fields: dict[str, Any] = {"kernel": kernel,
                                  "arch": arch if isinstance(arch, str) else list(arch)}
        if shape is not None:
            fields["shape"] = shape
        if dtype is not None:
            fields["dtype"] = dtype

        def on_event(name: str, data: dict[str, Any]) -> None:
            if name == "progress" and progress is not None:
                progress(data)

        return self.request("compile_check", fields, on_event)

    def confirm(self, kernel: str, shape: str, baseline: dict[str, Any],
                candidate: dict[str, Any], dtype: str = "f32", device: str = "cpu",
                min_effect: float = 0.05, rounds: Optional[int] = None) -> dict[str, Any]:
        """An A/B of two builds of a key, measured interleaved on the device (docs/protocol.md,
        confirm). `baseline` and `candidate` are {"result": id} or {"source_hash": .., "config":
        {..}}. Returns the reply: verdict (regressed, improved, same, ambiguous), why, ratio,
        ratio_interval, rounds, round_ms, baseline, candidate, and impossible when it could not
        run."""
        fields: dict[str, Any] = {"kernel": kernel, "shape": shape, "dtype": dtype,
                                  "device": device, "baseline": baseline,
                                  "candidate": candidate, "min_effect": min_effect}
        if rounds is not None:
            fields["rounds"] = int(rounds)
        return self.request("confirm", fields)

    def canary(self, device: str = "cpu", context: str = "") -> dict[str, Any]:
        """One reading of the speed canary on a device, stored by ktuned (docs/protocol.md,
        canary): compute_ms, memory_ms, taken_at_ms, fingerprint."""
        fields: dict[str, Any] = {"device": device}
        if context:
            fields["context"] = context
        return self.request("canary", fields)

    def lookup(self, kernel: str, shape: str, dtype: str = "f32", device: str = "cpu") -> Any:
        """The winner ktuned answers for a key, as a ktune_client.Answer (rung, config, ...)."""
        r = self.request("lookup", {"kernel": kernel, "shape": shape, "dtype": dtype,
                                    "device": device})
        from . import Answer  # noqa: PLC0415

        return Answer(r.get("rung", "default"), r.get("config", {}), "daemon",
                      r.get("from_shape", ""), r.get("reason", ""), r.get("median_ms") or 0.0,
                      r.get("job", 0), r.get("tune_job", 0))

    def import_table(self, table: Union[dict[str, Any], str, os.PathLike],
                     policy: str = "faster") -> dict[str, Any]:
        """Merges an exported table into ktuned's winners (docs/export-format.md, Import): a
        table as a dict is sent as one `import` request; a file (json or T4, .gz too) goes
        through `ktune import`, which splits it to fit the daemon's message limit. Returns the
        reply: per key imported, unchanged, replaced or kept, with the conflicts."""
        if isinstance(table, dict):
            return self.request("import", {"table": table, "policy": policy})
        out = self._run_ktune(["--json", "import", os.fspath(table), "--policy", policy],
                              what=f"import {os.fspath(table)}")
        return json.loads(out)

    def export(self, format: str = "json", kernel: Optional[str] = None,
               device: Optional[str] = None, output: Optional[str] = None,
               db: Optional[str] = None) -> Any:
        """The tuned winners as a table (docs/export-format.md), written by `ktune export` from
        the database read-only: format json (returned parsed, a dict), csv, cpp-header or t4
        (returned as text). With `output` the file is written and its path returned. `db`:
        the database; None asks the daemon which one it uses (the default when none answers)."""
        args = ["export", "--format", format]
        if kernel:
            args += ["--kernel", kernel]
        if device:
            args += ["--device", device]
        if output:
            args += ["-o", os.fspath(output)]
        db = db or self._db_path()
        if db:
            args += ["--db", db]
        text = self._run_ktune(args, what=f"export {format}")
        if output:
            return os.fspath(output)
        return json.loads(text) if format == "json" else text

    def history(self, kernel: str, shape: str, dtype: Optional[str] = None,
                device: Optional[str] = None, db: Optional[str] = None) -> Any:
        """A key's finished runs, oldest first, with their winners and change points (what
        `ktune history --json` prints), read from the database read-only."""
        args = ["--json", "history", kernel, "--shape", shape]
        if dtype:
            args += ["--dtype", dtype]
        if device:
            args += ["--device", device]
        db = db or self._db_path()
        if db:
            args += ["--db", db]
        return json.loads(self._run_ktune(args, what=f"read the history of {kernel}"))

    def shutdown(self) -> None:
        """Asks ktuned to stop gracefully."""
        self.request("shutdown")
        self.close()

    def _db_path(self) -> Optional[str]:
        try:
            return self.stats().get("db")
        except KtuneError:
            return None
