#!/usr/bin/env bash
# A nightly that knows a busy machine from a slow kernel, end to end with the real binaries
# (ctest: test_nightly): after three quiet runs of a two-key sweep,
#  1. the same kernel swept again with a CPU hog on the bench core started mid-sweep reports no
#     regression (exit 0): whatever history selects, the A/B of the two builds decides;
#  2. the kernel made 10% slower (another source hash) is reported regressed (exit 1) for both
#     keys, each with its A/B figures: the old build (rebuilt or found from the source archive)
#     against the new, interleaved in rounds, ratio about 1.10, in --json and in the JUnit file;
#  3. the speed canary was read at each sweep's start and end and is in the table (--out), and
#     ktuned read it on its own every canary_interval_s while the lane had work;
#  4. while another process holds the device's measurement lock (as another ktuned does while it
#     measures), a canary reading and an A/B wait their turn: both are measured once it is free.
#  5. a source made slower at the baseline's winning config, whose new winner (another config) is
#     as fast as the baseline's winner, is reported regressed from an A/B at the baseline's config
#     (the baseline's build against the current source), naming both A/Bs;
#  6. an unchanged source whose table names a slower config tonight (the winners' A/B regressed)
#     is no regression: at the baseline's config tonight's build is the baseline's, so the report
#     says the config tuning chose is slower (winner_slower), exit 0 (the other cases of a changed
#     winner: tests/tableio/test_compare.cpp).
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
# 4. The device's measurement lock held by another process for a while.
"$bin/ktune" daemon stop >/dev/null
mkdir -p "$work/locks"
sed 's|^\[daemon\]$|[daemon]\nlock_dir = "'"$work/locks"'"|' "$work/ktuned.toml" >"$work/locked.toml"
"$bin/ktune" daemon start --config "$work/locked.toml" --kernel-dir "$work/slow" >/dev/null
cpu="$("$bin/ktune" --json daemon status | python3 -c 'import json,sys; print(next(l["bench_cpu"] for l in json.load(sys.stdin)["lanes"] if l["device"] == "cpu"))')"
lock="$work/locks/ktune-measure-cpu$cpu.lock"
for what in canary confirm; do
  rm -f "$work/held"
  flock "$lock" sh -c 'touch "$1"; sleep 2' sh "$work/held" &
  holder=$!
  while [[ ! -e "$work/held" ]]; do sleep 0.05; done
  python3 - "$KTUNE_HOME/ktuned.sock" "$what" "$work/t1.json" >"$work/busy-$what.json" <<'PY' \
    || fail "a $what while another process held the measurement lock: $(cat "$work/busy-$what.json")"
import json, socket, sys
path, what, table = sys.argv[1:4]
if what == "canary":
    request = {"v": 1, "id": 1, "op": "canary", "device": "cpu", "context": "lock held"}
else:
    row = json.load(open(table))["rows"][0]
    build = {"source_hash": row["source_hash"], "config": row["config"]}
    request = {"v": 1, "id": 1, "op": "confirm", "kernel": "passes_sum", "shape": row["shape"],
               "dtype": "f32", "device": "cpu", "baseline": build, "candidate": build}
sock = socket.socket(socket.AF_UNIX)
sock.connect(path)
sock.sendall((json.dumps(request) + "\n").encode())
reply = json.loads(sock.makefile().readline())
print(json.dumps(reply))
assert reply.get("ok"), reply
result = reply["result"]
if what == "canary":
    assert result["compute_ms"] > 0 and result["memory_ms"] > 0, result
else:
    assert "impossible" not in result and result["rounds"] >= 6, result
PY
  wait "$holder"
done
# 5. knob_sum does 23 - WORK passes in its old source (the winner WORK 13: 10 passes) and WORK in
# its new one (the winner WORK 10: 10 passes, as fast as the old winner), where WORK 13 does 13.
knob() { # DIR PASSES
  mkdir -p "$1/knob_sum"
  sed -e 's/passes_sum/knob_sum/g' -e 's/^CHUNK = \[1024, 4096\]$/WORK = [10, 13]/' \
      -e 's/^CHUNK = 4096$/WORK = 10/' "$work/same/passes_sum/kernel.toml" >"$1/knob_sum/kernel.toml"
  sed -e 's/passes_sum/knob_sum/g' -e "s/^#define PASSES .*/#define PASSES ($2)\n#define CHUNK 4096/" \
      "$work/same/passes_sum/kernel.cpp" >"$1/knob_sum/kernel.cpp"
}
knob "$work/knob_old" "23 - WORK"
knob "$work/knob_new" "WORK"
cat >"$work/knob.toml" <<TOML
[sweep]
name = "knob"

[[kernel]]
name = "knob_sum"
[kernel.shapes]
N = [65536]
TOML
"$bin/ktune" daemon stop >/dev/null
start "$work/knob_old"
for i in 1 2 3; do
  "$bin/ktune" sweep "$work/knob.toml" --remeasure >/dev/null 2>&1 || fail "knob_sum history run $i exited $?"
done
"$bin/ktune" daemon stop >/dev/null
start "$work/knob_new"
set +e
"$bin/ktune" --json sweep "$work/knob.toml" --remeasure --baseline last-good >"$work/knob.json" 2>"$work/knob.err"
code=$?
set -e
[[ $code == 1 ]] || fail "a source slower at the baseline's config exited $code: $(cat "$work/knob.json" "$work/knob.err")"
python3 - "$work/knob.json" <<'PY' || fail "the slower source: $(cat "$work/knob.json" "$work/knob.err")"
import json, sys
k = json.load(open(sys.argv[1]))["comparison"]["keys"][0]
ab = k["ab"]
assert k["verdict"] == "regressed" and ab["verdict"] == "regressed" and k["winner_changed"], k
assert ab["ratio"] > 1.1 and ab["baseline_build"] == "archived" and ab["current_build"] == "current", ab
assert ab["why"].startswith("at the baseline's config the current source: A/B ratio"), ab
assert "tonight's winner against the baseline's: A/B ratio" in ab["why"], ab
PY
grep -q "the source changed and so did the winner" "$work/knob.err" || fail "no second A/B said: $(cat "$work/knob.err")"
# 6. knob_new's WORK 13 does 13 passes, WORK 10 ten: a table whose winner is WORK 13 against one
# whose winner is WORK 10, of the same source, is tonight's tuning choosing a slower config.
"$bin/ktune" sweep "$work/knob.toml" --out "$work/knob-table.json" >/dev/null 2>&1 \
  || fail "the knob_sum table run exited $?"
python3 - "$work/knob-table.json" "$work/knob-base.json" "$work/knob-cur.json" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
row = table["rows"][0]
for key in ("stats", "samples_ms"):
    row.pop(key, None)
table.get("provenance", {}).pop("canary", None)
row["config"] = {"WORK": 10}
json.dump(table, open(sys.argv[2], "w"))
row["config"] = {"WORK": 13}
row["median_ms"] *= 1.3
json.dump(table, open(sys.argv[3], "w"))
PY
set +e
"$bin/ktune" --json compare "$work/knob-cur.json" "$work/knob-base.json" >"$work/choice.json" 2>"$work/choice.err"
code=$?
set -e
[[ $code == 0 ]] || fail "a slower config of an unchanged source exited $code: $(cat "$work/choice.json" "$work/choice.err")"
python3 - "$work/choice.json" <<'PY' || fail "the slower config: $(cat "$work/choice.json" "$work/choice.err")"
import json, sys
k = json.load(open(sys.argv[1]))["keys"][0]
ab = k["ab"]
assert k["verdict"] == "same" and ab["verdict"] == "same" and k["winner_changed"], k
assert ab["winner_slower"] is True and ab["winners_ratio"] > 1.1 and ab["ratio"] > 1.1, ab
assert ab["why"].startswith("the source is unchanged"), ab
assert "the config tonight's tuning chose is slower, not the kernel" in ab["why"], ab
PY
grep -q "tonight's tuning chose a slower config" "$work/choice.err" || fail "not said: $(cat "$work/choice.err")"
echo "nightly: an unchanged kernel under a hog is no regression, a 10% slower one regressed with its A/B figures, a slower source hidden by a new winner regressed at the baseline's config, a slower config chosen for an unchanged source is no regression"
