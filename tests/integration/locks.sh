#!/usr/bin/env bash
# Machine-wide locks shared by every user (core/shared_lock_file.hpp; ctest: test_locks), with a
# user made by the test and two real ktuned, one root's and one that user's:
#  1. both confined to one CPU, they tune at the same time and take turns measuring: every call
#     of the kernel (each logs its wall-clock interval) lies outside every call of the other
#     daemon's, no result is flagged `unlocked`, and the lock file, made by the first, is 0666;
#  2. on two CPUs the user's ktuned opens the claim files root's made, claims the other CPU and
#     reports no claim problem;
#  3. symbolic links planted (by that user) under the lock and claim names in a fresh lock
#     directory are refused and never followed by root's ktuned: their targets are neither
#     created nor changed, `stats` names the problem, and every result says it was measured
#     without the lock.
# Needs root (useradd, setpriv); prints "SKIPPED: ..." and exits 0 otherwise.
#
#   tests/integration/locks.sh BIN_DIR
set -euo pipefail
bin="$1"
if [[ "$(id -u)" != 0 ]]; then
  echo "SKIPPED: needs root to make a second user (useradd) and run a ktuned as that user"
  exit 0
fi
for tool in useradd userdel setpriv taskset; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed"; exit 0; }
done
if [[ "$(nproc)" -lt 2 ]]; then
  echo "SKIPPED: one CPU: no CPU claims to share"
  exit 0
fi

user="ktune-lk$$"
work="$(mktemp -d "${TMPDIR:-/tmp}/ktune-locks-test.XXXXXX")"
chmod 755 "$work"
export KTUNE_NO_AUTOSTART=1
started=()
cleanup() {
  for home in "${started[@]}"; do
    KTUNE_HOME="$home" "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  done
  userdel "$user" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  for log in "$work"/*/log/ktuned.log; do [[ -f "$log" ]] && { echo "--- $log" >&2; tail -20 "$log" >&2; }; done
  exit 1
}
useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
as_user() { setpriv --reuid="$user" --regid="$user" --clear-groups -- "$@"; }

mkdir -p "$work/kernels/lockspin" "$work/calls" "$work/root" "$work/user" "$work/locks"
chmod 1777 "$work/calls" "$work/locks"  # like /run/lock: world-writable and sticky
chown "$user:$user" "$work/user"
config() { # LOCK_DIR
  cat <<TOML
[daemon]
lock_dir = "$1"
[measure]
min_samples = 20
max_samples = 400
max_time_s = 2
min_time_s = 1.5
warmup_ms = 1
flush_cache = false
finalists = 0
TOML
}
config "$work/locks" >"$work/ktuned.toml"
# lockspin: 1-5 ms of work per call (a dependent chain of N x P multiply-adds); every call appends its wall-clock interval (ns) to a
# file named by the measuring process.
cat >"$work/kernels/lockspin/kernel.toml" <<'TOML'
[kernel]
name = "lockspin"
language = "cpp"
source = "kernel.cpp"
entry = "lockspin"
shape = ["N"]
dtypes = ["f32"]
[params]
P = [1, 2]
[[args]]
name = "OUT"
kind = "out"
count = "1"
[[args]]
name = "N"
kind = "scalar"
value = "N"
[check]
reference = "none"
[default]
P = 1
TOML
cat >"$work/kernels/lockspin/kernel.cpp" <<CPP
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <unistd.h>
static std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
extern "C" void lockspin(void** args) {
  float* out = static_cast<float*>(args[0]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[1]);
  const std::int64_t start = now_ns();
  float acc = 0;
  for (std::int64_t i = 0; i < n * P; ++i) acc = acc * 0.999f + 1.0f;
  out[0] = acc;
  const std::int64_t end = now_ns();
  char path[256];
  std::snprintf(path, sizeof path, "$work/calls/%d.txt", int(getpid()));
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%lld %lld\n", (long long)start, (long long)end);
    std::fclose(f);
  }
}
CPP
chmod -R a+rX "$work/kernels" "$work/ktuned.toml"
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
start_root() { # HOME CONFIG [taskset cpu]
  started+=("$1")
  KTUNE_HOME="$1" ${3:+taskset -c "$3"} "$bin/ktune" daemon start --config "$2" --kernel-dir "$work/kernels" >/dev/null \
    || fail "root's ktuned did not start"
}
start_user() { # HOME CONFIG [taskset cpu]
  started+=("$1")
  as_user env KTUNE_HOME="$1" ${3:+taskset -c "$3"} "$bin/ktune" daemon start --config "$2" --kernel-dir "$work/kernels" >/dev/null \
    || fail "$user's ktuned did not start"
}
stop() { KTUNE_HOME="$1" "$bin/ktune" daemon stop >/dev/null 2>&1 || true; }

# 1. One CPU, two users: they take turns.
start_root "$work/root" "$work/ktuned.toml" 0
start_user "$work/user" "$work/ktuned.toml" 0
KTUNE_HOME="$work/root" "$bin/ktune" --json tune lockspin --shape N=1000000 --wait >"$work/root.json" 2>"$work/root.err" &
root_tune=$!
as_user env KTUNE_HOME="$work/user" "$bin/ktune" --json tune lockspin --shape N=1000000 --wait >"$work/user.json" 2>"$work/user.err" \
  || fail "the user's tune exited $?: $(cat "$work/user.err")"
wait "$root_tune" || fail "root's tune exited $?: $(cat "$work/root.err")"
KTUNE_HOME="$work/root" "$bin/ktune" --json job 1 >"$work/root-job.json"
as_user env KTUNE_HOME="$work/user" "$bin/ktune" --json job 1 >"$work/user-job.json"
lock="$work/locks/ktune-measure-cpu.lock"
[[ -f "$lock" && ! -L "$lock" ]] || fail "no lock file $lock: $(ls -la "$work/locks")"
[[ "$(stat -c %a "$lock")" == 666 ]] || fail "the lock file is mode $(stat -c %a "$lock"), expected 666"
python3 - "$work/calls" "$work/root-job.json" "$work/user-job.json" <<'PY' || fail "the two ktuned did not take turns"
import json, os, sys
calls = {}
for name in os.listdir(sys.argv[1]):
    with open(os.path.join(sys.argv[1], name)) as f:
        calls[name] = [tuple(map(int, line.split())) for line in f if line.strip()]
assert len(calls) >= 2, f"expected the bench workers of both daemons, found {list(calls)}"
jobs = [json.load(open(p)) for p in sys.argv[2:]]
for j in jobs:
    assert j["job"]["state"] == "done", j["job"]
    for r in j["results"]:
        assert r["status"] == "ok" and r.get("unlocked") is None, r
spans = [(j["job"]["started_at"], j["job"]["finished_at"]) for j in jobs]
assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1], f"the jobs did not run at the same time: {spans}"
overlaps = 0
names = sorted(calls)
for a in range(len(names)):
    for b in range(a + 1, len(names)):
        for s1, e1 in calls[names[a]]:
            for s2, e2 in calls[names[b]]:
                overlaps += s1 < e2 and s2 < e1
total = sum(len(v) for v in calls.values())
assert overlaps == 0, f"{overlaps} calls of one daemon overlapped calls of the other ({total} calls)"
print(f"{total} calls in {len(calls)} workers, none at the same time as another daemon's")
PY
stop "$work/root"
stop "$work/user"

# 2. Two CPUs: the user's ktuned opens root's claim files.
start_root "$work/root" "$work/ktuned.toml"
start_user "$work/user" "$work/ktuned.toml"
KTUNE_HOME="$work/root" "$bin/ktune" --json daemon status >"$work/root-stats.json"
as_user env KTUNE_HOME="$work/user" "$bin/ktune" --json daemon status >"$work/user-stats.json"
python3 - "$work/root-stats.json" "$work/user-stats.json" <<'PY' || fail "claims across users: $(cat "$work/root-stats.json" "$work/user-stats.json")"
import json, sys
lanes = [next(l for l in json.load(open(p))["lanes"] if l["device"] == "cpu") for p in sys.argv[1:]]
for lane in lanes:
    assert lane["bench_cpu_claimed"] is True and lane["bench_cpu_claim_problem"] is None, lane
    assert lane["measure_lock"]["path"].endswith(f"ktune-measure-cpu{lane['bench_cpu']}.lock"), lane
assert lanes[0]["bench_cpu"] != lanes[1]["bench_cpu"], lanes
PY
for claim in "$work"/locks/ktune-cpu*.claim; do
  [[ "$(stat -c %a "$claim")" == 666 ]] || fail "$claim is mode $(stat -c %a "$claim")"
done
stop "$work/root"
stop "$work/user"

# 3. Symbolic links planted by the user are refused by root's ktuned, never followed.
mkdir -p "$work/locks2" "$work/root2"
chmod 1777 "$work/locks2"
config "$work/locks2" >"$work/ktuned2.toml"
echo precious >"$work/target"
chmod 600 "$work/target"
before="$(stat -c '%s %a %U %Y' "$work/target")"
as_user ln -s "$work/target" "$work/locks2/ktune-measure-cpu.lock"
for cpu in $(seq 0 $(( $(nproc --all) - 1 ))); do
  as_user ln -s "$work/missing-claim$cpu" "$work/locks2/ktune-cpu$cpu.claim"
  as_user ln -s "$work/target" "$work/locks2/ktune-measure-cpu$cpu.lock"
done
start_root "$work/root2" "$work/ktuned2.toml"
KTUNE_HOME="$work/root2" "$bin/ktune" --json tune lockspin --shape N=1000 --budget 2 --wait >"$work/t3.json" \
  || fail "the tune beside planted links exited $?"
KTUNE_HOME="$work/root2" "$bin/ktune" --json job "$(field "$work/t3.json" 'd["job"]["id"]')" >"$work/j3.json"
KTUNE_HOME="$work/root2" "$bin/ktune" --json daemon status >"$work/s3.json"
python3 - "$work/j3.json" "$work/s3.json" <<'PY' || fail "the planted links: $(cat "$work/j3.json" "$work/s3.json")"
import json, sys
job, stats = (json.load(open(p)) for p in sys.argv[1:])
assert job["job"]["state"] == "done", job["job"]
for r in job["results"]:
    assert r["status"] == "ok", r
    assert "is a symbolic link: refused" in (r["unlocked"] or ""), r
lane = next(l for l in stats["lanes"] if l["device"] == "cpu")
assert lane["bench_cpu_claimed"] is False, lane
assert "is a symbolic link: refused" in lane["bench_cpu_claim_problem"], lane
assert lane["measure_lock"]["unlocked_measurements"] >= 2, lane
assert "is a symbolic link: refused" in lane["measure_lock"]["unlocked"], lane
PY
grep -q "measures without its machine-wide lock" "$work/root2/log/ktuned.log" || fail "the log does not say it measured without the lock"
KTUNE_HOME="$work/root2" "$bin/ktune" job "$(field "$work/t3.json" 'd["job"]["id"]')" >"$work/j3.txt"
grep -q "2 result(s) measured without the device lock: lock file .* is a symbolic link: refused" "$work/j3.txt" \
  || fail "ktune job does not say so: $(cat "$work/j3.txt")"
KTUNE_HOME="$work/root2" "$bin/ktune" daemon status >"$work/s3.txt"
grep -q "locks        cpu: 2 measurement(s) without the device lock" "$work/s3.txt" \
  || fail "ktune daemon status does not say so: $(cat "$work/s3.txt")"
[[ "$(stat -c '%s %a %U %Y' "$work/target")" == "$before" && "$(cat "$work/target")" == precious ]] \
  || fail "the symlink's target changed: $(stat -c '%s %a %U %Y' "$work/target")"
ls "$work"/missing-claim* >/dev/null 2>&1 && fail "a planted symlink was followed: $(ls "$work"/missing-claim*)"
echo "locks: two users' ktuned take turns measuring, share claims, and refuse planted symlinks"
