#!/usr/bin/env bash
# History baselines end to end with the real binaries (ctest: test_history):
#  1. the first `sweep --baseline last-good` has no history: every key unknown, exit 0, JUnit
#     written saying so;
#  2. after more runs the sweep is judged by the history rule against the earlier runs;
#  3. a kernel source changed to do 40x the work: `--baseline last-good` selects the key and
#     ktuned measures it as an A/B of the old build (from the source archive) against the new,
#     which exits 1 and names it with the A/B's figures; the next run is still judged against
#     the good runs (the regressed ones are left out);
#  4. `ktune history` lists every run in time order and marks the change point where the
#     slowdown begins; a shape without runs is an error naming the shapes that have some.
#
#   tests/integration/history.sh BIN_DIR
set -euo pipefail
bin="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/ktune-history-test.XXXXXX")"
export KTUNE_NO_AUTOSTART=1
export KTUNE_HOME="$work/home"
cleanup() {
  "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

mkdir -p "$work/home"
cat >"$work/ktuned.toml" <<TOML
[measure]
min_samples = 5
max_samples = 50
max_time_s = 0.05
min_time_s = 0
warmup_ms = 1
flush_cache = false
TOML
cat >"$work/sweep.toml" <<TOML
[sweep]
name = "history"

[[kernel]]
name = "slowable_sum"
[kernel.shapes]
N = [16384]
TOML
# slowable_sum: a vector sum repeated PASSES times in the timed region.
family() { # DIR PASSES
  mkdir -p "$1/slowable_sum"
  cat >"$1/slowable_sum/kernel.toml" <<'TOML'
[kernel]
name = "slowable_sum"
language = "cpp"
source = "kernel.cpp"
entry = "slowable_sum"
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
  cat >"$1/slowable_sum/kernel.cpp" <<CPP
#include <cstdint>
#define PASSES $2
using T = KTUNE_DTYPE;
extern "C" void slowable_sum(void** args) {
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
family "$work/fast" 1
family "$work/slow" 40
start() { "$bin/ktune" daemon start --config "$work/ktuned.toml" --kernel-dir "$1" >/dev/null; }
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

start "$work/fast"
# 1. No history yet.
"$bin/ktune" --json sweep "$work/sweep.toml" --remeasure --baseline last-good --junit "$work/j1.xml" >"$work/s1.json" \
  || fail "the first last-good sweep exited $?: $(cat "$work/s1.json")"
[[ "$(field "$work/s1.json" 'd["comparison"]["keys"][0]["verdict"]')" == unknown ]] || fail "no history, yet a verdict: $(cat "$work/s1.json")"
grep -q "0 earlier good run(s) of the key, need 3" "$work/j1.xml" || fail "the JUnit file does not say why: $(cat "$work/j1.xml")"

# 2. Three more runs; the fifth is judged against the four before it.
for i in 2 3 4; do
  "$bin/ktune" sweep "$work/sweep.toml" --remeasure >/dev/null || fail "run $i exited $?"
done
set +e
"$bin/ktune" --json sweep "$work/sweep.toml" --remeasure --baseline last-good >"$work/s5.json"
code=$?
set -e
[[ $code == 0 || $code == 1 ]] || fail "the fifth run exited $code"
[[ "$(field "$work/s5.json" 'd["comparison"]["keys"][0]["method"]')" == history ]] || fail "not the history rule: $(cat "$work/s5.json")"
# (Each earlier run is good unless it regressed against the good runs before it: on a busy machine
# a tiny kernel's run may, so 3 or 4 of the 4 earlier runs make the baseline.)
[[ "$(field "$work/s5.json" 'd["comparison"]["keys"][0]["baseline_runs"] in (3, 4)')" == True ]] || fail "expected 3-4 earlier runs: $(cat "$work/s5.json")"
"$bin/ktune" daemon stop >/dev/null

# 3. The source changed to 40x the work: another source hash, the same key's history.
start "$work/slow"
set +e
"$bin/ktune" sweep "$work/sweep.toml" --remeasure --baseline last-good --junit "$work/j6.xml" >"$work/s6.md" 2>"$work/s6.err"
code=$?
set -e
[[ $code == 1 ]] || fail "a 40x slower kernel exited $code: $(cat "$work/s6.md" "$work/s6.err")"
grep -q "| REGRESSED | slowable_sum | N=16384 |" "$work/s6.md" || fail "the regression is not named: $(cat "$work/s6.md")"
grep -q '<failure type="regression"' "$work/j6.xml" || fail "JUnit has no failure: $(cat "$work/j6.xml")"
grep -q "confirming slowable_sum N=16384 f32" "$work/s6.err" || fail "no A/B: $(cat "$work/s6.err")"
grep -q "A/B regressed: A/B ratio" "$work/j6.xml" || fail "JUnit does not give the A/B's figures: $(cat "$work/j6.xml")"
grep -q "archived source" "$work/j6.xml" || fail "the old build did not come from the source archive: $(cat "$work/j6.xml")"
set +e
"$bin/ktune" --json sweep "$work/sweep.toml" --remeasure --baseline last-good >"$work/s7.json"
code=$?
set -e
[[ $code == 1 ]] || fail "the slowdown's second run exited $code (its baseline took the regressed run in?): $(cat "$work/s7.json")"
[[ "$(field "$work/s7.json" 'd["comparison"]["keys"][0]["baseline_runs"] >= 3')" == True ]] || fail "expected the good runs as baseline: $(cat "$work/s7.json")"

# 4. The history: every run in time order, the change point at the first slow run.
"$bin/ktune" --json history slowable_sum --shape N=16384 >"$work/h.json" || fail "ktune history exited $?"
python3 - "$work/h.json" "$work/s7.json" <<'PY' || fail "ktune history: $(cat "$work/h.json")"
import json, sys
h = json.load(open(sys.argv[1]))
runs = h["runs"]
# 5 fast runs, 2 slow sweeps (an A/B adds no run to the history).
first_slow = next(i for i, r in enumerate(runs) if r["source_hash"] != runs[0]["source_hash"])
assert first_slow == 5 and len(runs) == first_slow + 2, (first_slow, len(runs))
assert [r["finished_at_ms"] for r in runs] == sorted(r["finished_at_ms"] for r in runs)
assert len({r["source_hash"] for r in runs}) == 2
assert all(r["samples"] >= 5 and r["interval_ms"][0] <= r["interval_ms"][1] for r in runs), runs
points = h["change_points"]
assert [p["index"] for p in points] == [first_slow], points
assert points[0]["ratio"] > 5 and runs[first_slow]["change_point"] and points[0]["job"] == runs[first_slow]["job"]
# The second slow run's baseline left the first (regressed) one out.
s7 = json.load(open(sys.argv[2]))["comparison"]["keys"][0]
assert s7["baseline_range_ms"][1] < runs[first_slow]["median_ms"], (s7, runs[first_slow])
assert s7["ratio"] > 5 and s7["ab"]["verdict"] == "regressed" and s7["ab"]["ratio"] > 5, s7
assert s7["ab"]["baseline_build"] == "archived" and s7["ab"]["current_build"] == "current", s7
PY
"$bin/ktune" history slowable_sum --shape "N = 16384" --dtype f32 --device cpu >"$work/h.txt" || fail "ktune history (text) exited $?"
grep -q "run(s), 1 change point(s)" "$work/h.txt" || fail "history text: $(cat "$work/h.txt")"
grep -q -- "<- step +" "$work/h.txt" || fail "no step marked: $(cat "$work/h.txt")"
set +e
"$bin/ktune" history slowable_sum --shape N=99 2>"$work/h.err"
code=$?
set -e
[[ $code == 1 ]] && grep -q "shapes with runs: N=16384" "$work/h.err" || fail "unknown shape: exit $code, $(cat "$work/h.err")"
echo "history: last-good baselines (none yet, history rule, a 40x slowdown regressed in an A/B against the archived build) and ktune history's change point all hold"
