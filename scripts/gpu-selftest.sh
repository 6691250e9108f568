#!/usr/bin/env bash
# ktune GPU self-test, for a machine with an NVIDIA GPU, its driver and the CUDA toolkit:
#   1. builds ktune (release preset, CUDA backend on),
#   2. runs the [gpu] tests of test_cuda (they skip, and this script fails, without a device),
#   3. starts a private ktuned and tunes every CUDA family at two shapes on cuda:0,
#   4. prints one table: best config, median µs, GFLOP/s or GB/s, and the speed-up over the
#      family's reference ([default]) config measured in the same job. Needs python3.
#
#   scripts/gpu-selftest.sh [--device cuda:N] [--skip-build]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
device="cuda:0"
build=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device) device="$2"; shift 2 ;;
    --skip-build) build=0; shift ;;
    *) echo "usage: $0 [--device cuda:N] [--skip-build]" >&2; exit 2 ;;
  esac
done
bin="$root/build/release/bin"

if [[ $build -eq 1 ]]; then
  echo "# building (cmake --preset release, KTUNE_CUDA=ON)"
  cmake --preset release -DKTUNE_CUDA=ON >/dev/null
  cmake --build --preset release -j "$(nproc)"
fi

echo "# [gpu] tests"
"$bin/test_cuda" "[gpu]" --reporter compact || {
  rc=$?
  if [[ $rc -eq 4 ]]; then echo "gpu-selftest: no CUDA device: the [gpu] tests were skipped" >&2; fi
  exit 1
}

home="$(mktemp -d "${TMPDIR:-/tmp}/ktune-gpu-selftest.XXXXXX")"
export KTUNE_HOME="$home"
cleanup() {
  "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  rm -rf "$home"
}
trap cleanup EXIT
cat >"$home/ktuned.toml" <<'TOML'
# gpu-selftest: shorter measurements than the shipped configuration.
[measure]
min_samples = 10
target_rsd = 0.02
min_time_s = 0.02
max_time_s = 1.0
warmup_ms = 10.0
TOML
"$bin/ktune" daemon start --config "$home/ktuned.toml" >/dev/null
echo "# devices"
"$bin/ktune" devices

# family|shape, two shapes each
cases=(
  "gemm|M=1024,N=1024,K=1024" "gemm|M=4096,N=4096,K=4096"
  "reduce_sum|N=1048576" "reduce_sum|N=67108864"
  "softmax|ROWS=4096,COLS=1024" "softmax|ROWS=1024,COLS=16384"
  "transpose|ROWS=4096,COLS=4096" "transpose|ROWS=8192,COLS=2048"
)
results="$home/results.ndjson"
: >"$results"
status=0
for c in "${cases[@]}"; do
  family="${c%%|*}"
  shape="${c#*|}"
  echo "# tune $family $shape on $device"
  if ! "$bin/ktune" --json tune "$family" --device "$device" --shape "$shape" --wait \
      >"$home/tune.json"; then
    echo "gpu-selftest: tune $family $shape failed" >&2
    status=1
    continue
  fi
  job="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' "$home/tune.json")"
  "$bin/ktune" --json job "$job" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))' >>"$results"
done

"$bin/ktune" --json kernels >"$home/kernels.json"
python3 - "$results" "$home/kernels.json" <<'PY'
import json, sys

defaults = {k["name"]: k["default"] for k in json.load(open(sys.argv[2]))["kernels"]
            if k["language"] == "cuda"}

def cfg(c):
    return " ".join(f"{k}={v}" for k, v in c.items())

rows = []
for line in open(sys.argv[1]):
    j = json.loads(line)
    job, results = j["job"], j.get("results", [])
    ok = [r for r in results if r["status"] == "ok"]
    if not ok:
        rows.append((job["kernel"], job["shape"], "no ok candidate", "-", "-", "-"))
        continue
    best = min(ok, key=lambda r: r["median_ms"])
    ref = next((r for r in results if r["config"] == defaults.get(job["kernel"])), None)
    rate = f'{best["gflops"]:.1f} GFLOP/s' if best["gflops"] > 0 else f'{best["gbps"]:.1f} GB/s'
    vs = (f'{ref["median_ms"] / best["median_ms"]:.2f}x'
          if ref and ref["status"] == "ok" and best["median_ms"] > 0 else "-")
    rows.append((job["kernel"], job["shape"], cfg(best["config"]),
                 f'{best["median_ms"] * 1000:.1f}', rate, vs))
head = ("KERNEL", "SHAPE", "BEST CONFIG", "MEDIAN us", "RATE", "VS REFERENCE")
widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
for r in [head] + rows:
    print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
PY
exit $status
