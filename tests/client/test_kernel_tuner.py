"""ktune_client.kernel_tuner against a real ktuned (python3 -m pytest, numpy from Debian's
python3-numpy): Kernel Tuner scripts written the way its examples are (tests/client/kt_scripts,
our own kernels; only their import line names ktune) run unchanged; the C one is measured with
its answer checked, and its results are answered by `ktune query` and `ktune export`; the CUDA
ones submit to ktuned, compile every admitted config with nvrtc for sm_90 and end with
no_device and its reason where no GPU is present; every admitted set equals Kernel Tuner's
(tests/client/kt_reference_space.py). The package imports without numpy and says what the
drop-in needs."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy

import ktune_client
from ktune_client import kt_space
from ktune_client.kernel_tuner import KernelRunError, RuntimeFailedConfig, run_kernel, tune_kernel

sys.path.insert(0, os.path.dirname(__file__))
import kt_reference_space  # noqa: E402

BIN_DIR = os.environ["KTUNE_BIN_DIR"]
SOURCE_DIR = os.environ["KTUNE_SOURCE_DIR"]
KERNELS = os.path.join(SOURCE_DIR, "kernels_src")
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kt_scripts")
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


class Home:
    """A ktuned in a fresh KTUNE_HOME with TINY_MEASURE."""

    def __init__(self, test):
        self.dir = tempfile.mkdtemp(prefix="ktune-kt-")
        test.addCleanup(shutil.rmtree, self.dir, True)
        self.env = dict(os.environ, KTUNE_HOME=self.dir,
                        PYTHONPATH=os.path.join(SOURCE_DIR, "client", "python"),
                        PATH=BIN_DIR + os.pathsep + os.environ.get("PATH", ""))
        with open(os.path.join(self.dir, "ktuned.toml"), "w") as f:
            f.write(TINY_MEASURE)
        read_fd, write_fd = os.pipe()
        self.process = subprocess.Popen(
            [os.path.join(BIN_DIR, "ktuned"), "--config", os.path.join(self.dir, "ktuned.toml"),
             "--kernel-dir", KERNELS, "--ready-fd", str(write_fd)],
            env=self.env, pass_fds=(write_fd,))
        os.close(write_fd)
        test.addCleanup(lambda: self.process.poll() is not None or self.process.kill())
        with os.fdopen(read_fd) as ready:
            test.assertTrue(ready.readline().startswith("ready"))
        self.socket = os.path.join(self.dir, "ktuned.sock")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)

    def daemon(self):
        return ktune_client.Daemon(self.socket, bin_dir=BIN_DIR)

    def script(self, name, extra_env=None):
        env = dict(self.env, **(extra_env or {}))
        return subprocess.run([sys.executable, os.path.join(SCRIPTS, name)], cwd=self.work,
                              env=env, capture_output=True, text=True, timeout=900)

    def ktune(self, *args):
        return subprocess.run([os.path.join(BIN_DIR, "ktune"), *args], env=self.env,
                              capture_output=True, text=True, timeout=120)


def cuda_backend(daemon):
    return daemon.request("kernels").get("cuda_backend", False)


def ktune_admitted(rows, names):
    return sorted(tuple(r["config"][n] for n in names) for r in rows)


class KernelTunerDropInTest(unittest.TestCase):
    def test_c_script_runs_unchanged_checks_its_answer_and_is_in_the_store(self):
        home = Home(self)
        done = home.script("vector_add_c.py")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(home.work, "vector_add.json")) as f:
            out = json.load(f)
        results, env = out["results"], out["env"]
        admitted = kt_reference_space.admitted({"nthreads": [1, 2], "unroll": [1, 2, 4]})
        self.assertEqual(sorted((r["nthreads"], r["unroll"]) for r in results), sorted(admitted))
        for r in results:
            self.assertIsInstance(r["time"], float, r)
            self.assertGreater(r["time"], 0)
            self.assertEqual(r["ktune_status"], "ok")
            self.assertGreater(len(r["times"]), 0)
            for key in ("compile_time", "verification_time", "benchmark_time", "strategy_time",
                        "framework_time", "timestamp"):
                self.assertIn(key, r)
        best = env["best_config"]
        self.assertEqual(best["time"], min(r["time"] for r in results))
        shape, job = env["ktune"]["shape"], env["ktune"]["job"]
        self.assertEqual(shape, "X=100000")

        # The family is ktuned's like any: query, export, history.
        query = home.ktune("--json", "query", "vector_add", "--shape", shape)
        self.assertEqual(query.returncode, 0, query.stderr)
        answer = json.loads(query.stdout)
        self.assertEqual(answer["rung"], "exact")
        self.assertEqual(answer["job"], job)
        self.assertEqual(answer["config"], env["ktune"]["winner"]["config"])
        export = home.ktune("export", "--format", "json", "--kernel", "vector_add",
                            "--db", os.path.join(home.dir, "ktune.db"))
        self.assertEqual(export.returncode, 0, export.stderr)
        self.assertIn('"vector_add"', export.stdout)
        self.assertIn('"X=100000"', export.stdout)
        with home.daemon() as d:
            table = d.export("json", kernel="vector_add")
            self.assertIn("vector_add", json.dumps(table))
            history = d.history("vector_add", shape)
            self.assertIn("runs", json.dumps(history))

        # Without a cache, a second run measures every config again, as Kernel Tuner does.
        again = home.script("vector_add_c.py")
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        with home.daemon() as d:
            rerun = d.job(d.jobs(1)[0].id)
            self.assertEqual(len(rerun.results), 6)
            self.assertFalse(any("reused" in r["reason"] for r in rerun.results), rerun.results)
            # nthreads is the configs' thread count ([kernel] threads): each ran on that many
            # CPUs (or all the machine has) and says so.
            cpus = len(os.sched_getaffinity(0))
            for r in rerun.results:
                conditions = r.get("conditions", {})
                self.assertEqual(conditions.get("threads"), r["config"]["nthreads"], r)
                self.assertEqual(len(conditions.get("cpus", [])),
                                 min(r["config"]["nthreads"], cpus), r)

    def test_a_cache_file_is_written_in_kernel_tuners_format_and_reuses_the_stores_rows(self):
        home = Home(self)
        a = numpy.arange(500, dtype=numpy.float32)
        c = numpy.zeros_like(a)
        source = ("void scale(float* c, const float* a, int n) {\n"
                  "  for (int i = 0; i < n; i += step) for (int s = 0; s < step && i + s < n; s++)"
                  " c[i + s] = 2 * a[i + s];\n}\n")
        cache = os.path.join(home.work, "scale")
        with home.daemon() as d:
            for _ in range(2):
                results, env = tune_kernel("scale", source, 500, [c, a, numpy.int32(500)],
                                           {"step": [1, 3]}, answer=[2 * a, None, None],
                                           lang="C", daemon=d, quiet=True, cache=cache,
                                           kernel_dir=os.path.join(home.dir, "kt"))
            second = d.job(env["ktune"]["job"])
        self.assertTrue(all("reused from job" in r["reason"] for r in second.results))
        with open(cache + ".json") as f:
            written = json.load(f)
        self.assertEqual(written["tune_params_keys"], ["step"])
        self.assertEqual(sorted(written["cache"]), ["1", "3"])
        self.assertEqual(written["cache"]["3"]["time"], results[1]["time"])
        self.assertEqual(written["kernel_name"], "scale")

    def test_a_wrong_answer_fails_every_config_as_kernel_tuner_would_not_let_it_pass(self):
        home = Home(self)
        a = numpy.arange(1000, dtype=numpy.float32)
        b = numpy.ones(1000, dtype=numpy.float32)
        c = numpy.zeros_like(a)
        source = ("extern \"C\" void add(float* c, const float* a, const float* b, int n) {\n"
                  "  for (int i = 0; i < n; i += step) for (int s = 0; s < step; s++)"
                  " c[i + s] = a[i + s] + b[i + s];\n}\n")
        with home.daemon() as d:
            results, env = tune_kernel("add", source, 1000, [c, a, b, numpy.int32(1000)],
                                       {"step": [1, 2]}, answer=[a + b + 1, None, None, None],
                                       lang="C", daemon=d, quiet=True,
                                       kernel_dir=os.path.join(home.dir, "kt"))
        self.assertEqual(len(results), 2)
        for r in results:
            self.assertIsInstance(r["time"], RuntimeFailedConfig)
            self.assertEqual(r["ktune_status"], "mismatch")
            self.assertIn("c[0]", r["ktune_reason"])
        self.assertNotIn("best_config", env)

        # inputs are the user's arrays, not generated ones; a size that differs is refused
        with self.assertRaises(TypeError) as wrong:
            tune_kernel("add", source, 1000, [c, a, b, numpy.int32(1000)], {"step": [1]},
                        answer=[numpy.zeros(10, numpy.float32), None, None, None], lang="C")
        self.assertIn("size different", str(wrong.exception))

    def test_cuda_scripts_compile_every_admitted_config_and_admit_kernel_tuners_set(self):
        home = Home(self)
        with home.daemon() as d:
            if not cuda_backend(d):
                self.skipTest("ktune is built without the CUDA backend")
            gpu = any(dev.name.startswith("cuda:") for dev in d.devices())
        cases = {
            "matmul.py": ("matmul_kernel", {
                "block_size_x": [16, 32, 64], "block_size_y": [1, 2, 4, 8, 16, 32],
                "tile_size_x": [1, 2, 4, 8], "tile_size_y": [1, 2, 4, 8]},
                ["block_size_x==block_size_y*tile_size_y"]),
            "convolution.py": ("convolution_kernel", {
                "block_size_x": [16, 32, 48, 64], "block_size_y": [1, 2, 4, 8],
                "tile_size_x": [1, 2], "tile_size_y": [1, 2], "use_padding": [0, 1],
                "read_only": [0, 1]}, ["use_padding==0 or (block_size_x % 32 != 0)"]),
            "reduction.py": ("sum_floats", {
                "block_size_x": [64, 256, 1024], "vector": [1, 2, 4], "num_blocks": [1, 8],
                "loop_unroll_factor_0": [0, 1, 8], "use_shuffle": [0, 1]},
                lambda p: p["vector"] * p["block_size_x"] <= 2048),
        }
        for script, (family, params, restrictions) in cases.items():
            with self.subTest(script=script):
                run = home.script(script, {"KTUNE_COMPILE_CHECK": "sm_90"})
                if gpu:
                    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                else:
                    self.assertNotEqual(run.returncode, 0)
                    self.assertIn("no_device", run.stderr)
                    self.assertIn("NoDevice", run.stderr)
                with home.daemon() as d:
                    kernel = next(k for k in d.kernels() if k.name == family)
                    self.assertEqual(kernel.language, "cuda")
                    checks = [j for j in d.jobs(20) if j.kernel == family and
                              j.strategy == "compile_check"]
                    self.assertEqual(checks[0].state, "done")
                    shape = checks[0].shape
                    check = d.compile_check(family, "sm_90", shape)
                self.assertEqual(check["errors"], 0,
                                 [r for r in check["rows"] if r["status"] != "ok"][:3])
                expected = kt_reference_space.admitted(params, restrictions)
                self.assertEqual(check["configs"], len(expected))
                self.assertEqual(ktune_admitted(check["rows"], list(params)), sorted(expected))


class KernelTunerSurfaceTest(unittest.TestCase):
    """run_kernel, the helper modules and the objectives, through scripts written as Kernel
    Tuner's users write them (tests/client/kt_scripts)."""

    def test_run_kernel_returns_the_outputs_and_a_crash_is_an_error_not_a_dead_python(self):
        home = Home(self)
        done = home.script("run_kernel_c.py")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(home.work, "run_kernel.json")) as f:
            out = json.load(f)
        self.assertLess(out["max_error"], 1e-6)
        self.assertEqual(out["types"][:3], ["ndarray"] * 3)

        a = numpy.arange(64, dtype=numpy.float32)
        source = ("void poke(float* a, int n) {\n"
                  "  if (CRASH) *(volatile int*)0 = 1;\n"
                  "  for (int i = 0; i < n; i++) a[i] += 1;\n}\n")
        fine = run_kernel("poke", source, 64, [a, numpy.int32(64)], {"CRASH": 0}, lang="C")
        numpy.testing.assert_array_equal(fine[0], a + 1)
        with self.assertRaises(KernelRunError) as crashed:
            run_kernel("poke", source, 64, [a, numpy.int32(64)], {"CRASH": 1}, lang="C")
        self.assertEqual(crashed.exception.code, "crash")
        self.assertIn("SIGSEGV", crashed.exception.message)
        with self.assertRaises(KernelRunError) as broken:
            run_kernel("poke", source + "syntax error", 64, [a, numpy.int32(64)], {"CRASH": 0},
                       lang="C")
        self.assertEqual(broken.exception.code, "compile_error")
        with self.assertRaises(TypeError) as listed:
            run_kernel("poke", source, 64, [a, numpy.int32(64)], {"CRASH": [0, 1]}, lang="C")
        self.assertIn("params['CRASH']", str(listed.exception))
        with home.daemon() as d:                    # ktuned is not involved, and lives on
            self.assertIn("db", d.stats())

    def test_run_kernel_on_cuda_compiles_then_says_no_device(self):
        home = Home(self)
        with home.daemon() as d:
            if not cuda_backend(d):
                self.skipTest("ktune is built without the CUDA backend")
            gpu = any(dev.name.startswith("cuda:") for dev in d.devices())
        run = home.script("run_kernel_cuda.py", {"KTUNE_COMPILE_CHECK": "sm_90"})
        self.assertIn("the compile check for sm_90 passed", run.stdout + run.stderr)
        if not gpu:
            self.assertNotEqual(run.returncode, 0)
            self.assertIn("NoDevice", run.stderr)

    def test_metrics_as_objectives_and_a_pareto_front(self):
        home = Home(self)
        done = home.script("objectives_c.py", {"PYTHONUNBUFFERED": "1"})
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(home.work, "objectives.json")) as f:
            out = json.load(f)
        results, env = out["results"], out["env"]
        ok = [r for r in results if r["ktune_status"] == "ok"]
        self.assertEqual(len(ok), 4, results)
        best = env["best_config"]
        self.assertEqual(best["GFLOP/s"], max(r["GFLOP/s"] for r in ok))
        self.assertEqual(env["objective"], "GFLOP/s")
        self.assertTrue(env["objective_higher_is_better"])
        self.assertIn("objective 'GFLOP/s' ranks the configs", done.stdout)
        if "as time does" in done.stdout:     # then the winner is the fastest, as ktune's
            fastest = min(ok, key=lambda r: r["time"])
            self.assertEqual((best["unroll"], best["repeat"]),
                             (fastest["unroll"], fastest["repeat"]))

        multi, menv = out["multi"], out["multi_env"]
        front = menv["pareto_front"]
        self.assertEqual(menv["objectives"], {"time": False, "energy_proxy": False})
        self.assertGreaterEqual(len(front), 1)
        valid = [r for r in multi if r["ktune_status"] == "ok"]
        for r in valid:                      # every result off the front is dominated by one on it
            on_front = any(r["unroll"] == f["unroll"] and r["repeat"] == f["repeat"]
                           for f in front)
            dominated = any(f["time"] <= r["time"] and f["energy_proxy"] <= r["energy_proxy"]
                            and (f["time"] < r["time"] or f["energy_proxy"] < r["energy_proxy"])
                            for f in valid)
            self.assertEqual(on_front, not dominated, r)

    def test_float_bool_and_string_parameters_tune_with_their_values(self):
        home = Home(self)
        done = home.script("param_values_c.py")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(home.work, "param_values.json")) as f:
            out = json.load(f)
        results, env = out["results"], out["env"]
        configs = sorted((r["ALPHA"], r["use_add"], r["acc_t"]) for r in results)
        expected = sorted((a, u, t) for a in (0.5, 2.0) for u in (True, False)
                          for t in ("float", "double") if a > 1 or u)
        self.assertEqual(configs, expected)
        self.assertTrue(all(r["ktune_status"] == "ok" for r in results), results)
        self.assertIn("ALPHA=0.5, use_add=True, acc_t=float, time=", done.stdout)
        winner = env["ktune"]["winner"]
        self.assertEqual(list(winner["values"]), ["ALPHA", "use_add", "acc_t"])
        best = env["best_config"]
        # ktune stores the index of each value; lookups answer it, the client maps it back
        query = home.ktune("--json", "query", "axpy", "--shape", env["ktune"]["shape"])
        self.assertEqual(query.returncode, 0, query.stderr)
        stored = json.loads(query.stdout)["config"]
        self.assertEqual(stored, winner["config"])
        self.assertIn(winner["values"]["acc_t"], ("float", "double"))
        self.assertIsInstance(best["ALPHA"], float)

    def test_helper_modules_util_file_utils_integration_kernelbuilder(self):
        home = Home(self)
        done = home.script("helpers_c.py")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        with open(os.path.join(home.work, "helpers.json")) as f:
            out = json.load(f)
        best = out["best"]
        self.assertEqual(out["result_keys"][:2], ["pad", "block"])     # tune_params order
        self.assertEqual(out["line"], f"pad={best['pad']}, block={best['block']}")
        verbose = [line for line in done.stdout.splitlines() if "time=" in line]
        self.assertTrue(verbose and all(line.startswith("pad=") for line in verbose),
                        done.stdout)
        self.assertTrue(out["python_kernel_ok"])
        self.assertEqual(out["kernel_params"], {"pad": best["pad"], "block": best["block"]})

        with open(os.path.join(home.work, "scale_T4.json")) as f:
            t4 = json.load(f)
        self.assertEqual(t4["schema_version"], "1.0.0")
        self.assertEqual(len(t4["results"]), 6)
        self.assertEqual(list(t4["results"][0]["configuration"]), ["pad", "block"])
        self.assertTrue(all(r["invalidity"] == "correct" for r in t4["results"]))
        with open(os.path.join(home.work, "scale_metadata.json")) as f:
            self.assertIn("hardware", json.load(f)["metadata"])
        with open(os.path.join(home.work, "scale_results.json")) as f:
            stored = json.load(f)
        self.assertEqual(stored["tune_params_keys"], ["pad", "block"])
        self.assertIn({"pad": best["pad"], "block": best["block"]},
                      [{"pad": d["pad"], "block": d["block"]} for d in stored["data"]])
        for header in ("scale_targets.h", "scale_store.h"):
            with open(os.path.join(home.work, header)) as f:
                text = f.read()
            self.assertIn("#ifndef kernel_tuner", text)
            self.assertIn("#define block ", text)
            self.assertIn("#if defined(TARGET_", text)
        # ktune's T4 file is one ktune imports
        imported = home.ktune("--json", "import", os.path.join(home.work, "scale_T4.json"),
                              "--kernel", "scale_t4", "--shape", "X=40000")
        self.assertEqual(imported.returncode, 0, imported.stdout + imported.stderr)


class RestrictionTranslationTest(unittest.TestCase):
    """Each Kernel Tuner restriction kind gives a ktune constraint that admits what Kernel Tuner
    admits; ktuned itself decides (a family per case, its compile-free `tune` reply's total)."""

    def test_strings_callables_and_tuples_admit_kernel_tuners_set(self):
        home = Home(self)
        params = {"block_size_x": [16, 32, 64, 128], "block_size_y": [1, 2, 4, 8, 16],
                  "tile": [1, 2, 3, 4], "flag": [0, 1]}
        cases = [
            ["block_size_x * block_size_y >= 64", "tile <= 2 or flag == 1"],
            ["block_size_x / tile >= 16"],              # Python's / : not C's on 3
            ["block_size_x // tile in (16, 32)", "not flag or tile % 2 == 0"],
            [lambda **p: p["tile"] != 3, (lambda tile, flag: tile * flag < 3, ["tile", "flag"])],
            lambda p: p["block_size_x"] > 16 * p["tile"],
            ["min(block_size_x, 64) == 64 if flag else block_size_y > 2"],
        ]
        for i, restrictions in enumerate(cases):
            with self.subTest(case=i):
                expected = kt_reference_space.admitted(params, restrictions)
                parsed = kt_space.parse_restrictions(restrictions, params)
                ours = kt_space.admitted_configs(params, parsed)
                self.assertEqual(ours, expected)
                constraints = [kt_space.restriction_constraint(r, params) for r in parsed]
                constraints.append(kt_space.max_threads_restriction(params))
                total = self.ktuned_total(home, f"space{i}", params, constraints)
                self.assertEqual(total, len(expected), constraints)

    def ktuned_total(self, home, name, params, constraints):
        """How many configs ktuned admits for a cpp family with these params and constraints."""
        directory = os.path.join(home.dir, "spaces", name)
        os.makedirs(directory)
        with open(os.path.join(directory, "kernel.cpp"), "w") as f:
            f.write('extern "C" void k(void** args) { *static_cast<float*>(args[0]) = 0; }\n')
        lines = ["[kernel]", f'name = "{name}"', 'language = "cpp"', 'source = "kernel.cpp"',
                 'entry = "k"', 'shape = ["N"]', "[params]"]
        lines += [f"{p} = {json.dumps(v)}" for p, v in params.items()]
        lines += ["[space]", "constraints = " + json.dumps(constraints),
                  "[[args]]", 'name = "x"', 'kind = "out"', 'count = "N"', 'dtype = "f32"',
                  "[check]", 'reference = "none"', "[default]"]
        first = kt_reference_space.admitted(params, None)[0]
        lines += [f"{p} = {v}" for p, v in zip(params, first)]
        with open(os.path.join(directory, "kernel.toml"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with home.daemon() as d:
            d.add_kernel_dir(os.path.dirname(directory))
            job = d.tune(name, "N=4", wait=False)
            d.cancel(job.id)
        return job.raw["total"]


class RefusedTest(unittest.TestCase):
    """What ktune cannot do is refused before anything is written, with the message
    docs/kernel-tuner.md quotes."""

    def test_unsupported_arguments_are_refused_naming_what_instead(self):
        a = numpy.zeros(16, dtype=numpy.float32)
        n = numpy.int32(16)
        source = "__global__ void k(float* a, int n) { a[threadIdx.x] = n; }"
        scratch = tempfile.mkdtemp(prefix="ktune-refused-")
        self.addCleanup(shutil.rmtree, scratch, True)
        nowhere = ktune_client.Daemon(os.path.join(scratch, "no.sock"))
        base = dict(kernel_name="k", kernel_source=source, problem_size=16, arguments=[a, n],
                    tune_params={"block_size_x": [16]}, quiet=True, daemon=nowhere,
                    kernel_dir=os.path.join(scratch, "kt"))
        cases = [
            (dict(verify=lambda *x: True), "verify (write the expected outputs as answer)"),
            (dict(cmem_args={"d": a}), "fix: pass the data as an argument"),
            (dict(observers=[object()]), "ktune measures time only"),
            (dict(simulation_mode=True), "ktune replay"),
            (dict(kernel_name="k<float>"), "templated kernels are not supported"),
            (dict(lang="OpenCL"), "ktune runs C (the host compiler) and CUDA (nvrtc)"),
            (dict(tune_params={"block_size_x": [16.5]}), "takes integers only"),
            (dict(tune_params={"block_size_x": [16], "v": [None]}),
             "expected an integer, a float, a bool or a string"),
            (dict(arguments=[a.astype(numpy.uint8), n]), "numpy dtype uint8 is not supported"),
            (dict(kernel_source=lambda params: source), "code generator function"),
            (dict(grid_div_x=["block_size_x / 3 * 3"], tune_params={"block_size_x": [16, 32]}),
             "gives 16 in Python but 15 with C's integer arithmetic"),
        ]
        for change, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(ktune_client.NotSupported) as refused:
                    tune_kernel(**dict(base, **change))
                self.assertIn(message, refused.exception.message)
        # Errors that name the argument and the fix.
        with self.assertRaises(ValueError) as objective:
            tune_kernel(**dict(base, objective="GFLOP/s"))
        self.assertIn("objective 'GFLOP/s': neither 'time' nor a key of metrics (fix: add it "
                      "to metrics=", str(objective.exception))
        with self.assertRaises(TypeError) as signature:
            tune_kernel(**dict(base, restrictions=[lambda bx: bx < 32]))
        self.assertIn("restrictions[0]: ", str(signature.exception))
        self.assertIn("(fix: name every parameter, e.g. lambda block_size_x: ...",
                      str(signature.exception))
        with self.assertRaises(TypeError) as whole:
            tune_kernel(**dict(base, restrictions=lambda a, b: True))
        self.assertIn("restrictions: ", str(whole.exception))
        self.assertIn("cannot be called with the config's dict", str(whole.exception))
        with self.assertRaises(TypeError) as plain_int:
            tune_kernel(**dict(base, arguments=[a, 16]))
        self.assertIn("numpy.int32(16)", str(plain_int.exception))
        self.assertFalse(os.path.exists(os.path.join(scratch, "kt")))  # nothing was written


class WithoutNumpyTest(unittest.TestCase):
    def test_the_package_imports_without_numpy_and_the_drop_in_says_what_it_needs(self):
        code = ("import sys; sys.modules['numpy'] = None\n"
                "import ktune_client, ktune_client.kernel_tuner as kt\n"
                "try:\n"
                "    kt.tune_kernel('k', 'void k(){}', 10, [], {'a': [1]})\n"
                "except ImportError as e:\n"
                "    print('IMPORT', e)\n")
        for python in {sys.executable, shutil.which("python3") or sys.executable}:
            with self.subTest(python=python):
                done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                                      env=dict(os.environ, PYTHONPATH=os.path.join(
                                          SOURCE_DIR, "client", "python")))
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertIn("IMPORT ktune_client.kernel_tuner.tune_kernel needs numpy",
                              done.stdout)
                self.assertIn("python3-numpy", done.stdout)


if __name__ == "__main__":
    unittest.main()
