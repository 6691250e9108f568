#!/usr/bin/env bash
# Installs ktune's build and test dependencies from Debian 12 packages. Idempotent: packages
# already present are not touched and apt is not called when nothing is missing.
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
  zlib1g-dev            # gzip-compressed recorded spaces (ktune replay)
  python3
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "ktune: missing Debian packages: ${missing[*]}" >&2
  echo "run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "ktune: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
