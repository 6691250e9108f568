#!/usr/bin/env bash
# Long fuzzing runs of the libFuzzer targets in tests/fuzz.
#
#   scripts/fuzz.sh [TARGET...] [--time S] [--runs N] [--jobs J]
#
# TARGET is a target name with or without its "fuzz_" prefix (protocol, shape, expr, kernel_spec,
# recorded_space, file_reader, winner_table); none means every target. Each runs until S seconds (default 600)
# or N executions (default 10000000), whichever comes first, J targets at a time (default 1).
# Builds build/fuzz with clang (the "fuzz" preset) when needed. The corpus grows in
# build/fuzz/fuzz-corpus/<target>/, logs go to build/fuzz/fuzz-logs/<target>.log and crashes to
# build/fuzz/fuzz-artifacts/. Prints, per target, executions, exec/s and "no finding" or the
# crash file; exits non-zero when any target found something.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/build/fuzz"
time_s=600
runs=10000000
jobs=1
targets=()

usage() { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in
    --time) time_s=${2:?--time needs seconds}; shift 2 ;;
    --runs) runs=${2:?--runs needs a count}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a count}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) targets+=("fuzz_${1#fuzz_}"); shift ;;
  esac
done
for n in "$time_s" "$runs" "$jobs"; do
  [[ "$n" =~ ^[0-9]+$ && "$n" -gt 0 ]] || { echo "fuzz.sh: expected a positive integer, found '$n'" >&2; exit 2; }
done

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found; the fuzz targets need clang (libFuzzer)" >&2
  exit 1
fi

cd "$root"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake --preset fuzz >/dev/null
fi
cmake --build --preset fuzz -j "$(nproc)" >/dev/null

if ((${#targets[@]} == 0)); then
  for source in tests/fuzz/fuzz_*.cpp; do
    name=$(basename "$source" .cpp)
    targets+=("$name")
  done
fi
for target in "${targets[@]}"; do
  if [[ ! -x "$build/bin/$target" || ! -f "$build/fuzz-args/$target.args" ]]; then
    echo "fuzz.sh: no fuzz target '$target' (expected $build/bin/$target)" >&2
    exit 2
  fi
done

mkdir -p "$build/fuzz-logs"

# Runs one target; its log is build/fuzz/fuzz-logs/<target>.log.
run_target() {
  local target=$1
  local -a args
  mapfile -t args < "$build/fuzz-args/$target.args"
  "$build/bin/$target" -max_total_time="$time_s" -runs="$runs" "${args[@]}" \
    > "$build/fuzz-logs/$target.log" 2>&1
}

# Prints one line for a finished target from its log and exit status.
report() {
  local target=$1 status=$2 seconds=$3 log="$build/fuzz-logs/$target.log"
  local execs rate finding
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  if [[ -z "$execs" ]]; then
    execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
  fi
  if ((status == 0)); then
    finding="no finding"
  else
    finding=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    [[ -n "$finding" ]] || finding="exit status $status, see $log"
    finding="FINDING: $finding (log: $log)"
  fi
  printf '%-22s %12s execs %8s exec/s %6ss  %s\n' "$target" "${execs:-?}" "${rate:-?}" "$seconds" "$finding"
}

failed=0
declare -A started=()
declare -A pid_target=()
finish_one() {
  local pid status=0
  wait -n -p pid || status=$?
  local target=${pid_target[$pid]}
  report "$target" "$status" $(( $(date +%s) - started[$target] ))
  ((status == 0)) || failed=1
  unset "pid_target[$pid]"
}

echo "fuzzing ${#targets[@]} target(s), ${time_s}s or ${runs} executions each, ${jobs} at a time"
for target in "${targets[@]}"; do
  while ((${#pid_target[@]} >= jobs)); do finish_one; done
  started[$target]=$(date +%s)
  run_target "$target" &
  pid_target[$!]=$target
done
while ((${#pid_target[@]} > 0)); do finish_one; done
exit "$failed"
