#!/usr/bin/env bash
# ktune GPU bundle: builds here (release, CUDA backend on) and writes one folder that runs on a
# machine with nothing but an NVIDIA driver, CUDA 13's nvrtc and glibc >= 2.34 (docs/gpu.md):
#
#   bin/     ktuned, ktune, ktune-worker, the [gpu] test binaries (test_cuda, test_worker,
#            test_integration) and runtime_lookup_c (examples/runtime_lookup, built here)
#   lib/     libktune_client and every shared library those load that is not glibc, libstdc++,
#            libgcc_s or libz; the binaries find it through their RPATH $ORIGIN/../lib
#   share/ktune/  the shipped kernel families and the documented ktuned.toml
#   src/     what the test binaries read from the source tree: kernels_src, tests/faults,
#            tests/kernels, configs (KTUNE_TEST_SOURCE_DIR points there)
#   python/  the Python client (ktune_client)
#   gpu-check.sh  the one check to run on the GPU machine (scripts/gpu-check.sh)
#
# usage: scripts/gpu-pack.sh [--out DIR] [--no-build]
#   --out DIR    where the bundle goes (default: .gpu in the checkout, which git ignores)
#   --no-build   take the binaries of an existing build/release as they are
# Fails when the CUDA backend is off, when a binary needs a library it cannot carry, when any
# file names this checkout's or its build's absolute path, or when the bundle exceeds 48 MiB.
# Fails too when a binary needs a glibc newer than 2.34. The last line is one JSON object:
# {"bundle":DIR,"bytes":N,"libraries":[..],"glibc_max":"2.34","commit":".."}.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/release"
out="$root/.gpu"
do_build=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-pack: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
readonly k_max_bytes=$((48 << 20))
programs=(ktuned ktune ktune-worker)
tests=(test_cuda test_worker test_integration)

fail() { echo "gpu-pack: $*" >&2; exit 1; }

if [[ $do_build -eq 1 ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target "${programs[@]}" "${tests[@]}" \
    ktune_lookup_client_shared >/dev/null
fi
grep -q '^KTUNE_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
  fail "the CUDA backend is off in $build (no CUDA toolkit at configure time): nothing to prove on a GPU"
for b in "${programs[@]}" "${tests[@]}"; do
  [[ -x "$build/bin/$b" ]] || fail "$build/bin/$b is missing: build it (make release) or drop --no-build"
done

out="$(mkdir -p "$out" && cd "$out" && pwd)"
case "$out" in "$root"|"$build"|/) fail "refusing to write the bundle over $out" ;; esac
rm -rf "${out:?}"/{bin,lib,share,src,python,gpu-check.sh,MANIFEST}
mkdir -p "$out"/{bin,lib,share/ktune,src/tests,python}

for b in "${programs[@]}" "${tests[@]}"; do
  cp "$build/bin/$b" "$out/bin/"
  strip --strip-unneeded "$out/bin/$b"
done
cp -P "$build"/lib/libktune_client.so* "$out/lib/"
cc -O2 -o "$out/bin/runtime_lookup_c" "$root/examples/runtime_lookup/main.c" -I"$root/client/include" \
  -L"$build/lib" -lktune_client -Wl,--disable-new-dtags -Wl,-rpath,'$ORIGIN/../lib'

# Every library a bundled program loads, directly or through another library (ldd lists them
# all), that the target machine is not assumed to have, copied under its soname. The programs'
# DT_RPATH $ORIGIN/../lib also covers the libraries they load, so the copies need no RPATH.
allowed='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libz)\.so'
declare -A carried=()
for file in "$out"/bin/*; do
  while read -r soname _ path _; do
    [[ -n "$soname" && "$soname" != "linux-vdso.so.1" ]] || continue
    [[ "$soname" =~ $allowed ]] && continue
    [[ -n "${carried[$soname]:-}" || -e "$out/lib/$soname" ]] && continue
    [[ "$path" == /* ]] || fail "$(basename "$file") needs $soname, which is not found here"
    cp -L "$path" "$out/lib/$soname"
    carried[$soname]=1
  done < <(LD_LIBRARY_PATH= ldd "$file" 2>/dev/null | awk '/=>/ {print $1, $2, $3, $4}')
done

cp -rL "$root/kernels_src" "$out/share/ktune/kernels"
cp -L "$root/configs/ktuned.toml" "$out/share/ktune/ktuned.toml"
cp -rL "$root/kernels_src" "$out/src/kernels_src"
cp -rL "$root/configs" "$out/src/configs"
cp -rL "$root/tests/faults" "$root/tests/kernels" "$out/src/tests/"
cp -r "$root/client/python/ktune_client" "$out/python/"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/scripts/gpu-check.sh" "$out/gpu-check.sh"
chmod +x "$out/gpu-check.sh"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain 2>/dev/null | grep -qv '^??' && echo "+changes" || true)
printf 'ktune GPU bundle\ncommit %s%s\nbuilt %s on %s\n' "$commit" "$dirty" "$(date -u +%FT%TZ)" \
  "$(uname -m)" >"$out/MANIFEST"

# Nothing may name this machine's checkout or build: the bundle runs from anywhere.
if leaked=$(grep -rlF -e "$root/" -e "$build" "$out" 2>/dev/null) && [[ -n "$leaked" ]]; then
  fail "these files name $root or $build: $(echo $leaked | tr '\n' ' ')"
fi
# glibc >= 2.34 is all the target machine is promised: no symbol of a newer one.
glibc_max=$(for f in "$out"/bin/* "$out"/lib/*; do objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'; done |
  sed 's/GLIBC_//' | sort -V -u | tail -1)
[[ "$(printf '%s\n2.34\n' "$glibc_max" | sort -V | tail -1)" == "2.34" ]] ||
  fail "the binaries need glibc $glibc_max, newer than the 2.34 a GPU machine is promised"
bytes=$(du -sb "$out" | cut -f1)
[[ $bytes -le $k_max_bytes ]] || fail "the bundle is $((bytes >> 20)) MiB, over 48 MiB"
python3 - "$out" "$bytes" "$commit$dirty" "$glibc_max" "${!carried[@]}" <<'PY'
import json, sys
out, size, commit, glibc, *libs = sys.argv[1:]
print(json.dumps({"bundle": out, "bytes": int(size), "libraries": sorted(libs), "glibc_max": glibc,
                  "commit": commit}))
PY
