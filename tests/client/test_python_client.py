"""client/python/ktune_client.py against a real ktuned: the ladder, then the fallbacks; a
connection ktuned closed as idle is replaced at the next lookup."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
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


if __name__ == "__main__":
    unittest.main()
