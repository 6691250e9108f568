"""The Python client as a library (ktune_client.Daemon) against a real ktuned, standard library
only: tune with a progress callback or without waiting, job, jobs, cancel, results as dicts (a
DataFrame only where pandas imports), kernels, devices, export, history and import through the
ktune command, the protocol's errors as exception classes, kernel directories added at run time
(kept across a restart, refused when unsafe), and a ktuned started on demand."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import ktune_client
from ktune_client import Daemon

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
final_rounds = 2
"""
SHAPE = "M=32,N=32,K=32"


def pandas_available():
    try:
        import pandas  # noqa: F401,PLC0415
    except ImportError:
        return False
    return True


class DaemonApiTest(unittest.TestCase):
    def start_daemon(self, home=None):
        """A ktuned in `home` (fresh when None) with TINY_MEASURE; returns (process, home)."""
        if home is None:
            home = tempfile.mkdtemp(prefix="ktune-api-")
            self.addCleanup(shutil.rmtree, home, True)
            with open(os.path.join(home, "ktuned.toml"), "w") as f:
                f.write(TINY_MEASURE)
        read_fd, write_fd = os.pipe()
        daemon = subprocess.Popen(
            [os.path.join(BIN_DIR, "ktuned"), "--config", os.path.join(home, "ktuned.toml"),
             "--kernel-dir", KERNELS, "--ready-fd", str(write_fd)],
            env=dict(os.environ, KTUNE_HOME=home), pass_fds=(write_fd,))
        os.close(write_fd)
        self.addCleanup(lambda: daemon.poll() is not None or daemon.kill())
        with os.fdopen(read_fd) as ready:
            self.assertTrue(ready.readline().startswith("ready"))
        return daemon, home

    def connect(self, home):
        d = Daemon(os.path.join(home, "ktuned.sock"), bin_dir=BIN_DIR)
        self.addCleanup(d.close)
        return d

    def test_tune_with_progress_then_job_jobs_results_kernels_devices(self):
        _, home = self.start_daemon()
        d = self.connect(home)
        gemm = next(k for k in d.kernels() if k.name == "gemm" and k.language == "cpp")
        self.assertEqual(list(gemm.params)[0], "BM")
        self.assertEqual(gemm.shape, ["M", "N", "K"])
        self.assertIn("cpu", [dev.name for dev in d.devices()])

        events = []
        job = d.tune("gemm", SHAPE, budget=4, strategy="random", seed=3, progress=events.append)
        self.assertEqual(job.state, "done")
        self.assertEqual(job.total, 4)
        self.assertEqual([e.done for e in events], [1, 2, 3, 4])
        self.assertTrue(all(e.job == job.id and e.total == 4 for e in events))
        self.assertEqual(len(job.results), 4)
        self.assertEqual(set(job.results[0]["config"]), set(gemm.params))
        self.assertEqual(job.params, list(gemm.params))
        self.assertIsNotNone(job.winner)
        # Progress events carry the search's best so far; the winner is the finals' choice (a
        # re-measured runner-up or the incumbent of a tie may take it), so it is one of the
        # measured configs, not necessarily the last event's.
        measured = [r["config"] for r in job.results]
        self.assertIn(job.winner["config"], measured)
        self.assertIn(events[-1].best_config, measured)
        self.assertEqual(d.results(job.id), job.results)
        row = job.rows()[0]
        self.assertEqual(list(row)[:len(job.params)], job.params)
        self.assertIn("median_ms", row)
        if pandas_available():
            self.assertEqual(len(job.dataframe()), 4)
        else:
            with self.assertRaises(ImportError) as no_pandas:
                job.dataframe()
            self.assertIn("pandas", str(no_pandas.exception))
        self.assertEqual(d.jobs(5)[0].id, job.id)
        self.assertEqual(d.lookup("gemm", SHAPE).config, job.winner["config"])

    def test_without_waiting_then_cancel_and_wait_for(self):
        _, home = self.start_daemon()
        d = self.connect(home)
        first = d.tune("gemm", SHAPE, wait=False)
        second = d.tune("gemm", "M=48,N=32,K=32", wait=False)
        self.assertEqual(second.state, "queued")
        self.assertGreater(second.total, 0)
        self.assertEqual(d.cancel(second.id), "cancelled")
        self.assertEqual(d.job(second.id).state, "cancelled")
        seen = []
        ended = d.wait_for(first.id, progress=seen.append)
        self.assertEqual(ended.state, "done")
        self.assertEqual(seen[-1].done, ended.total)
        with self.assertRaises(ktune_client.BadRequest) as nothing:
            d.cancel(first.id)
        self.assertIn("not queued or running", nothing.exception.message)

    def test_confirm_and_canary(self):
        _, home = self.start_daemon()
        d = self.connect(home)
        job = d.tune("gemm", SHAPE, budget=2, strategy="random", seed=1)
        gemm = next(k for k in d.kernels() if k.name == "gemm" and k.language == "cpp")
        build = {"source_hash": gemm.source_hash, "config": job.winner["config"]}
        same = d.confirm("gemm", SHAPE, build, build)
        self.assertIn(same["verdict"], ("same", "ambiguous"))
        self.assertGreaterEqual(same["rounds"], 6)
        self.assertTrue(0.8 < same["ratio"] < 1.25, same)
        self.assertEqual(len(same["round_ms"]), same["rounds"])
        gone = d.confirm("gemm", SHAPE, {"source_hash": "0" * 32, "config": job.winner["config"]},
                         build)
        self.assertEqual(gone["verdict"], "ambiguous")
        self.assertIn("the old artifact is gone", gone["impossible"])
        with self.assertRaises(ktune_client.BadRequest) as bad:
            d.confirm("gemm", SHAPE, build, {"result": 999999})
        self.assertIn("no result with id 999999", bad.exception.message)
        reading = d.canary("cpu", "python test")
        self.assertGreater(reading["compute_ms"], 0)
        self.assertGreater(reading["memory_ms"], 0)
        self.assertEqual(reading["context"], "python test")

    def test_errors_are_the_protocols_as_classes(self):
        _, home = self.start_daemon()
        d = self.connect(home)
        cases = [
            (lambda: d.tune("no_such_kernel", SHAPE), ktune_client.UnknownKernel),
            (lambda: d.tune("gemm", "M=32"), ktune_client.BadShape),
            (lambda: d.tune("gemm", SHAPE, dtype="i8"), ktune_client.BadDtype),
            (lambda: d.tune("gemm", SHAPE, device="tpu"), ktune_client.UnknownDevice),
            (lambda: d.job(999999), ktune_client.UnknownJob),
            (lambda: d.request("no_such_op"), ktune_client.UnknownOp),
        ]
        for call, cls in cases:
            with self.subTest(error=cls.__name__):
                with self.assertRaises(cls) as raised:
                    call()
                self.assertIsInstance(raised.exception, ktune_client.KtuneError)
                self.assertEqual(raised.exception.code, cls.code)
                self.assertTrue(raised.exception.message)
        if not any(dev.name.startswith("cuda:") for dev in d.devices()):
            with self.assertRaises(ktune_client.NoDevice) as no_gpu:
                d.tune("gemm", SHAPE, device="cuda:0")
            self.assertTrue(no_gpu.exception.message)
        nobody = Daemon(os.path.join(home, "elsewhere.sock"))
        with self.assertRaises(ktune_client.DaemonUnreachable):
            nobody.stats()

    def test_export_history_and_import_go_through_the_ktune_command(self):
        _, home = self.start_daemon()
        d = self.connect(home)
        job = d.tune("gemm", SHAPE, budget=3, strategy="random")
        table = d.export("json")
        self.assertEqual(table["format"], "ktune-table")
        self.assertEqual([(r["kernel"], r["shape"], r["config"]) for r in table["rows"]],
                         [("gemm", SHAPE, job.winner["config"])])
        csv = d.export("csv", kernel="gemm")
        self.assertTrue(csv.startswith("kernel,shape,dtype,device"))
        self.assertIn(f'gemm,"{SHAPE}",f32,cpu', csv)
        path = d.export("json", output=os.path.join(home, "table.json"))
        self.assertTrue(os.path.isfile(path))
        history = d.history("gemm", SHAPE)
        self.assertEqual([run["job"] for run in history["runs"]], [job.id])
        self.assertEqual(history["runs"][0]["config"], job.winner["config"])

        _, other_home = self.start_daemon()
        other = self.connect(other_home)
        self.assertEqual(other.lookup("gemm", SHAPE).rung, "default")
        reply = other.import_table(table)
        self.assertEqual(other.lookup("gemm", SHAPE).config, job.winner["config"])
        self.assertIn("imported", json.dumps(reply))
        again = other.import_table(path)
        self.assertIn("unchanged", json.dumps(again))
        with self.assertRaises(ktune_client.CommandFailed) as missing:
            other.import_table(os.path.join(home, "missing.json"))
        self.assertIn("missing.json", missing.exception.message)

    def test_a_kernel_dir_added_at_run_time_is_kept_across_a_restart(self):
        daemon, home = self.start_daemon()
        d = self.connect(home)
        mine = os.path.join(home, "mine")
        os.makedirs(mine, mode=0o700)
        shutil.copytree(os.path.join(KERNELS, "gemm"), os.path.join(mine, "my_gemm"))
        spec = os.path.join(mine, "my_gemm", "kernel.toml")
        with open(spec) as f:
            text = f.read().replace('name = "gemm"', 'name = "my_gemm"', 1)
        with open(spec, "w") as f:
            f.write(text)
        with self.assertRaises(ktune_client.UnknownKernel):
            d.tune("my_gemm", SHAPE)
        added = d.add_kernel_dir(mine)
        self.assertTrue(added["added"])
        self.assertEqual([k["name"] for k in added["kernels"]], ["my_gemm"])
        self.assertIn(os.path.realpath(mine), d.stats()["kernel_dirs"])
        self.assertFalse(d.add_kernel_dir(mine)["added"])
        job = d.tune("my_gemm", SHAPE, budget=2, strategy="random")
        self.assertEqual(job.state, "done")

        d.shutdown()
        self.assertEqual(daemon.wait(30), 0)
        self.start_daemon(home)
        d = self.connect(home)
        self.assertEqual(d.lookup("my_gemm", SHAPE).rung, "exact")
        self.assertEqual(d.remove_kernel_dir(mine)["removed"], True)
        self.assertNotIn("my_gemm", [k.name for k in d.kernels()])

        shared = os.path.join(home, "shared")
        os.makedirs(shared)
        os.chmod(shared, 0o777)
        with self.assertRaises(ktune_client.BadRequest) as unsafe:
            d.add_kernel_dir(shared)
        self.assertIn("writable by its group or by others", unsafe.exception.message)
        with self.assertRaises(ktune_client.BadRequest):
            d.request("add_kernel_dir", {"path": "relative/dir"})

    def test_autostart_starts_ktuned_through_the_ktune_command(self):
        home = tempfile.mkdtemp(prefix="ktune-auto-")
        self.addCleanup(shutil.rmtree, home, True)
        with open(os.path.join(home, "ktuned.toml"), "w") as f:
            f.write(TINY_MEASURE)
        previous = os.environ.get("KTUNE_HOME")
        os.environ["KTUNE_HOME"] = home
        try:
            d = Daemon(autostart=True, bin_dir=BIN_DIR)
            self.assertEqual(d.socket_path, os.path.join(home, "ktuned.sock"))
            stats = d.stats()
            self.assertEqual(stats["socket"], os.path.join(home, "ktuned.sock"))
            d.shutdown()
        finally:
            if previous is None:
                del os.environ["KTUNE_HOME"]
            else:
                os.environ["KTUNE_HOME"] = previous
        s = socket.socket(socket.AF_UNIX)
        for _ in range(100):
            try:
                s.connect(os.path.join(home, "ktuned.sock"))
            except OSError:
                break
            import time  # noqa: PLC0415
            time.sleep(0.1)
        s.close()


if __name__ == "__main__":
    unittest.main()
