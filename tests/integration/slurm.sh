#!/usr/bin/env bash
# The fleet acceptance on a real Slurm (ctest: test_slurm, label slurm): scripts/slurm-local.sh
# starts munged, slurmctld and slurmd as this test's processes under a temporary directory, then
#  1. `ktune sweep --slurm` submits a 4-shard sweep of small CPU tunes as an array job and a
#     merge job after it; Slurm runs them; every shard's table holds exactly its jobs' keys, with
#     provenance (node, device fingerprint, Slurm job, array job and task ids); the merge job
#     wrote the merged table and its JUnit report; `ktune fleet status` says 4 done;
#  2. the merged table equals, key by key, a single-machine sweep of the same file (same seeds:
#     the winners' configs agree; measured times may differ);
#  3. a ktuned with `table_dirs` serves the merged winners: a table moved into the directory is
#     answered by lookups within 2 s, and the same content under another name is not imported
#     again;
#  4. a second fleet loses a shard to `scancel` while it runs: it writes no table, its private
#     ktuned and home are gone, the merge lists it (CANCELLED, its log) and fails with exit 2, and
#     re-running the same submission runs only that shard, after which the merge is complete.
# Without root or without the Slurm packages it prints "SKIPPED: <why>" (scripts/install-deps.sh
# installs them; CI runs as root).
#
#   tests/integration/slurm.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin="$(cd "$1" && pwd)"
src="$(cd "$2" && pwd)"
slurm_local="$src/scripts/slurm-local.sh"

if ! why="$("$slurm_local" check 2>&1)"; then
  echo "SKIPPED: cannot run a local Slurm here: ${why#slurm-local: }"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/ktune-slurm-test.XXXXXX")"
cluster="$work/cluster"
export KTUNE_NO_AUTOSTART=1
export TMPDIR="$work/tmp"   # the shards' node-local KTUNE_HOME lives here (sbatch exports it)
mkdir -p "$TMPDIR"
cleanup() {
  KTUNE_HOME="$work/single" "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  KTUNE_HOME="$work/served" "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  "$slurm_local" stop "$cluster" || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  for log in "$work"/fleet*/logs/*.log "$cluster"/log/slurmctld.log; do
    [[ -f "$log" ]] && { echo "--- $log" >&2; tail -n 15 "$log" >&2; }
  done
  exit 1
}
started=$SECONDS

eval "$("$slurm_local" start "$cluster")" || fail "the local Slurm did not start (logs in $cluster/log)"
[[ -n "${SLURM_CONF:-}" ]] || fail "slurm-local.sh printed no SLURM_CONF"
echo "slurm up after $((SECONDS - started)) s"

cat >"$work/ktuned.toml" <<TOML
[daemon]
compile_workers = 1

[measure]
min_samples = 5
max_samples = 30
max_time_s = 0.03
min_time_s = 0
warmup_ms = 1
flush_cache = false
TOML
# Eight small tunes: random search over one config each, so that the winner is the seed's
# choice (seed 0 everywhere) and a single-machine sweep must name the same configs.
cat >"$work/sweep.toml" <<TOML
[sweep]
name = "fleet-test"

[[kernel]]
name = "reduce_sum"
strategy = "random"
budget = 1
[kernel.shapes]
N = [1024, 2048, 4096, 8192, 16384, 32768]

[[kernel]]
name = "gemm"
strategy = "random"
budget = 1
[kernel.shapes]
M = [16, 32]
N = [16]
K = [16]
TOML

py() { python3 - "$@"; }
# A number field of `ktune --json` output, without starting Python (the window for step 4 is short).
json_int() { sed -n "s/^ *\"$2\": \([0-9]*\),\{0,1\}$/\1/p" "$1"; }
# Waits until Slurm has none of the given jobs queued or running.
wait_jobs() {
  local deadline=$((SECONDS + 150))
  while [[ -n "$(squeue -h -j "$1" -o %i 2>/dev/null)" ]]; do
    ((SECONDS < deadline)) || fail "jobs $1 still queued or running after 150 s: $(squeue -j "$1" 2>&1)"
    sleep 0.5
  done
}
job_field() { scontrol -o show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# --- 1. the fleet --------------------------------------------------------------------------------
out="$work/fleet1"
"$bin/ktune" --json sweep "$work/sweep.toml" --slurm --shards 4 --out "$out" --config "$work/ktuned.toml" \
  >"$work/submit1.json" || fail "submission exited $?: $(cat "$work/submit1.json")"
array="$(json_int "$work/submit1.json" array_job)"
merge_job="$(json_int "$work/submit1.json" merge_job)"
[[ -n "$array" && -n "$merge_job" ]] || fail "no job ids in: $(cat "$work/submit1.json")"
grep -q "^exec '$bin/ktune' fleet shard '$out/sweep.toml' --shard \"\$SLURM_ARRAY_TASK_ID/4\"" "$out/shard.sbatch" \
  || fail "the batch script does not run the shard by the binary's absolute path: $(cat "$out/shard.sbatch")"
[[ "$(job_field "$merge_job" Dependency)" == *"afterany:${array}_"* ]] \
  || fail "merge job $merge_job does not depend on array $array with afterany: $(job_field "$merge_job" Dependency)"

# Meanwhile, the same sweep on this machine alone.
mkdir -p "$work/single"
KTUNE_HOME="$work/single" "$bin/ktune" daemon start --config "$work/ktuned.toml" >/dev/null
KTUNE_HOME="$work/single" "$bin/ktune" sweep "$work/sweep.toml" --out "$work/single.json" >/dev/null 2>"$work/single.err" \
  || fail "the single-machine sweep exited $?: $(cat "$work/single.err")"
KTUNE_HOME="$work/single" "$bin/ktune" daemon stop >/dev/null

wait_jobs "$array,$merge_job"
echo "fleet 1 done after $((SECONDS - started)) s"
[[ "$(job_field "$merge_job" JobState)" == COMPLETED ]] \
  || fail "merge job $merge_job: $(job_field "$merge_job" JobState) exit $(job_field "$merge_job" ExitCode)"
for i in 1 2 3 4; do
  [[ -f "$out/shards/shard-$i.json" ]] || fail "no table of shard $i"
  "$bin/ktune" sweep "$work/sweep.toml" --shard "$i/4" --dry-run 2>/dev/null >"$work/dry-$i.txt"
done
py "$out" "$array" "$work" <<'PY' || fail "shard tables"
import json, sys
out, array, work = sys.argv[1], sys.argv[2], sys.argv[3]
seen = {}
for i in range(1, 5):
    table = json.load(open(f"{out}/shards/shard-{i}.json"))
    keys = sorted((r["kernel"], r["shape"]) for r in table["rows"])
    # The dry run lists the shard's jobs: "# KERNEL SHAPE DTYPE DEVICE STRATEGY".
    lines = [l.split() for l in open(f"{work}/dry-{i}.txt").read().splitlines()[1:] if l.strip()]
    expected = sorted((l[1], l[2]) for l in lines)
    assert keys == expected, f"shard {i}: rows {keys}, its jobs {expected}"
    for k in keys:
        assert k not in seen, f"{k} in shard {seen.get(k)} and shard {i}"
        seen[k] = i
    p = table.get("provenance", {})
    assert p.get("shard") == f"{i}/4", f"shard {i}: provenance {p}"
    assert p.get("node") == "localhost", f"shard {i}: node {p.get('node')}"
    slurm = p.get("slurm", {})
    assert slurm.get("array_job_id") == array and slurm.get("array_task_id") == str(i), f"shard {i}: slurm {slurm}"
    assert slurm.get("job_id"), f"shard {i}: no job id"
    fps = {r["fingerprint"] for r in table["rows"]}
    assert fps == {d["fingerprint"] for d in p.get("devices", [])}, f"shard {i}: devices {p.get('devices')} vs rows {fps}"
    assert p.get("failed_jobs") == 0 and p.get("rejected_jobs") == 0, f"shard {i}: {p}"
assert len(seen) == 8, f"{len(seen)} keys over the shards, expected 8"
merged = json.load(open(f"{out}/merged.json"))
assert len(merged["rows"]) == 8, f"merged: {len(merged['rows'])} rows"
assert merged["provenance"]["incomplete"] == [], merged["provenance"]["incomplete"]
PY
grep -q 'tests="12" failures="0"' "$out/merged.xml" || fail "merged.xml: $(head -n 3 "$out/merged.xml" 2>&1)"
"$bin/ktune" fleet status "$out" >"$work/status1.txt" || fail "fleet status exited $?"
grep -q "4 shards: 4 done" "$work/status1.txt" || fail "fleet status: $(cat "$work/status1.txt")"

# --- 2. the same winners as one machine ----------------------------------------------------------
py "$out/merged.json" "$work/single.json" <<'PY' || fail "the merge differs from the single-machine sweep"
import json, sys
def rows(path):
    return {(r["kernel"], r["shape"], r["dtype"], r["fingerprint"], r["source_hash"]): r
            for r in json.load(open(path))["rows"]}
merged, single = rows(sys.argv[1]), rows(sys.argv[2])
assert merged.keys() == single.keys(), f"keys: merged only {merged.keys() - single.keys()}, single only {single.keys() - merged.keys()}"
for key in merged:
    assert merged[key]["config"] == single[key]["config"], f"{key}: {merged[key]['config']} vs {single[key]['config']}"
    assert merged[key]["device"] == single[key]["device"], f"{key}: device {merged[key]['device']} vs {single[key]['device']}"
PY

# --- 3. published through table_dirs -------------------------------------------------------------
mkdir -p "$work/served" "$work/published"
cat "$work/ktuned.toml" >"$work/served.toml"
sed -i "s|^\[daemon\]|[daemon]\ntable_dirs = [\"$work/published\"]|" "$work/served.toml"
KTUNE_HOME="$work/served" "$bin/ktune" daemon start --config "$work/served.toml" >/dev/null
query() { KTUNE_HOME="$work/served" "$bin/ktune" --json query reduce_sum --shape N=4096 2>/dev/null; }
query >/dev/null && fail "reduce_sum N=4096 is tuned before any table was published"
cp "$out/merged.json" "$work/published/.incoming"
t0=$(date +%s%N)
mv "$work/published/.incoming" "$work/published/nightly.json"
until query >"$work/served.json"; do
  (( ($(date +%s%N) - t0) / 1000000 < 2000 )) || fail "the published table was not served within 2 s"
  sleep 0.05
done
echo "published table served after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
py "$work/served.json" "$out/merged.json" <<'PY' || fail "the served winner is not the merged one"
import json, sys
served = json.load(open(sys.argv[1]))
row = next(r for r in json.load(open(sys.argv[2]))["rows"] if r["kernel"] == "reduce_sum" and r["shape"] == "N=4096")
config = served.get("config", served.get("params"))
assert config == row["config"], f"served {served}, merged {row['config']}"
PY
cp "$out/merged.json" "$work/published/copy.json"
sleep 1
log="$work/served/log/ktuned.log"
[[ "$(grep -c "table_dirs: importing" "$log")" == 1 ]] \
  || fail "the same table was imported more than once: $(grep "table_dirs" "$log")"
KTUNE_HOME="$work/served" "$bin/ktune" daemon stop >/dev/null

# --- 4. a cancelled shard, reported and resubmitted ----------------------------------------------
out="$work/fleet2"
"$bin/ktune" --json sweep "$work/sweep.toml" --slurm --shards 4 --max-parallel 1 --out "$out" \
  --config "$work/ktuned.toml" >"$work/submit2.json" || fail "second submission exited $?"
array="$(json_int "$work/submit2.json" array_job)"
merge_job="$(json_int "$work/submit2.json" merge_job)"
# The first task seen running with its private ktuned up is cancelled.
running_task() { squeue -h -r -j "$array" -t RUNNING -o %K 2>/dev/null | head -n 1; }
deadline=$((SECONDS + 60))
k=""
until [[ -n "$k" ]] && ls "$TMPDIR"/ktune-shard-"$k".*/ktuned.sock >/dev/null 2>&1; do
  ((SECONDS < deadline)) || fail "no shard of array $array was seen running: $(squeue -j "$array" 2>&1)"
  k="$(running_task)"
  sleep 0.1
done
scancel "${array}_$k"
wait_jobs "$array,$merge_job"
echo "fleet 2 ended after $((SECONDS - started)) s (shard $k cancelled)"
! ls "$TMPDIR"/ktune-shard-"$k".* >/dev/null 2>&1 || fail "the cancelled shard left its KTUNE_HOME: $(ls -d "$TMPDIR"/ktune-shard-"$k".*)"
[[ ! -e "$out/shards/shard-$k.json" ]] || fail "the cancelled shard $k wrote a table"
[[ "$(job_field "$merge_job" ExitCode)" == 2:0 ]] \
  || fail "the merge job after a cancelled shard: $(job_field "$merge_job" JobState) exit $(job_field "$merge_job" ExitCode)"
set +e
"$bin/ktune" fleet merge "$out" --junit "$work/merge2.xml" >"$work/merge2.txt" 2>&1
code=$?
set -e
[[ $code == 2 ]] || fail "fleet merge with a cancelled shard exited $code: $(cat "$work/merge2.txt")"
grep -q "merged 3 of 4 shards" "$work/merge2.txt" || fail "fleet merge: $(cat "$work/merge2.txt")"
grep -E "^ +$k +failed .*${array}_$k CANCELLED.*$out/logs/shard-$k\.$array\.log" "$work/merge2.txt" >/dev/null \
  || fail "fleet merge does not list shard $k as cancelled with its log: $(cat "$work/merge2.txt")"
grep -q 'failures="1"' "$work/merge2.xml" || fail "merge2.xml: $(head -n 3 "$work/merge2.xml")"

"$bin/ktune" --json sweep "$work/sweep.toml" --slurm --out "$out" --config "$work/ktuned.toml" \
  >"$work/submit3.json" || fail "resubmission exited $?: $(cat "$work/submit3.json")"
grep -q "\"tasks\": \"$k\"" "$work/submit3.json" \
  || fail "the resubmission did not run exactly shard $k: $(cat "$work/submit3.json")"
array="$(json_int "$work/submit3.json" array_job)"
merge_job="$(json_int "$work/submit3.json" merge_job)"
wait_jobs "$array,$merge_job"
[[ "$(job_field "$merge_job" JobState)" == COMPLETED ]] \
  || fail "the merge after the resubmission: $(job_field "$merge_job" JobState) exit $(job_field "$merge_job" ExitCode)"
"$bin/ktune" fleet merge "$out" -o "$work/merged2.json" >"$work/merge3.txt" || fail "fleet merge exited $?: $(cat "$work/merge3.txt")"
grep -q "merged 4 of 4 shards: 8 rows" "$work/merge3.txt" || fail "fleet merge: $(cat "$work/merge3.txt")"
echo "test_slurm passed in $((SECONDS - started)) s"
