"""Shared pieces of the harnesses in benchmarks/: a ktuned started for the run (KTUNE_HOME in a
temporary directory, readiness over --ready-fd), an NDJSON client and a CPU hog."""
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time


class Daemon:
    """ktuned from `bin_dir`, with `config` as its settings file and `kernel_dir` as its kernels."""

    def __init__(self, bin_dir, home, config_path, kernel_dir):
        self.bin_dir, self.home = bin_dir, home
        self.config_path, self.kernel_dir = config_path, kernel_dir
        self.proc = None
        self.pid = None

    @property
    def socket(self):
        return os.path.join(self.home, "ktuned.sock")

    @property
    def db(self):
        return os.path.join(self.home, "ktune.db")

    def start(self, timeout=60, extra_env=None):
        read_end, write_end = os.pipe()
        env = dict(os.environ, KTUNE_HOME=self.home, **(extra_env or {}))
        log = open(os.path.join(self.home, "ktuned.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(self.bin_dir, "ktuned"), "--config", self.config_path,
             "--kernel-dir", self.kernel_dir, "--ready-fd", str(write_end)],
            pass_fds=(write_end,), env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        os.close(write_end)
        log.close()
        deadline = time.monotonic() + timeout
        text = b""
        with os.fdopen(read_end, "rb", buffering=0) as ready:
            while b"\n" not in text and time.monotonic() < deadline:
                chunk = ready.read(64)
                if not chunk:
                    break
                text += chunk
        if not text.startswith(b"ready "):
            raise RuntimeError("ktuned did not report ready; see " + self.home + "/ktuned.log")
        self.pid = int(text.split()[1])
        return self.pid

    def kill(self, sig):
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


class Client:
    def __init__(self, path, timeout=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buffer = b""
        self.next_id = 1

    def request(self, body):
        body = dict(body, v=1, id=self.next_id)
        self.next_id += 1
        self.sock.sendall((json.dumps(body) + "\n").encode())
        while True:
            while b"\n" not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("ktuned closed the connection")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            message = json.loads(line)
            if "event" in message:
                continue
            if not message.get("ok"):
                raise RuntimeError("ktuned error: " + json.dumps(message.get("error")))
            return message["result"]

    def close(self):
        self.sock.close()


class Hog:
    """A process spinning on `cpu` from `delay_s` after start() until stop()."""

    def __init__(self, cpu, delay_s):
        self.cpu, self.delay_s, self.proc = cpu, delay_s, None

    def start(self):
        code = ("import os, time\n"
                "os.sched_setaffinity(0, {%d})\n"
                "time.sleep(%f)\n"
                "while True: pass\n" % (self.cpu, self.delay_s))
        self.proc = subprocess.Popen([sys.executable, "-c", code])

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def bench_cpu(client):
    """The CPU the cpu lane's bench worker is pinned to (`stats`), else the last one."""
    for lane in client.request({"op": "stats"}).get("lanes", []):
        if lane.get("device") == "cpu" and lane.get("bench_cpu") is not None:
            return lane["bench_cpu"]
    return os.cpu_count() - 1


def read_only(db_path):
    return sqlite3.connect("file:" + db_path + "?mode=ro", uri=True)


TINY_MEASURE = """
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
"""
