#!/usr/bin/env bash
# The merge step of a sharded sweep (Slurm or Kubernetes): imports every shard's table into one
# private ktuned (policy faster: the fastest measurement of a key wins), exports the merged table
# and, when a baseline exists, fails (exit 1) on a regression.
#
#   configs/deploy/merge-tables.sh OUT_DIR SHARDS [BASELINE]
set -euo pipefail
out="${1:?usage: merge-tables.sh OUT_DIR SHARDS [BASELINE]}"
shards="${2:?usage: merge-tables.sh OUT_DIR SHARDS [BASELINE]}"
baseline="${3:-}"

export KTUNE_HOME="$(mktemp -d "${TMPDIR:-/tmp}/ktune-merge.XXXXXX")"
trap 'ktune daemon stop >/dev/null 2>&1 || true; rm -rf "$KTUNE_HOME"' EXIT
ktune daemon start
for i in $(seq 1 "$shards"); do
  ktune import "$out/shard-$i.json" --policy faster
done
ktune export --format json -o "$out/table.json"
ktune export --format cpp-header -o "$out/ktune_table.hpp"
echo "merged $shards shard(s) into $out/table.json"
if [[ -n "$baseline" ]]; then
  python3 - "$out/table.json" "$baseline" <<'PY'
import json, sys
current = {(r["kernel"], r["shape"], r["dtype"], r["fingerprint"]): r for r in json.load(open(sys.argv[1]))["rows"]}
base = {(r["kernel"], r["shape"], r["dtype"], r["fingerprint"]): r for r in json.load(open(sys.argv[2]))["rows"]}
worse = [(k, current[k]["median_ms"] / base[k]["median_ms"]) for k in current.keys() & base.keys()
         if base[k]["median_ms"] > 0 and current[k]["median_ms"] > 1.05 * base[k]["median_ms"]]
for key, ratio in sorted(worse):
    print("slower than the baseline by %.1f%%: %s" % ((ratio - 1) * 100, " ".join(key[:3])))
sys.exit(1 if worse else 0)
PY
fi
