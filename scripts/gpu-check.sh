#!/usr/bin/env bash
# ktune GPU check: runs from the bundle scripts/gpu-pack.sh writes, on a machine with a GPU and
# nothing of ktune's build (docs/gpu.md). It never builds. Steps, in order, each under its own
# time limit; a failed step does not stop the next:
#
#   env      nvidia-smi (name, driver, MIG mode, persistence, clocks, power), the CUDA devices
#            ktune-worker sees (nvrtc and libcuda found or why not), ldd of the bundled binaries,
#            the socket path's length
#   tests    every [gpu] test case in its own process; the [loses-context] cases last
#   tune     a private ktuned: each CUDA family at one shape with a budget, and (not --quick)
#            gemm brute force at 256^3
#   lookup   the tune step's winners answered `exact` for cuda:0 by the C and Python clients
#   measure  the timing protocol on reduce_sum at a microsecond size and gemm at a millisecond
#            size, each measured twice: medians, their spread, the conditions recorded
#   ab       the speed canary on cuda:0, and A/B confirmations (the op `confirm`) of reduce_sum's
#            default config against itself and against another config
#
# usage: gpu-check.sh [--quick] [--steps LIST] [--require-gpu] [--out DIR]
#   --quick        smaller budgets, no brute force: under 4 minutes (else under 8)
#   --steps LIST   only these steps, comma-separated (env always runs: the others need it)
#   --require-gpu  a step skipped for want of a GPU counts as failed
#   --out DIR      where logs and summary.json go (default $OUT when set, else a new /tmp folder)
# Without a GPU every GPU step is skipped with the reason and the exit status is 0. The last line
# printed is summary.json: {"ok":..,"gpu":..,"seconds":..,"steps":{"env":{"status":..},..}}.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
quick=0
require_gpu=0
steps=",env,tests,tune,lookup,measure,ab,"
outdir="${OUT:-}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --require-gpu) require_gpu=1; shift ;;
    --steps) steps=",env,$2,"; shift 2 ;;
    --out) outdir="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$outdir" ]] || outdir="$(mktemp -d /tmp/ktune-gpu-check.XXXXXX)"
mkdir -p "$outdir/logs" "$outdir/steps"
outdir="$(cd "$outdir" && pwd)"
logs="$outdir/logs"
started=$SECONDS
if [[ $quick -eq 1 ]]; then total_s=210; else total_s=450; fi
deadline=$((started + total_s))

export PATH="$here/bin:$PATH"
export KTUNE_TEST_SOURCE_DIR="$here/src"
export KTUNE_TEST_BIN_DIR="$here/bin"
export PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
home="$(mktemp -d /tmp/ktg.XXXXXX)" # short: the socket path must stay under 108 bytes
export KTUNE_HOME="$home"
export KTUNE_NO_AUTOSTART=1
gpu=false
gpu_reason=""

# Seconds a step may take: its own limit, cut to what is left of the whole run (at least 5).
limit() {
  local own="$1" left=$((deadline - SECONDS))
  ((left < 5)) && left=5
  ((own < left)) && echo "$own" || echo "$left"
}

# step_result NAME STATUS [KEY=JSON ...]: steps/NAME.json, then summary.json anew.
step_result() {
  local name="$1" status="$2"; shift 2
  python3 - "$outdir/steps/$name.json" "$status" "$@" <<'PY'
import json, sys
path, status, *pairs = sys.argv[1:]
out = {"status": status}
for pair in pairs:
    key, _, value = pair.partition("=")
    try:
        out[key] = json.loads(value)
    except ValueError:
        out[key] = value
json.dump(out, open(path, "w"))
PY
  write_summary
  echo "gpu-check: $name: $status"
}

write_summary() {
  python3 - "$outdir" "$((SECONDS - started))" "$quick" "$require_gpu" "$gpu" "$here/MANIFEST" "$steps" <<'PY' >/dev/null
import json, os, sys
outdir, seconds, quick, require_gpu, gpu, manifest, wanted = sys.argv[1:]
wanted = [n for n in ("env", "tests", "tune", "lookup", "measure", "ab") if "," + n + "," in wanted]
steps = {}
for name in wanted:
    path = os.path.join(outdir, "steps", name + ".json")
    if os.path.exists(path):
        steps[name] = json.load(open(path))
bad = [n for n, s in steps.items()
       if s["status"] == "failed" or (require_gpu == "1" and s["status"] == "skipped")]
summary = {"ok": not bad and len(steps) == len(wanted), "gpu": gpu == "true", "quick": quick == "1",
           "seconds": int(seconds), "failed_steps": bad, "steps": steps,
           "bundle": open(manifest).read().splitlines()[1] if os.path.exists(manifest) else None,
           "logs": os.path.join(outdir, "logs")}
json.dump(summary, open(os.path.join(outdir, "summary.json"), "w"), indent=1)
PY
}

json_string() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# --- env ---------------------------------------------------------------------------------------
step_env() {
  local smi='null' devices problems=()
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout -k 5 30 nvidia-smi --query-gpu=index,name,uuid,driver_version,mig.mode.current,persistence_mode,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu \
      --format=csv,noheader,nounits >"$logs/nvidia-smi.csv" 2>&1
    smi=$(python3 - "$logs/nvidia-smi.csv" <<'PY'
import json, sys
keys = ["index", "name", "uuid", "driver", "mig_mode", "persistence", "pstate", "sm_mhz", "max_sm_mhz",
        "mem_mhz", "max_mem_mhz", "power_w", "power_limit_w", "temperature_c"]
rows = [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in open(sys.argv[1]) if "," in line]
print(json.dumps(rows))
PY
)
  else
    problems+=("nvidia-smi not found")
  fi
  timeout -k 5 60 ktune-worker --list-cuda-devices >"$logs/devices.json" 2>"$logs/devices.err"
  devices=$(tail -1 "$logs/devices.json")
  python3 -c 'import json,sys; json.loads(sys.argv[1])' "$devices" 2>/dev/null ||
    devices="{\"cuda_error\":{\"code\":\"no_device\",\"message\":$(json_string "ktune-worker --list-cuda-devices failed: $(tail -c 300 "$logs/devices.err")")}}"
  read -r gpu gpu_reason < <(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
if d.get("devices"):
    print("true")
else:
    print("false", (d.get("cuda_error") or {}).get("message", "no CUDA device"))' "$devices")
  local unresolved
  unresolved=$(for f in "$here"/bin/*; do LD_LIBRARY_PATH= ldd "$f" 2>&1 | grep -i "not found" | sed "s|^|$(basename "$f"): |"; done)
  [[ -z "$unresolved" ]] || problems+=("unresolved libraries: $unresolved")
  local socket="$home/ktuned.sock"
  ((${#socket} < 108)) || problems+=("socket path $socket is ${#socket} bytes (limit 107)")
  local status=passed
  # Without a GPU, a missing nvidia-smi is what one expects; with one, it is a problem.
  if [[ "$gpu" != "true" ]]; then
    local kept=()
    for p in "${problems[@]}"; do [[ "$p" == "nvidia-smi not found" ]] || kept+=("$p"); done
    problems=("${kept[@]}")
  fi
  ((${#problems[@]} == 0)) || status=failed
  local problem_json
  problem_json=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${problems[@]}")
  step_result env "$status" "nvidia_smi=$smi" "cuda=$devices" "gpu=$gpu" \
    "socket_path=$(json_string "$socket")" "socket_path_bytes=${#socket}" \
    "cores=$(nproc)" "glibc=$(json_string "$(ldd --version 2>&1 | head -1)")" \
    "problems=$problem_json"
}

# --- tests -------------------------------------------------------------------------------------
# run_cases BINARY SPEC: each case of BINARY matching SPEC in its own process; one TSV line each.
run_cases() {
  local binary="$1" spec="$2" name escaped rc case_limit
  if [[ $quick -eq 1 ]]; then case_limit=60; else case_limit=120; fi
  while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    if ((SECONDS >= step_deadline)); then
      printf '%s\t%s\tnot_run\tthe tests step ran out of time\n' "$binary" "$name"
      continue
    fi
    escaped=$(printf '%s' "$name" | sed 's/[][,\\]/\\&/g')
    local log="$logs/case-$(printf '%s' "$binary-$name" | tr -c 'A-Za-z0-9' '_' | cut -c1-120).log"
    timeout -k 5 "$(limit "$case_limit")" "$here/bin/$binary" "$escaped" >"$log" 2>&1
    rc=$?
    if grep -q '^SKIPPED: ' "$log"; then
      printf '%s\t%s\tskipped\t%s\n' "$binary" "$name" "$(grep -m1 '^SKIPPED: ' "$log" | cut -c10-)"
    elif [[ $rc -eq 0 ]]; then
      printf '%s\t%s\tpassed\t\n' "$binary" "$name"
    elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
      printf '%s\t%s\tfailed\ttimed out after %ss\n' "$binary" "$name" "$case_limit"
    else
      printf '%s\t%s\tfailed\texit %s\n' "$binary" "$name" "$rc"
    fi
  done < <("$here/bin/$binary" --list-test-names-only "$spec" 2>/dev/null | sed 's/^ *//')
}

step_tests() {
  local own=210
  [[ $quick -eq 1 ]] && own=100
  step_deadline=$((SECONDS + $(limit $own)))
  : >"$logs/tests.tsv"
  for binary in test_cuda test_worker test_integration; do run_cases "$binary" "[gpu]~[loses-context]"; done >>"$logs/tests.tsv"
  for binary in test_cuda test_worker test_integration; do run_cases "$binary" "[gpu][loses-context]"; done >>"$logs/tests.tsv"
  local fields
  mapfile -t fields < <(python3 - "$logs/tests.tsv" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
count = {k: sum(r[2] == k for r in rows) for k in ("passed", "failed", "skipped", "not_run")}
cases = [{"binary": r[0], "case": r[1], "result": r[2], "detail": r[3]} for r in rows]
status = "failed" if count["failed"] or count["not_run"] or not rows else (
    "skipped" if count["skipped"] == len(rows) else "passed")
reasons = sorted({r[3] for r in rows if r[2] == "skipped"})
print(status, json.dumps(count), json.dumps(cases), json.dumps(reasons), sep="\n")
PY
)
  step_result tests "${fields[0]}" "counts=${fields[1]}" "cases=${fields[2]}" "skip_reasons=${fields[3]}"
}

# --- a private ktuned for tune, lookup and measure ---------------------------------------------
daemon_up=0
start_daemon() {
  ((daemon_up)) && return 0
  cat >"$home/ktuned.toml" <<'TOML'
# gpu-check: short measurements; four finalists re-measured so that the winner reproduces.
[measure]
min_samples = 10
target_rsd = 0.02
min_time_s = 0.01
max_time_s = 0.5
warmup_ms = 25.0
finalists = 4
final_rounds = 3
TOML
  if ! timeout -k 5 60 ktune daemon start --config "$home/ktuned.toml" >"$logs/daemon-start.log" 2>&1; then
    return 1
  fi
  daemon_up=1
}
stop_daemon() {
  ((daemon_up)) || return 0
  timeout -k 5 30 ktune daemon stop >/dev/null 2>&1 || true
  cp "$home"/log/*.log "$logs/" 2>/dev/null || true
  daemon_up=0
}
trap 'stop_daemon; rm -rf "$home"' EXIT

# tune_one FAMILY SHAPE LIMIT ARGS...: one job, waited for; its `ktune job` JSON appended to
# $logs/jobs.ndjson (or {"failed": why}).
tune_one() {
  local family="$1" shape="$2" seconds="$3"; shift 3
  echo "# tune $family $shape $*" >>"$logs/tune.log"
  if ! timeout -k 5 "$(limit "$seconds")" ktune --json tune "$family" --device cuda:0 --shape "$shape" \
      --wait "$@" >"$logs/tune-last.json" 2>>"$logs/tune.log"; then
    echo "{\"failed\":$(json_string "tune $family $shape $*: $(tail -c 300 "$logs/tune-last.json")")}" >>"$logs/jobs.ndjson"
    return
  fi
  local job
  job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' "$logs/tune-last.json")
  timeout -k 5 30 ktune --json job "$job" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >>"$logs/jobs.ndjson"
}

# Fields of a step from the jobs in $1: status, jobs, problems; the winners go to $2.
summarise_jobs() {
  python3 - "$1" "$2" <<'PY'
import json, sys
jobs, winners, problems = [], [], []
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "failed" in j:
        problems.append(j["failed"])
        continue
    job, results, winner = j["job"], j.get("results", []), j.get("winner")
    count = {}
    for r in results:
        count[r["status"]] = count.get(r["status"], 0) + 1
    name = f'{job["kernel"]} {job["shape"]}'
    for bad in ("crash", "worker_lost", "mismatch"):
        if count.get(bad):
            reasons = sorted({r["reason"] for r in results if r["status"] == bad})[:3]
            problems.append(f"{name}: {count[bad]} {bad} ({'; '.join(reasons)})")
    if not winner:
        problems.append(f"{name}: no winner (job {job['state']}: {job.get('error', '')})")
    else:
        winners.append({"kernel": job["kernel"], "shape": job["shape"], "dtype": job.get("dtype", "f32"),
                        "config": winner["config"]})
    best = next((r for r in results if winner and r["config_index"] == winner["config_index"]), None)
    jobs.append({"job": job["id"], "kernel": job["kernel"], "shape": job["shape"],
                 "strategy": job["strategy"], "candidates": len(results), "statuses": count,
                 "winner": winner["config"] if winner else None,
                 "median_us": round(winner["median_ms"] * 1000, 3) if winner else None,
                 "conditions": best.get("conditions") if best else None,
                 "seconds": round((job["finished_at"] - job["started_at"]) / 1000, 1)
                 if job.get("finished_at") and job.get("started_at") else None})
json.dump(winners, open(sys.argv[2], "w"))
print("failed" if problems or not jobs else "passed", json.dumps(jobs), json.dumps(problems), sep="\n")
PY
}

step_tune() {
  if [[ "$gpu" != "true" ]]; then
    step_result tune skipped "reason=$(json_string "no CUDA device: $gpu_reason")"
    return
  fi
  if ! start_daemon; then
    step_result tune failed "reason=$(json_string "ktuned did not start: $(tail -c 400 "$logs/daemon-start.log")")"
    return
  fi
  : >"$logs/jobs.ndjson"
  local budget=30 per_job=90
  [[ $quick -eq 1 ]] && budget=12 && per_job=45
  local cases=("gemm|M=1024,N=1024,K=1024" "reduce_sum|N=1048576" "softmax|ROWS=4096,COLS=1024"
               "transpose|ROWS=4096,COLS=4096")
  for c in "${cases[@]}"; do tune_one "${c%%|*}" "${c#*|}" "$per_job" --strategy bayes --budget "$budget"; done
  [[ $quick -eq 1 ]] || tune_one gemm "M=256,N=256,K=256" 150 --strategy exhaustive
  local fields
  mapfile -t fields < <(summarise_jobs "$logs/jobs.ndjson" "$outdir/winners.json")
  step_result tune "${fields[0]}" "jobs=${fields[1]}" "problems=${fields[2]}"
}

# --- lookup ------------------------------------------------------------------------------------
step_lookup() {
  if [[ "$gpu" != "true" ]]; then
    step_result lookup skipped "reason=$(json_string "no CUDA device: $gpu_reason")"
    return
  fi
  if [[ ! -s "$outdir/winners.json" ]] || ! start_daemon; then
    step_result lookup failed "reason=\"no winners from the tune step, or ktuned is not running\""
    return
  fi
  local fields
  mapfile -t fields < <(timeout -k 5 "$(limit 60)" python3 - "$outdir/winners.json" "$here/bin/runtime_lookup_c" <<'PY'
import json, subprocess, sys
import ktune_client
winners, c_lookup = sys.argv[1:]
rows, problems = [], []
with ktune_client.Client() as client:
    for w in json.load(open(winners)):
        out = subprocess.run([c_lookup, w["kernel"], w["shape"], w["dtype"], "cuda:0"],
                             capture_output=True, text=True, timeout=20)
        first = out.stdout.splitlines()[0] if out.stdout else ""
        fields = dict(kv.split("=", 1) for kv in first.split(" ") if "=" in kv)
        c_config = json.loads(fields.get("config", "null") or "null") if fields.get("config") else None
        c_ok = out.returncode == 0 and fields.get("rung") == "exact" and c_config == w["config"]
        a = client.lookup(w["kernel"], w["shape"], w["dtype"], "cuda:0")
        py_ok = a.rung == "exact" and a.config == w["config"]
        rows.append({"kernel": w["kernel"], "shape": w["shape"], "c": fields.get("rung") or out.stderr.strip(),
                     "python": a.rung})
        if not c_ok:
            problems.append(f'C client: {w["kernel"]} {w["shape"]}: {first or out.stderr.strip()}')
        if not py_ok:
            problems.append(f'Python client: {w["kernel"]} {w["shape"]}: {a.rung} {a.config} {a.reason}')
print("failed" if problems or not rows else "passed", json.dumps(rows), json.dumps(problems), sep="\n")
PY
)
  [[ ${#fields[@]} -eq 3 ]] || fields=(failed "[]" '["the lookup step failed or timed out"]')
  step_result lookup "${fields[0]}" "lookups=${fields[1]}" "problems=${fields[2]}"
}

# --- measure -----------------------------------------------------------------------------------
step_measure() {
  if [[ "$gpu" != "true" ]]; then
    step_result measure skipped "reason=$(json_string "no CUDA device: $gpu_reason")"
    return
  fi
  if ! start_daemon; then
    step_result measure failed "reason=\"ktuned is not running\""
    return
  fi
  : >"$logs/measure.ndjson"
  # One config each (the first admitted), measured twice; --remeasure so the second is taken anew.
  local cases=("reduce_sum|N=4096" "gemm|M=2048,N=2048,K=2048")
  for c in "${cases[@]}"; do
    for round in 1 2; do
      if ! timeout -k 5 "$(limit 60)" ktune --json tune "${c%%|*}" --device cuda:0 --shape "${c#*|}" \
          --budget 1 --remeasure --wait >"$logs/measure-last.json" 2>>"$logs/measure.log"; then
        echo "{\"failed\":$(json_string "measure ${c%%|*} ${c#*|} round $round")}" >>"$logs/measure.ndjson"
        continue
      fi
      local job
      job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' "$logs/measure-last.json")
      timeout -k 5 30 ktune --json job "$job" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >>"$logs/measure.ndjson"
    done
  done
  local fields
  mapfile -t fields < <(python3 - "$logs/measure.ndjson" <<'PY'
import json, sys
runs, problems = {}, []
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "failed" in j:
        problems.append(j["failed"])
        continue
    ok = [r for r in j.get("results", []) if r["status"] == "ok"]
    key = f'{j["job"]["kernel"]} {j["job"]["shape"]}'
    if not ok:
        problems.append(f"{key}: no ok result ({[r['reason'] for r in j.get('results', [])]})")
        continue
    r = ok[0]
    runs.setdefault(key, []).append({"median_us": round(r["median_ms"] * 1000, 3), "n": r["n"],
                                     "rsd": round(r["stddev_ms"] / r["mean_ms"], 4) if r["mean_ms"] else None,
                                     "conditions": r.get("conditions")})
out = []
for key, rs in runs.items():
    meds = [r["median_us"] for r in rs]
    spread = (max(meds) - min(meds)) / min(meds) if len(meds) == 2 and min(meds) > 0 else None
    out.append({"case": key, "runs": rs, "spread": round(spread, 4) if spread is not None else None})
print("failed" if problems or len(out) < 2 else "passed", json.dumps(out), json.dumps(problems), sep="\n")
PY
)
  step_result measure "${fields[0]}" "cases=${fields[1]}" "problems=${fields[2]}"
}

# --- ab: the speed canary and A/B confirmations on the GPU --------------------------------------
step_ab() {
  if [[ "$gpu" != "true" ]]; then
    step_result ab skipped "reason=$(json_string "no CUDA device: $gpu_reason")"
    return
  fi
  if ! start_daemon; then
    step_result ab failed "reason=\"ktuned is not running\""
    return
  fi
  local fields
  mapfile -t fields < <(timeout -k 5 "$(limit 120)" python3 - <<'PY'
import json
from ktune_client import Daemon
out, problems = {}, []
with Daemon() as d:
    reading = d.canary("cuda:0", "gpu-check")
    out["canary"] = {k: reading.get(k) for k in ("compute_ms", "memory_ms")}
    if not (reading.get("compute_ms", 0) > 0 and reading.get("memory_ms", 0) > 0):
        problems.append(f"canary: {reading}")
    k = next(k for k in d.kernels() if k.name == "reduce_sum" and k.language == "cuda")
    build = {"source_hash": k.source_hash, "config": dict(k.default)}
    other = dict(k.default)
    other["ITEMS"] = 1 if other.get("ITEMS") != 1 else 4
    for name, candidate, allowed in (("same build", build, ("same", "ambiguous")),
                                     ("another config", {"source_hash": k.source_hash, "config": other},
                                      ("regressed", "improved", "same", "ambiguous"))):
        r = d.confirm("reduce_sum", "N=1048576", build, candidate, device="cuda:0")
        out[name] = {f: r.get(f) for f in ("verdict", "ratio", "ratio_interval", "rounds", "why")}
        if "impossible" in r or r.get("verdict") not in allowed:
            problems.append(f"{name}: {r.get('verdict')}: {r.get('why')}")
print("failed" if problems else "passed", json.dumps(out), json.dumps(problems), sep="\n")
PY
)
  [[ ${#fields[@]} -eq 3 ]] || fields=(failed "{}" '["the ab step failed or timed out"]')
  step_result ab "${fields[0]}" "results=${fields[1]}" "problems=${fields[2]}"
}

echo "gpu-check: bundle $here ($(sed -n 2p "$here/MANIFEST" 2>/dev/null)), output $outdir"
for step in env tests tune lookup measure ab; do
  [[ "$steps" == *",$step,"* ]] && "step_$step"
done
stop_daemon
write_summary
# The last line: the summary without the per-case list (summary.json has it).
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
tests = s["steps"].get("tests")
if tests:
    tests["cases"] = [c for c in tests.get("cases", []) if c["result"] not in ("passed", "skipped")]
print(json.dumps(s))' "$outdir/summary.json"
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$outdir/summary.json"
