#!/usr/bin/env bash
# One winner rule end to end with the real binaries (ctest: test_winner): a store with declared
# ties and an incumbent, and every reader naming the winner the job named.
#
#  1. `work` has four configs V=4,1,2,3 (V passes over the data: V=1 is four times faster than
#     V=4); every config ties (tie_margin 1000, final_margin 1000). A first job with budget 1
#     measures V=4 alone (first in index order): it is the key's winner.
#  2. A second job remeasures all four: they tie, and the incumbent V=4 is kept, although V=1
#     has the lowest median.
#  3. `ktune job`, `ktune history`, `ktune report`, `ktune query`, `ktune export` and a sweep
#     (whose own job keeps the incumbent again, and whose comparison with the key's history says
#     the winner is the same) all name V=4.
#
#   tests/integration/winner.sh BIN_DIR
set -euo pipefail
bin="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/ktune-winner-test.XXXXXX")"
export KTUNE_NO_AUTOSTART=1
export KTUNE_HOME="$work/home"
cleanup() {
  "$bin/ktune" daemon stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

mkdir -p "$work/home" "$work/kernels/work"
cat >"$work/ktuned.toml" <<TOML
[measure]
min_samples = 5
max_samples = 50
max_time_s = 0.02
min_time_s = 0
warmup_ms = 1
flush_cache = false
final_margin = 1000
tie_margin = 1000
prune_factor = 0
TOML
cat >"$work/kernels/work/kernel.toml" <<'TOML'
[kernel]
name = "work"
language = "cpp"
source = "kernel.cpp"
entry = "work"
shape = ["N"]
dtypes = ["f32"]

[params]
V = [4, 1, 2, 3]

[[args]]
name = "X"
kind = "in"
count = "N"
init = "uniform"

[[args]]
name = "OUT"
kind = "out"
count = "1"

[[args]]
name = "N"
kind = "scalar"
value = "N"

[check]
reference = "default"
rtol = 1e-3
atol = 0.1

[default]
V = 1
TOML
cat >"$work/kernels/work/kernel.cpp" <<'CPP'
#include <cstdint>
using T = KTUNE_DTYPE;
extern "C" void work(void** args) {
  const T* x = static_cast<const T*>(args[0]);
  T* out = static_cast<T*>(args[1]);
  const std::int64_t n = *static_cast<const std::int64_t*>(args[2]);
  T total = T(0);
  for (int pass = 0; pass < V; ++pass) {
    const T* xp = x;
    asm volatile("" : "+r"(xp));
    for (std::int64_t i = 0; i < n; ++i) total += xp[i];
  }
  out[0] = total / V;
}
CPP
cat >"$work/sweep.toml" <<TOML
[sweep]
name = "winner"

[[kernel]]
name = "work"
[kernel.shapes]
N = [65536]
TOML
"$bin/ktune" daemon start --config "$work/ktuned.toml" --kernel-dir "$work/kernels" >/dev/null
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
v_of() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["V"])' "$1"; }

# 1. The incumbent: V=4 measured alone.
"$bin/ktune" --json tune work --shape N=65536 --budget 1 --wait >"$work/t1.json" || fail "first tune exited $?"
[[ "$(field "$work/t1.json" 'd["winner"]["config"]["V"]')" == 4 ]] || fail "the first job did not name V=4: $(cat "$work/t1.json")"

# 2. All four tie; the incumbent is kept.
"$bin/ktune" --json tune work --shape N=65536 --remeasure --wait >"$work/t2.json" || fail "second tune exited $?"
job2="$(field "$work/t2.json" 'd["job"]["id"]')"
"$bin/ktune" --json job "$job2" >"$work/j2.json" || fail "ktune job exited $?"
python3 - "$work/j2.json" <<'PY' || fail "the second job is not the case this test needs: $(cat "$work/j2.json")"
import json, sys
j = json.load(open(sys.argv[1]))
ok = [r for r in j["results"] if r["status"] == "ok"]
assert len(ok) == 4 and all(r["tied"] for r in ok), ok
fastest = min(ok, key=lambda r: r["median_ms"])
assert fastest["config"]["V"] == 1, fastest  # the rule without the incumbent would name V=1
assert j["winner"]["config"]["V"] == 4, j["winner"]
PY

# 3. Every reader.
"$bin/ktune" --json history work --shape N=65536 >"$work/h.json" || fail "ktune history exited $?"
[[ "$(field "$work/h.json" '[r["config"]["V"] for r in d["runs"]]')" == "[4, 4]" ]] || fail "history names another winner: $(cat "$work/h.json")"
"$bin/ktune" report "$job2" -o "$work/r.html" >/dev/null || fail "ktune report exited $?"
python3 - "$work/r.html" <<'PY' || fail "the report names another winner"
import json, re, sys
html = open(sys.argv[1]).read()
data = json.loads(re.search(r'<script type="application/json" id="ktune-data">(.*?)</script>', html, re.S).group(1))
assert data["jobs"][0]["winner"]["config"]["V"] == 4, data["jobs"][0]["winner"]
PY
"$bin/ktune" --json query work --shape N=65536 >"$work/q.json" || fail "ktune query exited $?"
[[ "$(field "$work/q.json" 'd["config"]["V"]')" == 4 ]] || fail "query names another winner: $(cat "$work/q.json")"
"$bin/ktune" export --format json -o "$work/e.json" >/dev/null || fail "ktune export exited $?"
[[ "$(field "$work/e.json" '[r["config"]["V"] for r in d["rows"]]')" == "[4]" ]] || fail "export names another winner: $(cat "$work/e.json")"
"$bin/ktune" --json sweep "$work/sweep.toml" --remeasure --baseline last-good --out "$work/s.table.json" >"$work/s.json" \
  || fail "the sweep exited $?: $(cat "$work/s.json")"
python3 - "$work/s.json" "$work/s.table.json" <<'PY' || fail "the sweep names another winner: $(cat "$work/s.json")"
import json, sys
s = json.load(open(sys.argv[1]))
key = s["comparison"]["keys"][0]
assert key["winner_changed"] is False, key
t = json.load(open(sys.argv[2]))
assert [r["config"]["V"] for r in t["rows"]] == [4], t["rows"]
PY
"$bin/ktune" --json history work --shape N=65536 >"$work/h3.json" || fail "ktune history exited $?"
[[ "$(field "$work/h3.json" '[r["config"]["V"] for r in d["runs"]]')" == "[4, 4, 4]" ]] || fail "history after the sweep: $(cat "$work/h3.json")"
echo "one winner rule: job, history, report, query, export and sweep all name the incumbent V=4 among the ties"
