#!/usr/bin/env bash
# The CUDA compile check CI runs (ctest label compile-check): starts a private ktuned and runs
# `ktune compile-check FAMILY --arch <archs>` for every CUDA family in KERNELS_DIR. Fails when
# any config a family's constraints admit does not compile for one of the architectures.
#
#   tests/cuda/compile_check.sh BIN_DIR KERNELS_DIR [ARCHS]      (ARCHS default: sm_80,sm_90)
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BIN_DIR KERNELS_DIR [ARCHS]" >&2
  exit 2
fi
bin="$1"
kernels="$2"
archs="${3:-sm_80,sm_90}"

home="$(mktemp -d "${TMPDIR:-/tmp}/ktune-compile-check.XXXXXX")"
export KTUNE_HOME="$home"
cleanup() {
  "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  rm -rf "$home"
}
trap cleanup EXIT

# Nothing is measured, so every core compiles.
cat >"$home/ktuned.toml" <<TOML
[daemon]
compile_workers = $(nproc)
TOML
"$bin/ktune" daemon start --config "$home/ktuned.toml" --kernel-dir "$kernels" >/dev/null

status=0
for spec in "$kernels"/*/kernel.toml; do
  family="$(basename "$(dirname "$spec")")"
  start=$SECONDS
  if "$bin/ktune" compile-check "$family" --arch "$archs" --errors-only; then
    echo "compile-check $family ($archs): ok in $((SECONDS - start)) s"
  else
    echo "compile-check $family ($archs): FAILED after $((SECONDS - start)) s" >&2
    status=1
  fi
done
exit $status
