#!/usr/bin/env bash
# clean_root.sh DEB_DIR SOURCE_DIR WORK_DIR CACHE_DIR
# The Debian packages of DEB_DIR (check_deb.sh builds them) on a machine that has nothing of
# ktune: a Debian 12 root made by mmdebstrap from Debian's packages alone, holding what a user of
# the library has (g++, cmake, make, pkg-config, python3) and the packages' own run-time
# dependencies, but none of ktune's -dev build dependencies (libsqlite3-dev, libtomlplusplus-dev,
# ...) and no source tree. In it, as root in a chroot:
#   - dpkg -i of the four packages succeeds: their Depends are all met there
#   - examples/runtime_lookup (copied in alone) builds with find_package(ktune) and with
#     pkg-config, and its programs answer from the shipped [default] in /usr/share/ktune
#   - Debian's python3 imports ktune_client from /usr/lib/python3/dist-packages (byte-compiled
#     by the package's postinst) and answers the same way
#   - ktune check-kernel compiles a shipped family with the g++ the ktune package depends on
#   - the packages remove cleanly (dpkg -r), leaving nothing behind in /usr
# The base root is made once and kept as CACHE_DIR/bookworm-<key>.tar.zst (key: the package list);
# later runs only unpack it, so only the first run needs the Debian mirror (packages already in
# /var/cache/apt/archives are taken from there). Exit 77 (skipped) with the reason when not root
# or mmdebstrap is missing (scripts/install-deps.sh installs it).
set -euo pipefail
debs="$1" src="$2" work="$3" cache="$4"

fail() { echo "clean_root: $*" >&2; exit 1; }
step() { echo "--- $*"; }
skip() { echo "clean_root: $*; skipped"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "making and entering a root (chroot) needs root"
command -v mmdebstrap >/dev/null || skip "mmdebstrap not installed"
command -v zstd >/dev/null || skip "zstd not installed"
packages=("$debs"/ktune_*_*.deb "$debs"/libktune-client0_*_*.deb "$debs"/libktune-client-dev_*_*.deb
          "$debs"/python3-ktune-client_*_all.deb)
for p in "${packages[@]}"; do [ -f "$p" ] || fail "no package $p (check_deb.sh builds them)"; done

# What the root holds: a user's build tools and the packages' run-time dependencies (their
# Depends, names only, without ktune's own packages).
include=$( (echo g++ cmake make pkg-config python3 | tr ' ' '\n'
           for p in "${packages[@]}"; do dpkg-deb -f "$p" Depends | tr ',' '\n'; done) |
          sed -E 's/\(.*\)//; s/\|.*//; s/ //g' | grep -v '^$' | grep -v -e '^libktune' -e '^python3-ktune' |
          sort -u | paste -sd, -)
key=$(printf '%s' "bookworm minbase $include" | sha256sum | cut -c1-16)
base="$cache/bookworm-$key.tar.zst"

rm -rf "$work"
mkdir -p "$work" "$cache"
if [ -f "$base" ]; then
  step "base root from the cache ($(basename "$base"))"
else
  step "making the base root (mmdebstrap bookworm minbase + $include)"
  sources=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && sources+=("$f")
  done
  start=$(date +%s)
  mmdebstrap --mode=root --variant=minbase --include="$include" \
    --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
    --setup-hook='cp -al /var/cache/apt/archives/*.deb "$1/var/cache/apt/archives/" 2>/dev/null || true' \
    bookworm "$work/base.tar" "${sources[@]}" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -40 "$work/mmdebstrap.log"; fail "mmdebstrap failed"; }
  zstd -q -T0 --rm "$work/base.tar" -o "$base.tmp" && mv "$base.tmp" "$base"
  echo "base root made in $(( $(date +%s) - start )) s: $(du -h "$base" | cut -f1)"
  # Older bases of other package lists are of no use any more.
  find "$cache" -name 'bookworm-*.tar.zst' ! -name "$(basename "$base")" -delete
fi

root="$work/root"
mkdir -p "$root"
start=$(date +%s)
zstd -dc "$base" | tar -x -C "$root" --numeric-owner
echo "unpacked in $(( $(date +%s) - start )) s"
# /dev comes from the tarball (mmdebstrap writes the device nodes); /proc is mounted, and the root
# is removed only once it is unmounted again.
cleanup() {
  if mountpoint -q "$root/proc"; then umount "$root/proc" || umount -l "$root/proc"; fi
  if mountpoint -q "$root/proc"; then echo "clean_root: $root/proc still mounted; $root kept" >&2
  else rm -rf "$root"; fi
}
trap cleanup EXIT
mount -t proc proc "$root/proc"
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"; }

step "the root has none of ktune's build dependencies"
for dev in libsqlite3-dev libtomlplusplus-dev libboost-dev nlohmann-json3-dev; do
  if in_root dpkg -s "$dev" >/dev/null 2>&1; then fail "$dev is installed in the clean root"; fi
done

step "dpkg -i of the packages"
mkdir -p "$root/tmp/debs"
cp "${packages[@]}" "$root/tmp/debs/"
# The names inside the root, spelled out: a glob here would be expanded against this machine's /tmp.
in_root dpkg -i $(for p in "${packages[@]}"; do printf '/tmp/debs/%s ' "$(basename "$p")"; done) \
  >"$work/dpkg.log" 2>&1 ||
  { cat "$work/dpkg.log"; fail "dpkg -i failed"; }
in_root dpkg --audit || fail "dpkg --audit reports broken packages"
multiarch=$(in_root dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || in_root gcc -print-multiarch)
[ -e "$root/usr/lib/$multiarch/libktune_client.so.0" ] || fail "libktune_client.so.0 not in /usr/lib/$multiarch"

step "examples/runtime_lookup with find_package(ktune), no -dev package but ktune's"
cp -r "$src/examples/runtime_lookup" "$root/tmp/example"
in_root cmake -S /tmp/example -B /tmp/example-build -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log"; fail "find_package(ktune) configure failed"; }
in_root cmake --build /tmp/example-build >>"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log"; fail "the find_package build failed"; }
for program in runtime_lookup_c runtime_lookup_cpp; do
  out=$(in_root /tmp/example-build/$program gemm M=64,N=64,K=64)
  echo "$program: $out"
  [[ "$out" == *"rung=default source=spec"* ]] || fail "$program: expected the shipped [default]"
done

step "examples/runtime_lookup with pkg-config"
in_root sh -c 'cc /tmp/example/main.c -o /tmp/runtime_lookup_pc $(pkg-config --cflags --libs ktune)' ||
  fail "the pkg-config build failed"
out=$(in_root /tmp/runtime_lookup_pc gemm M=64,N=64,K=64)
echo "runtime_lookup (pkg-config): $out"
[[ "$out" == *"rung=default source=spec"* ]] || fail "the pkg-config build: expected the shipped [default]"

step "import ktune_client with Debian's python3"
in_root /usr/bin/python3 -c 'import ktune_client, sys; print(ktune_client.__file__); sys.exit(0)' |
  tee "$work/python.txt"
grep -qx "/usr/lib/python3/dist-packages/ktune_client/__init__.py" "$work/python.txt" ||
  fail "ktune_client was not imported from /usr/lib/python3/dist-packages"
ls "$root"/usr/lib/python3/dist-packages/ktune_client/__pycache__/*.pyc >/dev/null 2>&1 ||
  fail "postinst did not byte-compile ktune_client"
out=$(in_root /usr/bin/python3 -c '
import ktune_client
answer = ktune_client.Client(socket_path="/tmp/none.sock", db_path="/tmp/none.db").lookup("gemm", "M=64,N=64,K=64")
print(answer.rung, answer.source)')
echo "python: $out"
[ "$out" = "default spec" ] || fail "python: expected the shipped [default], got '$out'"

step "ktune from the package"
in_root ktune --version
in_root sh -c 'cd /tmp && TMPDIR=/tmp ktune check-kernel /usr/share/ktune/kernels/gemm' >"$work/check.log" 2>&1 ||
  { cat "$work/check.log"; fail "ktune check-kernel failed"; }
tail -1 "$work/check.log"

step "dpkg -r leaves nothing behind"
in_root dpkg -r python3-ktune-client libktune-client-dev libktune-client0 ktune >"$work/remove.log" 2>&1 ||
  { cat "$work/remove.log"; fail "dpkg -r failed"; }
left=$(cd "$root" && find usr -path '*ktune*' ! -path 'usr/share/doc/*' 2>/dev/null | head -5)
[ -z "$left" ] || fail "left behind after dpkg -r: $left"
echo "clean_root: ok"
