#!/usr/bin/env bash
# The sweep acceptance, end to end with the real binaries (ctest: test_sweep):
#  1. a sweep of the CPU kernels at two shapes each runs unattended to a table;
#  2. run again with --baseline of the first table it exits 0;
#  3. a baseline edited to be 20% faster on one key makes it exit 1 and name that key;
#  4. shards 1/2 and 2/2 cover exactly the unsharded sweep's keys, and importing both into a fresh
#     daemon gives the same winners as the unsharded table.
#
#   tests/integration/sweep.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin="$1"
src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/ktune-sweep-test.XXXXXX")"
export KTUNE_NO_AUTOSTART=1
cleanup() {
  KTUNE_HOME="$work/a" "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  KTUNE_HOME="$work/b" "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

mkdir -p "$work/a" "$work/b"
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
name = "test"

[[kernel]]
name = "gemm"
[kernel.shapes]
M = [32, 64]
N = [32]
K = [32]

[[kernel]]
name = "reduce_sum"
[kernel.shapes]
N = [1024, 4096]
TOML
start() { KTUNE_HOME="$1" "$bin/ktune" daemon start --config "$work/ktuned.toml" --kernel-dir "$src/kernels_src" >/dev/null; }
keys() { python3 -c 'import json,sys; print("\n".join(sorted("%s %s %s" % (r["kernel"], r["shape"], r["dtype"]) for r in json.load(open(sys.argv[1]))["rows"])))' "$1"; }
winners() { python3 -c 'import json,sys; print("\n".join(sorted("%s %s %s %s" % (r["kernel"], r["shape"], r["dtype"], json.dumps(r["config"], sort_keys=True)) for r in json.load(open(sys.argv[1]))["rows"])))' "$1"; }

start "$work/a"
export KTUNE_HOME="$work/a"

# 1. Unattended to a table.
"$bin/ktune" sweep "$work/sweep.toml" --out "$work/t1.json" >"$work/out1.md" || fail "the first sweep exited $?"
[[ "$(keys "$work/t1.json" | wc -l)" == 4 ]] || fail "expected 4 keys in the table, got: $(keys "$work/t1.json")"
grep -q "| gemm | M=32,N=32,K=32 |" "$work/out1.md" || fail "the summary lacks the gemm key: $(cat "$work/out1.md")"

# 2. Against its own table: exit 0, a JUnit file without failures.
"$bin/ktune" sweep "$work/sweep.toml" --baseline "$work/t1.json" --junit "$work/j1.xml" >"$work/out2.md" \
  || fail "the sweep against its own baseline exited $?: $(cat "$work/out2.md")"
grep -q "<testsuite" "$work/j1.xml" || fail "no JUnit XML written"
! grep -q "<failure" "$work/j1.xml" || fail "JUnit has a failure against its own baseline"

# 3. A baseline 20% faster on one key: exit 1, that key named.
python3 - "$work/t1.json" "$work/fast.json" <<'PY'
import json, sys
table = json.load(open(sys.argv[1]))
row = next(r for r in table["rows"] if r["kernel"] == "gemm" and r["shape"] == "M=64,N=32,K=32")
row["median_ms"] /= 1.25
# Without statistics the verdict is the ratio alone (tableio/compare.hpp): on a noisy machine (a
# sanitizer build, a loaded box) the two 95% intervals of the same samples could overlap.
row.pop("stats", None)
json.dump(table, open(sys.argv[2], "w"))
PY
set +e
"$bin/ktune" sweep "$work/sweep.toml" --baseline "$work/fast.json" --junit "$work/j2.xml" >"$work/out3.md" 2>"$work/err3.txt"
code=$?
set -e
[[ $code == 1 ]] || fail "expected exit 1 against a 20% faster baseline, got $code: $(cat "$work/out3.md" "$work/err3.txt")"
grep -q "M=64,N=32,K=32" "$work/out3.md" || fail "the summary does not name the regressed key: $(cat "$work/out3.md")"
grep -q "<failure" "$work/j2.xml" || fail "JUnit has no failure for the regression"
[[ "$(grep -c "<failure" "$work/j2.xml")" == 1 ]] || fail "expected exactly one JUnit failure"

# 4. Shards cover the sweep exactly once; their tables merged in a fresh daemon give the same winners.
"$bin/ktune" sweep "$work/sweep.toml" --shard 1/2 --out "$work/s1.json" >/dev/null || fail "shard 1/2 exited $?"
"$bin/ktune" sweep "$work/sweep.toml" --shard 2/2 --out "$work/s2.json" >/dev/null || fail "shard 2/2 exited $?"
[[ -z "$(comm -12 <(keys "$work/s1.json") <(keys "$work/s2.json"))" ]] || fail "shards overlap"
[[ "$(sort <(keys "$work/s1.json") <(keys "$work/s2.json"))" == "$(keys "$work/t1.json")" ]] || fail "shards do not cover the sweep"
"$bin/ktune" daemon stop >/dev/null

start "$work/b"
export KTUNE_HOME="$work/b"
"$bin/ktune" import "$work/s1.json" >/dev/null || fail "import of shard 1 exited $?"
"$bin/ktune" import "$work/s2.json" >/dev/null || fail "import of shard 2 exited $?"
"$bin/ktune" export --format json -o "$work/t2.json" || fail "export exited $?"
[[ "$(winners "$work/t2.json")" == "$(winners "$work/t1.json")" ]] || fail "merged shards differ from the unsharded table:
$(diff <(winners "$work/t1.json") <(winners "$work/t2.json"))"
echo "sweep: table, baseline (exit 0), regression (exit 1, key named), shards and merge all hold"
