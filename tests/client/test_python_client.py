"""The Python client (client/python, package ktune_client), run with `python3 -m pytest`:
against a real ktuned the ladder, then the fallbacks, and a connection ktuned closed as idle
replaced at the next lookup; against a scripted socket a slow first connect retried before any
fallback and a late answer that leaves no backoff behind; [default] read as TOML."""
import builtins
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import ktune_client

BIN_DIR = os.environ["KTUNE_BIN_DIR"]
KERNELS = os.path.join(os.environ["KTUNE_SOURCE_DIR"], "kernels_src")
TINY_MEASURE = """
[measure]
min_samples = 3
max_samples = 20
max_time_s = 0.02
min_time_s = 0
warmup_ms = 1
flush_cache = false
"""
TIMEOUT = 2.0   # sanitizer builds answer slowly; a runtime keeps the 5 ms default


def request(path, message, timeout=600):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(message) + "\n").encode())
        buffer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("ktuned closed the connection")
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                reply = json.loads(line)
                if "event" not in reply:
                    return reply


class PythonClientTest(unittest.TestCase):
    def start_daemon(self, config=""):
        """A ktuned in a fresh home with TINY_MEASURE plus `config`, ready; returns
        (process, socket path, database path)."""
        home = tempfile.mkdtemp(prefix="ktune-py-")
        self.addCleanup(shutil.rmtree, home, True)
        with open(os.path.join(home, "ktuned.toml"), "w") as f:
            f.write(TINY_MEASURE + config)
        read_fd, write_fd = os.pipe()
        env = dict(os.environ, KTUNE_HOME=home)
        daemon = subprocess.Popen(
            [os.path.join(BIN_DIR, "ktuned"), "--config", os.path.join(home, "ktuned.toml"),
             "--kernel-dir", KERNELS, "--ready-fd", str(write_fd)],
            env=env, pass_fds=(write_fd,))
        os.close(write_fd)
        self.addCleanup(lambda: daemon.poll() is not None or daemon.kill())
        with os.fdopen(read_fd) as ready:
            self.assertTrue(ready.readline().startswith("ready"))
        return daemon, os.path.join(home, "ktuned.sock"), os.path.join(home, "ktune.db")

    def test_ladder_and_fallbacks(self):
        daemon, sock_path, db_path = self.start_daemon()

        client = ktune_client.Client(sock_path, db_path, [KERNELS], timeout=TIMEOUT, cache_ttl=None)
        before = client.lookup("gemm", "M=32,N=32,K=32")
        self.assertEqual(before.rung, "default")
        self.assertEqual(before.reason, "device_never_tuned")
        self.assertEqual(before.source, "daemon")
        self.assertEqual(list(before.config)[0], "BM")
        self.assertEqual(before.config["BM"], 64)

        tuned = request(sock_path, {"op": "tune", "kernel": "gemm", "shape": "M=32,N=32,K=32",
                                    "wait": True})
        self.assertTrue(tuned["ok"], tuned)
        winner = tuned["result"]["winner"]["config"]

        exact = client.lookup("gemm", "M=32,N=32,K=32")
        self.assertEqual((exact.rung, exact.exact), ("exact", True))
        self.assertEqual(exact.config, winner)
        near = client.lookup("gemm", "M=40,N=32,K=32")
        self.assertEqual((near.rung, near.exact), ("nearest", False))
        self.assertEqual(near.from_shape, "M=32,N=32,K=32")
        self.assertEqual(near.config, winner)
        with self.assertRaises(ktune_client.LookupError) as refused:
            client.lookup("no_such_kernel", "M=32,N=32,K=32")
        self.assertEqual(refused.exception.code, "unknown_kernel")

        cached = ktune_client.Client(sock_path, db_path, [KERNELS], timeout=TIMEOUT, cache_ttl=60)
        self.assertEqual(cached.lookup("gemm", "M=32,N=32,K=32").source, "daemon")
        self.assertEqual(cached.lookup("gemm", "M=32,N=32,K=32").source, "cache")

        self.assertTrue(request(sock_path, {"op": "shutdown"})["ok"])
        self.assertEqual(daemon.wait(30), 0)

        offline = ktune_client.Client(sock_path, db_path, [KERNELS], timeout=TIMEOUT, cache_ttl=None)
        from_db = offline.lookup("gemm", "N=32,M=32,K=32")
        self.assertEqual((from_db.rung, from_db.source), ("exact", "database"))
        self.assertEqual(from_db.config, winner)
        fallback = offline.lookup("gemm", "M=40,N=32,K=32")
        self.assertEqual((fallback.rung, fallback.source), ("default", "database"))
        self.assertEqual(fallback.reason, "daemon_unreachable")
        offline.close()

        os.rename(db_path, db_path + ".away")
        bare = ktune_client.Client(sock_path, db_path, [KERNELS], timeout=TIMEOUT, cache_ttl=None)
        spec = bare.lookup("gemm", "M=32,N=32,K=32")
        self.assertEqual((spec.rung, spec.source), ("default", "spec"))
        self.assertEqual(spec.config["UNROLL"], 4)
        with self.assertRaises(ktune_client.LookupError) as nothing:
            bare.lookup("no_such_kernel", "M=1")
        self.assertEqual(nothing.exception.code, "no_answer")

    def test_reconnects_after_an_idle_close(self):
        daemon, sock_path, db_path = self.start_daemon("[limits]\nconnection_idle_s = 0.2\n")
        client = ktune_client.Client(sock_path, db_path, [KERNELS], timeout=TIMEOUT, cache_ttl=None)
        self.assertEqual(client.lookup("gemm", "M=32,N=32,K=32").source, "daemon")
        # ktuned closes the client's idle connection: only the stats request's own connection
        # stays open.
        while request(sock_path, {"op": "stats"})["result"]["connections"] != 1:
            time.sleep(0.05)
        again = client.lookup("gemm", "M=32,N=32,K=32")
        self.assertEqual((again.source, again.rung), ("daemon", "default"))
        self.assertEqual(client.last_error, "")
        client.close()
        self.assertTrue(request(sock_path, {"op": "shutdown"})["ok"])
        self.assertEqual(daemon.wait(30), 0)


NEAREST = {"rung": "nearest", "config": {"BM": 32, "BN": 64}, "from_shape": "M=32,N=32,K=32",
           "reason": "shape_not_tuned", "median_ms": 0.5, "job": 1}


class ScriptedDaemon:
    """A Unix socket that plays ktuned's lookup: the first `silent` connections get no answer
    (kept open, as a daemon busy elsewhere), later ones get NEAREST."""

    def __init__(self, silent):
        self.dir = tempfile.mkdtemp(prefix="ktune-py-fake-")
        self.path = os.path.join(self.dir, "ktuned.sock")
        self.silent = silent
        self.connections = 0
        self.held = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            if self.connections <= self.silent:
                self.held.append(conn)
                continue
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    @staticmethod
    def answer(conn):
        buffer = b""
        with conn:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    request = json.loads(line)
                    reply = {"v": 1, "id": request["id"], "ok": True, "result": NEAREST}
                    conn.sendall((json.dumps(reply) + "\n").encode())

    def close(self):
        self.listener.close()
        for conn in self.held:
            conn.close()
        shutil.rmtree(self.dir, True)


class ConnectTest(unittest.TestCase):
    def fake(self, silent):
        daemon = ScriptedDaemon(silent)
        self.addCleanup(daemon.close)
        return daemon

    def test_a_silent_first_connection_is_made_again_before_any_fallback(self):
        daemon = self.fake(silent=1)
        # Timeouts long enough that a loaded machine's scheduling delay is not silence.
        client = ktune_client.Client(daemon.path, os.path.join(daemon.dir, "absent.db"), [KERNELS],
                                     timeout=1.0, connect_timeout=0.5, cache_ttl=None)
        answer = client.lookup("gemm", "M=40,N=32,K=32")
        self.assertEqual((answer.source, answer.rung), ("daemon", "nearest"))
        self.assertEqual(answer.from_shape, "M=32,N=32,K=32")
        self.assertEqual(daemon.connections, 2)

    def test_a_late_answer_leaves_no_backoff_that_would_hide_the_daemon(self):
        daemon = self.fake(silent=2)
        client = ktune_client.Client(daemon.path, os.path.join(daemon.dir, "absent.db"), [KERNELS],
                                     timeout=0.05, connect_timeout=0.01, cache_ttl=None)
        fallback = client.lookup("gemm", "M=40,N=32,K=32")
        self.assertEqual((fallback.source, fallback.rung), ("spec", "default"))
        self.assertIn("did not answer", client.last_error)
        # The daemon is up: the next lookup asks it at once and gets its nearest answer.
        answer = client.lookup("gemm", "M=40,N=32,K=32")
        self.assertEqual((answer.source, answer.rung), ("daemon", "nearest"))

    def test_a_missing_daemon_falls_back_and_backs_off(self):
        home = tempfile.mkdtemp(prefix="ktune-py-none-")
        self.addCleanup(shutil.rmtree, home, True)
        client = ktune_client.Client(os.path.join(home, "ktuned.sock"),
                                     os.path.join(home, "ktune.db"), [KERNELS], cache_ttl=None)
        first = client.lookup("gemm", "M=40,N=32,K=32")
        self.assertEqual((first.source, first.rung, first.reason),
                         ("spec", "default", "daemon_unreachable"))
        client.lookup("gemm", "M=40,N=32,K=32")
        self.assertIn("backoff", client.last_error)

    def test_its_lookup_error_is_the_builtin_lookup_error(self):
        home = tempfile.mkdtemp(prefix="ktune-py-none-")
        self.addCleanup(shutil.rmtree, home, True)
        client = ktune_client.Client(os.path.join(home, "ktuned.sock"),
                                     os.path.join(home, "ktune.db"), [home], cache_ttl=None)
        try:
            client.lookup("no_such_kernel", "M=1")
        except LookupError as caught:  # the builtin: `except LookupError` catches the client's
            self.assertIsInstance(caught, ktune_client.LookupError)
            self.assertEqual(caught.code, "no_answer")
        else:
            self.fail("a lookup nothing answers did not raise")
        self.assertTrue(issubclass(ktune_client.LookupError, builtins.LookupError))


class DefaultTableTest(unittest.TestCase):
    def test_default_is_read_as_toml_in_file_order(self):
        spec = "[kernel]\nname = 'k'\n[ default ]\nUNROLL = 0x8  # hex\nBM = 64\nBN = 1_024\n"
        config = ktune_client.parse_default_table(spec)
        self.assertEqual(config, {"UNROLL": 8, "BM": 64, "BN": 1024})
        self.assertEqual(list(config), ["UNROLL", "BM", "BN"])

    def test_no_default_or_not_integers_or_not_toml(self):
        self.assertIsNone(ktune_client.parse_default_table("[kernel]\nname = 'k'\n"))
        self.assertIsNone(ktune_client.parse_default_table("[default]\nBM = 'x'\n"))
        self.assertIsNone(ktune_client.parse_default_table("[default]\nBM = true\n"))
        self.assertIsNone(ktune_client.parse_default_table("[default\nBM = 1\n"))

    def test_the_shipped_specs_parse(self):
        for name in sorted(os.listdir(KERNELS)):
            path = os.path.join(KERNELS, name, "kernel.toml")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    self.assertIsNotNone(ktune_client.parse_default_table(f.read()), path)


if __name__ == "__main__":
    unittest.main()
