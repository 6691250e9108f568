#!/usr/bin/env bash
# Repro bundles end to end with the real binaries (ctest: test_repro): a ktuned tunes the fault
# matrix (tests/faults/faults: segfault, abort, infinite loop, wrong answer, compile error,
# endless compile, 64 GiB allocation, exit(0) mid-run, write past the output) with tiny
# measurement settings and short deadlines; then for every result `ktune repro` writes a bundle
# and its run.sh, run outside ktuned (the daemon stopped), must print the stored status.
#
#   tests/integration/repro.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin="$1"
src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/ktune-repro-test.XXXXXX")"
export KTUNE_NO_AUTOSTART=1
export KTUNE_HOME="$work/home"
# Sanitizer builds: let the candidates' signals kill the worker, failed allocations return null.
export ASAN_OPTIONS="handle_segv=0:handle_abort=0:handle_sigbus=0:allocator_may_return_null=1:detect_leaks=0"
cleanup() {
  "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
[[ -n "${KTUNE_REPRO_KEEP:-}" ]] && trap - EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

mkdir -p "$work/home"
# The endless compile (FAULT 6) runs into compile_timeout_s, here and again in its run.sh: short.
cat >"$work/ktuned.toml" <<TOML
[daemon]
compile_workers = 2
worker_idle_s = 30
stop_grace_s = 2
[limits]
compile_timeout_s = 6
bench_timeout_min_s = 1
bench_timeout_max_s = 2
worker_memory_mb = 16384
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.01
min_time_s = 0
warmup_ms = 0
flush_cache = false
TOML
"$bin/ktune" daemon start --config "$work/ktuned.toml" --only-kernel-dir "$src/tests/faults" >/dev/null
"$bin/ktune" --json tune faults --shape N=4096 --wait >"$work/tune.json" 2>/dev/null \
  || fail "tuning the faults family exited $?: $(cat "$work/tune.json")"
job="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' "$work/tune.json")"
"$bin/ktune" --json job "$job" >"$work/job.json"
# One line per result: id, FAULT, stored status.
python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(r["id"], r["config"]["FAULT"], r["status"])' "$work/job.json" >"$work/results.txt"
[[ "$(wc -l <"$work/results.txt")" == 11 ]] || fail "expected 11 results: $(cat "$work/job.json")"
for want in crash timeout mismatch compile_error compile_timeout runtime_error worker_lost ok; do
  grep -q " $want\$" "$work/results.txt" || fail "no $want result in $(cat "$work/results.txt")"
done

# The bundles are written while ktuned runs (it names its database, kernel directories and
# settings) ...
while read -r id fault status; do
  "$bin/ktune" repro "$id" -o "$work/bundle-$id" >/dev/null || fail "ktune repro $id exited $?"
  for f in run.sh repro.json result.json env.json compile_command.txt kernel/kernel.cpp kernel/kernel.toml; do
    [[ -e "$work/bundle-$id/$f" ]] || fail "bundle of result $id has no $f"
  done
done <"$work/results.txt"
"$bin/ktune" daemon stop >/dev/null

# ... and run without it, from another directory, moved away from where they were written.
mv "$work/bundle-$(head -1 "$work/results.txt" | cut -d' ' -f1)" "$work/moved"
first="$(head -1 "$work/results.txt" | cut -d' ' -f1)"
reproduced=0
while read -r id fault status; do
  dir="$work/bundle-$id"
  [[ $id == "$first" ]] && dir="$work/moved"
  set +e
  (cd / && "$dir/run.sh") >"$work/run-$id.out" 2>&1
  code=$?
  set -e
  got="$(sed -n 's/^status: \([a-z_]*\).*/\1/p' "$work/run-$id.out" | tail -1)"
  [[ "$got" == "$status" ]] || fail "result $id (FAULT=$fault): stored $status, run.sh printed '${got}': $(cat "$work/run-$id.out")"
  if [[ $status == ok ]]; then
    [[ $code == 0 ]] || fail "result $id: ok, yet run.sh exited $code"
    grep -q "^status: ok median .* ms" "$work/run-$id.out" || fail "result $id: no time: $(cat "$work/run-$id.out")"
  else
    [[ $code == 1 ]] || fail "result $id: $status, yet run.sh exited $code"
  fi
  reproduced=$((reproduced + 1))
done <"$work/results.txt"
echo "reproduced $reproduced of $(wc -l <"$work/results.txt") results"

# A family changed since the result is refused, --force writes the bundle anyway.
cp -r "$src/tests/faults" "$work/changed"
echo "// changed" >>"$work/changed/faults/kernel.cpp"
set +e
"$bin/ktune" repro "$first" -o "$work/refused" --db "$work/home/ktune.db" --kernel-dir "$work/changed" 2>"$work/refused.err"
code=$?
set -e
[[ $code == 1 ]] || fail "a changed family: exit $code"
grep -q "source_changed" "$work/refused.err" || fail "no source_changed: $(cat "$work/refused.err")"
"$bin/ktune" repro "$first" -o "$work/forced" --db "$work/home/ktune.db" --kernel-dir "$work/changed" --force >/dev/null 2>"$work/forced.err" \
  || fail "--force exited $?"
grep -q "warning: kernel 'faults' changed" "$work/forced.err" || fail "no warning: $(cat "$work/forced.err")"
echo "PASSED"
