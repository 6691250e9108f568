#!/usr/bin/env bash
# A nightly that knows a busy machine from a slow kernel, end to end with the real binaries
# (ctest: test_nightly): after three quiet runs of a two-key sweep,
#  1. the same kernel swept again with a CPU hog on the bench core started mid-sweep reports no
#     regression (exit 0): whatever history selects, the A/B of the two builds decides;
#  2. the kernel made 10% slower (another source hash) is reported regressed (exit 1) for both
#     keys, each with its A/B figures: the old build (rebuilt or found from the source archive)
#     against the new, interleaved in rounds, ratio about 1.10, in --json and in the JUnit file;
#  3. the speed canary was read at each sweep's start and end and is in the table (--out), and
#     ktuned read it on its own every canary_interval_s while the lane had work.
#
#   tests/integration/nightly.sh BIN_DIR
set -euo pipefail
bin="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/ktune-nightly-test.XXXXXX")"
export KTUNE_NO_AUTOSTART=1
export KTUNE_HOME="$work/home"
hog=""
cleanup() {
  [[ -n "$hog" ]] && kill "$hog" 2>/dev/null || true
  "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

mkdir -p "$work/home"
cat >"$work/ktuned.toml" <<TOML
[daemon]
canary_interval_s = 1

[measure]
min_samples = 5
max_samples = 200
max_time_s = 0.05
min_time_s = 0.01
warmup_ms = 1
flush_cache = false
TOML
cat >"$work/sweep.toml" <<TOML
[sweep]
name = "nightly"

[[kernel]]
name = "passes_sum"
[kernel.shapes]
N = [16384, 65536]
TOML
# passes_sum: a vector sum repeated PASSES times in the timed region.
family() { # DIR PASSES
  mkdir -p "$1/passes_sum"
  cat >"$1/passes_sum/kernel.toml" <<'TOML'
[kernel]
name = "passes_sum"
language = "cpp"
source = "kernel.cpp"
entry = "passes_sum"
shape = ["N"]
dtypes = ["f32"]

[params]
CHUNK = [1024, 4096]

[[args]]
name = "X"
kind = "in"
count = "N"
init = "uniform"

[[args]]
name = "OUT"
kind = "out"
count = "1"

[[args]]
name = "N"
kind = "scalar"
value = "N"

[check]
reference = "default"
rtol = 1e-3
atol = 0.1

[default]
CHUNK = 4096
TOML
  cat >"$1/passes_sum/kernel.cpp" <<CPP
#include <cstdint>
#define PASSES $2
using T = KTUNE_DTYPE;
extern "C" void passes_sum(void** args) {
  const T* x = static_cast<const T*>(args[0]);
  T* out = static_cast<T*>(args[1]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[2]);
  T total = T(0);
  for (int pass = 0; pass < PASSES; ++pass) {
    const T* xp = x;
    asm volatile("" : "+r"(xp));
    for (std::int64_t start = 0; start < n; start += CHUNK)
      for (std::int64_t i = start; i < n && i < start + CHUNK; ++i) total += xp[i];
  }
  out[0] = total / PASSES;
}
CPP
}
family "$work/same" 10
family "$work/slow" 11
start() { "$bin/ktune" daemon start --config "$work/ktuned.toml" --kernel-dir "$1" >/dev/null; }
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

start "$work/same"
for i in 1 2 3; do
  "$bin/ktune" sweep "$work/sweep.toml" --remeasure >/dev/null || fail "history run $i exited $?"
done

# 1. Unchanged, with a hog on the bench core from mid-sweep to its end.
cpu="$("$bin/ktune" --json daemon status | python3 -c 'import json,sys; print(next(l["bench_cpu"] for l in json.load(sys.stdin)["lanes"] if l["device"] == "cpu"))')"
python3 -c 'import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
time.sleep(0.5)
while True: pass' "$cpu" &
hog=$!
set +e
"$bin/ktune" --json sweep "$work/sweep.toml" --remeasure --baseline last-good --out "$work/t1.json" >"$work/s1.json" 2>"$work/s1.err"
code=$?
set -e
kill "$hog"; wait "$hog" 2>/dev/null || true; hog=""
[[ $code == 0 ]] || fail "the unchanged sweep under a hog exited $code: $(cat "$work/s1.json" "$work/s1.err")"
python3 - "$work/s1.json" <<'PY' || fail "the unchanged sweep: $(cat "$work/s1.json")"
import json, sys
s = json.load(open(sys.argv[1]))
keys = s["comparison"]["keys"]
assert len(keys) == 2 and s["regressions"] == 0, s
assert all(k["verdict"] in ("same", "improved", "ambiguous") for k in keys), keys
for k in keys:  # what an A/B found of two builds of one source
    assert k["ab"] is None or k["ab"]["verdict"] != "regressed", k
assert [r["context"] for r in s["canary"]] == ["sweep nightly start", "sweep nightly end"], s["canary"]
PY
grep -q '"canary"' "$work/t1.json" || fail "the table does not carry the canary's readings"
python3 - "$work/home/ktune.db" <<'PY' || fail "no periodic canary reading was stored"
import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
contexts = [c for (c,) in db.execute("SELECT context FROM canary_readings ORDER BY taken_at")]
assert contexts.count("periodic") >= 1, contexts
assert contexts.count("sweep nightly start") == 4 == contexts.count("sweep nightly end"), contexts
PY
"$bin/ktune" daemon stop >/dev/null

# 2. The kernel made 10% slower.
start "$work/slow"
set +e
"$bin/ktune" --json sweep "$work/sweep.toml" --remeasure --baseline last-good --junit "$work/j2.xml" >"$work/s2.json" 2>"$work/s2.err"
code=$?
set -e
[[ $code == 1 ]] || fail "the 10% slower kernel exited $code: $(cat "$work/s2.json" "$work/s2.err")"
python3 - "$work/s2.json" <<'PY' || fail "the 10% slower sweep: $(cat "$work/s2.json")"
import json, sys
s = json.load(open(sys.argv[1]))
keys = s["comparison"]["keys"]
assert s["regressions"] == 2 and s["confirmed"] == 2, s
for k in keys:
    ab = k["ab"]
    assert k["verdict"] == "regressed" and ab["verdict"] == "regressed", k
    assert ab["measured"] and ab["rounds"] >= 6, ab
    assert 1.04 < ab["ratio"] < 1.25 and ab["ratio_interval"][0] > 1.0, ab
    assert ab["baseline_build"] == "archived" and ab["current_build"] == "current", ab
    assert ab["current_ms"] > ab["baseline_ms"], ab
PY
[[ "$(grep -c '<failure type="regression"' "$work/j2.xml")" == 2 ]] || fail "JUnit: $(cat "$work/j2.xml")"
grep -q "A/B regressed: A/B ratio 1\.[01]" "$work/j2.xml" || fail "JUnit lacks the A/B figures: $(cat "$work/j2.xml")"
grep -q "confirming passes_sum N=16384 f32" "$work/s2.err" || fail "no A/B said: $(cat "$work/s2.err")"
echo "nightly: an unchanged kernel under a hog is no regression, a 10% slower one regressed with its A/B figures"
