#!/usr/bin/env bash
# Installs ktune's build and test dependencies from Debian 12 packages, and the charting library
# that `ktune report` embeds from the npm registry (`npm ci` in report/, the version pinned in
# report/package-lock.json). Idempotent: packages already present are not touched, apt is not
# called when nothing is missing, and npm is not called when report/node_modules already holds
# that lock file's packages.
set -euo pipefail

packages=(
  g++ make cmake pkg-config
  libboost-dev          # Asio (header-only)
  libsqlite3-dev sqlite3
  libcli11-dev
  catch2                # v2.13 single header
  nlohmann-json3-dev
  libtomlplusplus-dev
  libmuparser-dev
  libxxhash-dev         # content hashes (XXH3-128)
  libpugixml-dev        # JUnit XML reports (tableio/junit.hpp)
  zlib1g-dev            # gzip-compressed recorded spaces (ktune replay)
  python3
  python3-pytest        # the Python client's tests (tests/client)
  python3-numpy         # the Kernel Tuner drop-in's tests (tests/client/test_kernel_tuner.py)
  python3-yaml          # the Kubernetes files check (tests/packaging/check_k8s.py)
  python3-venv python3-setuptools  # pip install of the Python client into a venv, offline
  help2man              # the man pages of ktune and ktuned
  universal-ctags       # scripts/long-functions.py (a lint test)
  dpkg-dev lintian      # `make package` (dpkg-shlibdeps) and its check in tests/packaging
  mmdebstrap zstd       # the clean Debian root the packages are installed in (tests/packaging)
  chromium              # renders `ktune report` pages headless in tests/report
  clang libclang-rt-14-dev  # libFuzzer targets (tests/fuzz, make fuzz-smoke)
  slurmctld slurmd slurm-client munge  # the one-node Slurm of tests/integration (scripts/slurm-local.sh)
)
# npm installs the report's charting library; Debian's npm only when none is on PATH (a Node.js
# installed another way brings its own).
if ! command -v npm >/dev/null 2>&1; then
  packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ktune: missing Debian packages: ${missing[*]}" >&2
    echo "run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "ktune: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# report/node_modules: `npm ci` reinstalls it exactly as package-lock.json pins it; a stamp of
# the lock file's hash, written after a successful install, says it is current.
report_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/report"
lock_hash="$(sha256sum "$report_dir/package-lock.json" | cut -d' ' -f1)"
stamp="$report_dir/node_modules/.ktune-lock.sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_hash" ] &&
   [ -f "$report_dir/node_modules/chart.js/dist/chart.umd.min.js" ]; then
  exit 0
fi
echo "ktune: installing report/node_modules (npm ci)" >&2
(cd "$report_dir" && npm ci --no-audit --no-fund --loglevel=error)
echo "$lock_hash" > "$stamp"
