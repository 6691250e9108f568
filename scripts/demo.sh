#!/usr/bin/env bash
# ktune demo: start ktuned, list its kernels, tune gemm on the CPU, show the job and look up the
# winner, then stop the daemon. Every command is echoed as `$ ...` before it runs.
#
#   scripts/demo.sh BIN_DIR        (BIN_DIR holds ktune, ktuned and ktune-worker)
#
# The instance lives in $KTUNE_HOME (default: build/demo-home in the checkout), so the demo never
# touches a ktuned the user already runs. ktuned is stopped again if any step fails.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BIN_DIR   (the directory with ktune, ktuned and ktune-worker)" >&2
  exit 2
fi
if [[ ! -x "$1/ktune" ]]; then
  echo "demo: no ktune executable in '$1'; build first (make release)" >&2
  exit 1
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$(cd "$1" && pwd)"
home="${KTUNE_HOME:-$root/build/demo-home}"
[[ "$home" == /* ]] || home="$PWD/$home"
export KTUNE_HOME="$home"
mkdir -p "$KTUNE_HOME"

ktune() { "$bin/ktune" "$@"; }
show() {
  echo "\$ ktune $*"
  ktune "$@"
}

on_exit() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "demo: failed (exit $rc); stopping ktuned" >&2
    ktune daemon stop >/dev/null 2>&1 || true
  fi
}
trap on_exit EXIT

# The demo measures each candidate for at most 0.3 s (the shipped configs/ktuned.toml allows up
# to 15 s for a 1% relative standard deviation), so the 138 gemm candidates take a couple of
# minutes even on two busy cores. Everything else is the shipped configuration.
config="$KTUNE_HOME/demo-ktuned.toml"
cat >"$config" <<'TOML'
# Written by scripts/demo.sh: short measurements for the demo.
[measure]
min_samples = 5
target_rsd = 0.02
min_time_s = 0.02
max_time_s = 0.3
warmup_ms = 5.0
TOML

echo "# ktune demo (KTUNE_HOME=$KTUNE_HOME)"
show daemon start --config "$config"
show kernels

# The tune's last line is "job N done: ..."; the job id is taken from it.
echo "\$ ktune tune gemm --shape M=256,N=256,K=256 --device cpu --wait"
tune_out="$(ktune tune gemm --shape M=256,N=256,K=256 --device cpu --wait)"
printf '%s\n' "$tune_out"
job="$(printf '%s\n' "$tune_out" | sed -n 's/^job \([0-9][0-9]*\) done:.*/\1/p')"
if [[ -z "$job" ]]; then
  echo "demo: could not find 'job N done' in the tune output" >&2
  exit 1
fi

show job "$job"
show query gemm --shape M=256,N=256,K=256 --device cpu --json
show daemon stop
