#!/usr/bin/env bash
# A nightly sweep across GPU nodes with a Slurm job array: every array task runs one shard of the
# sweep on its own node (its own ktuned, its own database), writes its table to shared storage,
# and a dependent job merges the shards into one table and compares it with the last good one.
#
#   sbatch --array=1-4 configs/deploy/slurm-sweep.sh configs/sweeps/nightly.toml /shared/ktune/2026-11-22
#   (the merge job is submitted by task 1 with afterok on the whole array)
# sbatch runs a copy of this script, so the merge script is found in the installed deploy
# directory (share/ktune/deploy of the ktune on PATH), or in $KTUNE_DEPLOY_DIR when set.
#
#SBATCH --job-name=ktune-sweep
#SBATCH --nodes=1
#SBATCH --gres=gpu:1
#SBATCH --exclusive
#SBATCH --time=04:00:00
#SBATCH --output=ktune-sweep-%A_%a.log
set -euo pipefail

sweep="${1:?usage: slurm-sweep.sh SWEEP_FILE OUT_DIR}"
out="${2:?usage: slurm-sweep.sh SWEEP_FILE OUT_DIR}"
index="${SLURM_ARRAY_TASK_ID:?run as an array job: sbatch --array=1-N}"
count="${SLURM_ARRAY_TASK_COUNT:?run as an array job: sbatch --array=1-N}"
mkdir -p "$out"
deploy_dir="${KTUNE_DEPLOY_DIR:-$(dirname "$(dirname "$(command -v ktune)")")/share/ktune/deploy}"

# One private ktuned per task: its state lives in node-local scratch, the table goes to $out.
export KTUNE_HOME="${TMPDIR:-/tmp}/ktune-$SLURM_JOB_ID-$index"
mkdir -p "$KTUNE_HOME"
trap 'ktune daemon stop >/dev/null 2>&1 || true' EXIT
ktune daemon start

if [[ "$index" == 1 ]]; then
  # The merge step runs once every shard succeeded.
  sbatch --dependency="afterok:${SLURM_ARRAY_JOB_ID}" --job-name=ktune-merge \
    --wrap="$deploy_dir/merge-tables.sh '$out' '$count'"
fi

ktune sweep "$sweep" --shard "$index/$count" --out "$out/shard-$index.json" \
  --junit "$out/shard-$index.xml"
