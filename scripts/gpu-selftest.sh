#!/usr/bin/env bash
# ktune GPU self-test, in steps that each fit one command on a lent GPU machine (docs/gpu.md):
#
#   scripts/gpu-selftest.sh build    configure with the CUDA backend and build only what the
#                                    other steps run (offline: no report/node_modules needed)
#   scripts/gpu-selftest.sh tests    every [gpu] test case in its own process; the cases that
#                                    deliberately lose the CUDA context ([loses-context]) last
#   scripts/gpu-selftest.sh tune     each CUDA family at one shape with a budget, then gemm
#                                    exhaustively at one shape, and one job on cuda:1 if present
#   scripts/gpu-selftest.sh lookup   the winners `tune` recorded, answered for cuda:0 by the C
#                                    client and the Python client
#
# Options: --require-gpu  a step that finds no CUDA device fails instead of skipping
#          --device cuda:N the device tune and lookup use (default cuda:0)
# Each step prints a table and ends with one JSON line, {"step":..,"ok":..,...}; the exit status
# is 0 exactly when "ok" is true. A crash, worker_lost or mismatch in a shipped family fails the
# tune step. State shared by the steps (the daemon's home, the winners) lives in
# build/gpu-selftest, which git ignores and a lent machine keeps between commands.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/build/release/bin"
state="$root/build/gpu-selftest"
device="cuda:0"
require_gpu=0
step=""
usage="usage: $0 build|tests|tune|lookup [--require-gpu] [--device cuda:N]"
while [[ $# -gt 0 ]]; do
  case "$1" in
    build|tests|tune|lookup) step="$1"; shift ;;
    --require-gpu) require_gpu=1; shift ;;
    --device) device="$2"; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[[ -n "$step" ]] || { echo "$usage" >&2; exit 2; }
started=$SECONDS

# The step's JSON line from KEY=VALUE pairs (values already JSON), then the exit status.
finish() {
  local ok="$1"; shift
  python3 - "$step" "$ok" "$((SECONDS - started))" "$@" <<'PY'
import json, sys
step, ok, seconds, *pairs = sys.argv[1:]
line = {"step": step, "ok": ok == "true", "seconds": int(seconds)}
for pair in pairs:
    key, _, value = pair.partition("=")
    line[key] = json.loads(value)
print(json.dumps(line))
PY
  [[ "$ok" == "true" ]] && exit 0 || exit 1
}

# The same from a checker's output $1: its table is printed, and its last line,
# "<TAB><json object><TAB>true|false", gives the fields and the verdict.
finish_from() {
  local out="$1" marker
  grep -v $'^\t' "$out"
  marker=$(grep $'^\t' "$out" | tail -1)
  [[ -n "$marker" ]] || finish false "reason=$(json_string "the check failed: $(tail -3 "$out")")"
  local pairs
  mapfile -t pairs < <(python3 -c 'import json,sys
for k, v in json.loads(sys.argv[1]).items(): print(k + "=" + json.dumps(v, separators=(",", ":")))' \
    "$(cut -f2 <<<"$marker")")
  finish "$(cut -f3 <<<"$marker")" "${pairs[@]}"
}

json_string() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# A step that needs a device and finds none: skipped (ok) or, with --require-gpu, failed.
no_device() {
  local reason="$1"
  echo "gpu-selftest $step: skipped: no CUDA device ($reason)"
  if [[ $require_gpu -eq 1 ]]; then finish false gpu=false "reason=$(json_string "$reason")"; fi
  finish true gpu=false "skipped=$(json_string "no CUDA device: $reason")"
}

need_binaries() {
  for b in "$@"; do
    [[ -x "$bin/$b" ]] || finish false "reason=$(json_string "$bin/$b is missing: run '$0 build' first")"
  done
}

# --- build -------------------------------------------------------------------------------------
step_build() {
  local targets=(ktuned ktune-worker ktune test_cuda test_worker test_integration ktune_lookup_client_shared)
  echo "# configure: cmake --preset release -DKTUNE_CUDA=ON"
  if ! cmake --preset release -DKTUNE_CUDA=ON >"$state/configure.log" 2>&1; then
    tail -20 "$state/configure.log"
    finish false "reason=$(json_string "configure failed: $state/configure.log")"
  fi
  local chart="Chart.js"
  grep -q "Building with a stub" "$state/configure.log" && chart="stub (no report/node_modules)"
  echo "# build: ${targets[*]}"
  if ! cmake --build --preset release -j "$(nproc)" --target "${targets[@]}" >"$state/build.log" 2>&1; then
    tail -30 "$state/build.log"
    finish false "reason=$(json_string "build failed: $state/build.log")"
  fi
  local cuda
  cuda=$(grep -q '^KTUNE_CUDA:BOOL=ON' "$root/build/release/CMakeCache.txt" && echo true || echo false)
  printf '%-28s %s\n' TARGET STATE
  for t in "${targets[@]}"; do printf '%-28s %s\n' "$t" built; done
  echo "report charts: $chart"
  [[ "$cuda" == "true" ]] || finish false cuda=false \
    "reason=$(json_string "KTUNE_CUDA is off: no CUDA toolkit found at configure time")"
  finish true cuda=true "chart_js=$(json_string "$chart")" \
    "targets=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${targets[@]}")"
}

# --- tests -------------------------------------------------------------------------------------
# Runs each test case of binary $1 matching Catch2 spec $2 in its own process and appends
# "binary<TAB>case<TAB>result<TAB>detail" to $state/tests.tsv.
run_cases() {
  local binary="$1" spec="$2" name escaped rc out
  while IFS= read -r name; do
    [[ -n "$name" ]] || continue
    escaped=$(printf '%s' "$name" | sed 's/[][,\\]/\\&/g')
    out=$("$bin/$binary" "$escaped" 2>&1)
    rc=$?
    case $rc in
      0) printf '%s\t%s\tpassed\t\n' "$binary" "$name" ;;
      4) if grep -q '^SKIPPED: ' <<<"$out"; then
           printf '%s\t%s\tskipped\t%s\n' "$binary" "$name" "$(grep -m1 '^SKIPPED: ' <<<"$out" | cut -c10-)"
         else  # four failed assertions, not a skip
           printf '%s\t%s\tfailed\t%s\n' "$binary" "$name" "exit 4"
           printf '%s\n' "$out" >"$state/failed-$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '_').log"
         fi ;;
      *) printf '%s\t%s\tfailed\t%s\n' "$binary" "$name" "exit $rc"
         printf '%s\n' "$out" >"$state/failed-$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '_').log" ;;
    esac >>"$state/tests.tsv"
  done < <("$bin/$binary" --list-test-names-only "$spec" | sed 's/^ *//')
}

step_tests() {
  need_binaries test_cuda test_worker test_integration
  : >"$state/tests.tsv"
  # test_integration's [gpu] cases start a ktuned of their own: two lanes at once, and a
  # candidate that loses the context next to good ones.
  for binary in test_cuda test_worker test_integration; do run_cases "$binary" "[gpu]~[loses-context]"; done
  for binary in test_cuda test_worker test_integration; do run_cases "$binary" "[gpu][loses-context]"; done
  python3 - "$state/tests.tsv" "$require_gpu" >"$state/tests.out" <<'PY'
import json, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
require_gpu = sys.argv[2] == "1"
width = max([len(r[1]) for r in rows] + [4])
print(f'{"BINARY":<12} {"CASE":<{width}} RESULT')
for binary, name, result, detail in rows:
    print(f"{binary:<12} {name:<{width}} {result}" + (f" ({detail})" if result == "failed" else ""))
count = {k: sum(r[2] == k for r in rows) for k in ("passed", "failed", "skipped")}
reasons = sorted({r[3] for r in rows if r[2] == "skipped"})
ok = count["failed"] == 0 and len(rows) > 0 and not (require_gpu and count["skipped"])
line = {"gpu": count["passed"] + count["failed"] > 0, **count,
        "failed_cases": [r[1] for r in rows if r[2] == "failed"]}
if reasons:
    line["skip_reasons"] = reasons
    print("skipped: " + "; ".join(reasons))
print("\t" + json.dumps(line) + "\t" + ("true" if ok else "false"))
PY
  finish_from "$state/tests.out"
}

# --- a private daemon for tune and lookup ------------------------------------------------------
start_daemon() {
  export KTUNE_HOME="$state/home"
  mkdir -p "$KTUNE_HOME"
  cat >"$KTUNE_HOME/ktuned.toml" <<'TOML'
# gpu-selftest: short measurements; the finals keep the winner reproducible.
[measure]
min_samples = 5
target_rsd = 0.03
min_time_s = 0.005
max_time_s = 0.25
warmup_ms = 2.0
finalists = 4
final_rounds = 3
TOML
  "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  "$bin/ktune" daemon start --config "$KTUNE_HOME/ktuned.toml" >/dev/null ||
    finish false "reason=$(json_string "ktuned did not start (see $KTUNE_HOME)")"
  trap '"$bin/ktune" daemon stop >/dev/null 2>&1 || true' EXIT
  "$bin/ktune" --json devices >"$state/devices.json" 2>&1 ||
    finish false "reason=$(json_string "ktune devices failed: $(head -c 300 "$state/devices.json")")"
  local reason
  reason=$(python3 - "$state/devices.json" "$device" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = [x["name"] for x in d.get("devices", [])]
if sys.argv[2] not in names:
    print(d.get("cuda", {}).get("reason") or f"{sys.argv[2]} is not among {names}")
PY
)
  [[ -z "$reason" ]] || no_device "$reason"
}

# --- tune --------------------------------------------------------------------------------------
# One job: $1 family, $2 shape, $3 device, then extra `ktune tune` arguments. Appends the job's
# reply (with results) to $state/jobs.ndjson.
tune_one() {
  local family="$1" shape="$2" on="$3"; shift 3
  echo "# tune $family $shape on $on $*"
  if ! "$bin/ktune" --json tune "$family" --device "$on" --shape "$shape" --wait "$@" >"$state/tune.json" 2>&1; then
    echo "{\"failed\":$(json_string "tune $family $shape on $on: $(head -c 300 "$state/tune.json")")}" >>"$state/jobs.ndjson"
    return
  fi
  local job
  job=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' "$state/tune.json")
  "$bin/ktune" --json job "$job" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >>"$state/jobs.ndjson"
}

step_tune() {
  need_binaries ktuned ktune-worker ktune
  rm -rf "$state/home"
  start_daemon
  : >"$state/jobs.ndjson"
  # family|shape|budget: every shipped CUDA family at one shape, a bayes search of 40 candidates.
  local cases=("gemm|M=1024,N=1024,K=1024" "reduce_sum|N=1048576" "softmax|ROWS=4096,COLS=1024"
               "transpose|ROWS=4096,COLS=4096")
  for c in "${cases[@]}"; do tune_one "${c%%|*}" "${c#*|}" "$device" --strategy bayes --budget 40; done
  # Brute force where the admitted space is whole: every gemm config at one small shape.
  tune_one gemm "M=512,N=512,K=512" "$device" --strategy exhaustive
  # A second GPU lane, when the machine has one.
  if python3 -c 'import json,sys; sys.exit(0 if "cuda:1" in [d["name"] for d in json.load(open(sys.argv[1]))["devices"]] else 1)' \
      "$state/devices.json" && [[ "$device" != "cuda:1" ]]; then
    tune_one reduce_sum "N=1048576" cuda:1 --strategy bayes --budget 20
  fi
  python3 - "$state/jobs.ndjson" "$state/winners.json" >"$state/tune.out" <<'PY'
import json, sys
bad_statuses = ("crash", "worker_lost", "mismatch")
jobs, winners, problems = [], [], []
statuses = ["ok", "compile_error", "launch_error", "runtime_error", "mismatch", "crash", "timeout", "worker_lost"]
print(f'{"KERNEL":<11} {"SHAPE":<26} {"DEVICE":<7} ' + " ".join(f"{s:>13}" for s in statuses) + "  WINNER")
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "failed" in j:
        problems.append(j["failed"])
        continue
    job, results, winner = j["job"], j.get("results", []), j.get("winner")
    count = {}
    for r in results:
        count[r["status"]] = count.get(r["status"], 0) + 1
    name = f'{job["kernel"]} {job["shape"]} on {job["device"]}'
    for s in bad_statuses:
        if count.get(s):
            problems.append(f"{name}: {count[s]} {s}")
    if not winner:
        problems.append(f"{name}: no winner (job {job['state']})")
    else:
        winners.append({"kernel": job["kernel"], "shape": job["shape"], "dtype": job.get("dtype", "f32"),
                        "device": job["device"], "config": winner["config"]})
    cfg = " ".join(f"{k}={v}" for k, v in winner["config"].items()) if winner else "-"
    med = f'{winner["median_ms"] * 1000:.1f} us' if winner else ""
    print(f'{job["kernel"]:<11} {job["shape"]:<26} {job["device"]:<7} ' +
          " ".join(f"{count.get(s, 0):>13}" for s in statuses) + f"  {cfg} {med}")
    jobs.append({"job": job["id"], "kernel": job["kernel"], "shape": job["shape"], "device": job["device"],
                 "candidates": len(results), "statuses": count,
                 "winner": winner["config"] if winner else None,
                 "median_us": round(winner["median_ms"] * 1000, 2) if winner else None})
json.dump(winners, open(sys.argv[2], "w"))
for p in problems:
    print("problem: " + p)
print("\t" + json.dumps({"gpu": True, "jobs": jobs, "problems": problems}) + "\t" +
      ("true" if not problems and jobs else "false"))
PY
  finish_from "$state/tune.out"
}

# --- lookup ------------------------------------------------------------------------------------
step_lookup() {
  need_binaries ktuned ktune-worker ktune
  start_daemon
  [[ -s "$state/winners.json" ]] || finish false "reason=$(json_string "no winners: run '$0 tune' first")"
  local lib="$root/build/release/lib"
  cat >"$state/lookup.c" <<'C'
/* lookup KERNEL SHAPE DTYPE DEVICE: prints "<rung> <config json>" as the C client answers. */
#include <ktune/client.h>
#include <stdio.h>
int main(int argc, char** argv) {
  if (argc != 5) return 2;
  ktune_client* client = NULL;
  if (ktune_connect(NULL, &client) != KTUNE_OK) return 1;
  ktune_answer answer;
  if (ktune_lookup(client, argv[1], argv[2], argv[3], argv[4], &answer) != KTUNE_OK) {
    fprintf(stderr, "%s\n", ktune_last_error(client));
    return 1;
  }
  printf("%s %s\n", ktune_rung_string(answer.rung), answer.config_json);
  ktune_close(client);
  return 0;
}
C
  cc -o "$state/lookup" "$state/lookup.c" -I"$root/client/include" -L"$lib" -lktune_client \
    -Wl,-rpath,"$lib" || finish false "reason=$(json_string "cannot build the C lookup program")"
  python3 - "$state/winners.json" "$state/lookup" "$root/client/python" "$device" >"$state/lookup.out" <<'PY'
import json, subprocess, sys
winners, c_lookup, python_dir, device = sys.argv[1:]
sys.path.insert(0, python_dir)
import ktune_client
rows, problems = [], []
with ktune_client.Client() as client:
    for w in json.load(open(winners)):
        if w["device"] != device:
            continue
        out = subprocess.run([c_lookup, w["kernel"], w["shape"], w["dtype"], device],
                             capture_output=True, text=True)
        c_rung, _, c_config = out.stdout.strip().partition(" ")
        c_ok = out.returncode == 0 and c_rung == "exact" and json.loads(c_config or "null") == w["config"]
        a = client.lookup(w["kernel"], w["shape"], w["dtype"], device)
        py_ok = a.rung == "exact" and a.config == w["config"]
        rows.append((w["kernel"], w["shape"], "ok" if c_ok else f"{c_rung or out.stderr.strip()}",
                     "ok" if py_ok else f"{a.rung} {a.reason}"))
        if not c_ok:
            problems.append(f'C client: {w["kernel"]} {w["shape"]}: {out.stdout.strip() or out.stderr.strip()}')
        if not py_ok:
            problems.append(f'Python client: {w["kernel"]} {w["shape"]}: {a.rung} {a.config} {a.reason}')
print(f'{"KERNEL":<11} {"SHAPE":<26} {"C":<10} PYTHON')
for r in rows:
    print(f"{r[0]:<11} {r[1]:<26} {r[2]:<10} {r[3]}")
for p in problems:
    print("problem: " + p)
print("\t" + json.dumps({"gpu": True, "lookups": len(rows), "problems": problems}) + "\t" +
      ("true" if rows and not problems else "false"))
PY
  finish_from "$state/lookup.out"
}

mkdir -p "$state"
cd "$root"
"step_$step"
