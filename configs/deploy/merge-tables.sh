#!/usr/bin/env bash
# The merge step of a sharded sweep (Slurm or Kubernetes): imports every shard's table into one
# private ktuned (policy faster: the fastest measurement of a key wins), exports the merged table
# and, when a baseline exists, compares with it by `ktune compare` (markdown on stdout, JUnit in
# OUT_DIR/compare.xml) and fails on a regression (exit 1) or an error (exit 2).
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
  # The one comparison rule (ktune compare): exit 1 on a regression, 2 on an error.
  ktune compare "$out/table.json" "$baseline" --junit "$out/compare.xml"
fi
