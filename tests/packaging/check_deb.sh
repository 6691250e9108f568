#!/usr/bin/env bash
# check_deb.sh BUILD_DIR WORK_DIR: builds the Debian packages with CPack (as `make package`
# does) into WORK_DIR and checks them: control fields and dependencies (dpkg-deb --info), the
# files a user needs in the package Debian puts them in (dpkg-deb --contents): the library in the
# multiarch directory, the development files in the -dev package, the Python client where
# Debian's python3 imports it, a man page per command group; and lintian with neither errors nor
# warnings (the overrides the packages ship say why a tag does not apply).
# Exit 77 (skipped) when dpkg-deb or lintian is missing (scripts/install-deps.sh installs them).
set -euo pipefail
build="$1" work="$2"
fail() { echo "check_deb: $*" >&2; exit 1; }
for tool in dpkg-deb lintian; do
  command -v "$tool" >/dev/null || { echo "check_deb: $tool not installed; skipped"; exit 77; }
done

rm -rf "$work"
mkdir -p "$work"
cpack --config "$build/CPackConfig.cmake" -B "$work" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
arch=$(dpkg --print-architecture)
multiarch=$(gcc -print-multiarch)
one() {  # the one package file named $1_<version>_<arch>.deb
  local found=("$work"/"$1"_*_"$2".deb)
  [ ${#found[@]} -eq 1 ] && [ -f "${found[0]}" ] || fail "expected one $1_<version>_$2.deb in $work"
  echo "${found[0]}"
}
ktune=$(one ktune "$arch")
lib=$(one libktune-client0 "$arch")
dev=$(one libktune-client-dev "$arch")
python=$(one python3-ktune-client all)
[ "$(ls "$work"/*.deb | wc -l)" -eq 4 ] || fail "expected four packages: $(ls "$work"/*.deb)"
for deb in "$ktune" "$lib" "$dev" "$python"; do echo "package: $(basename "$deb")"; done

fields() {  # fields DEB "regex" ...: every regex matches a line of dpkg-deb --info
  local deb="$1" info
  shift
  info=$(dpkg-deb --info "$deb")
  for field in "$@"; do
    grep -Eq "^ ?$field" <<<"$info" || fail "$(basename "$deb"): no '$field' in
$info"
  done
}
version=$(dpkg-deb -f "$lib" Version)
fields "$ktune" "Package: ktune$" "Architecture: $arch" "Section: devel" "Depends:.*libsqlite3-0" \
       "Depends:.*libtomlplusplus3" "Depends:.*g\+\+" "Maintainer: " "Description: "
fields "$lib" "Package: libktune-client0$" "Section: libs" "Depends:.*libsqlite3-0"
fields "$dev" "Package: libktune-client-dev$" "Section: libdevel" \
       "Depends: libktune-client0 \(= $version\)$" "Suggests:.*libsqlite3-dev.*libtomlplusplus-dev"
fields "$python" "Package: python3-ktune-client$" "Architecture: all" "Section: python" "Depends: python3"
dpkg-deb -I "$lib" shlibs | grep -qx "libktune_client 0 libktune-client0 (>= $version)" ||
  fail "libktune-client0: no shlibs line for libktune_client.so.0"
dpkg-deb -I "$lib" triggers | grep -qx "activate-noawait ldconfig" || fail "libktune-client0: no ldconfig trigger"
dpkg-deb -I "$python" postinst | grep -q "py3compile -p python3-ktune-client" ||
  fail "python3-ktune-client: postinst does not byte-compile"

contents() { dpkg-deb --contents "$1" | awk '{print $6}'; }
has() {  # has DEB FILE...: each FILE is in DEB
  local deb="$1" list
  shift
  list=$(contents "$deb")
  for f in "$@"; do grep -qxF "$f" <<<"$list" || fail "$(basename "$deb"): $f missing"; done
}
lacks() {  # lacks DEB REGEX: no file of DEB matches
  if contents "$1" | grep -Eq "$2"; then fail "$(basename "$1"): has $(contents "$1" | grep -E "$2" | head -3)"; fi
}
has "$ktune" ./usr/bin/ktune ./usr/bin/ktuned ./usr/bin/ktune-worker \
     ./usr/share/ktune/ktuned.toml ./usr/share/ktune/kernels/gemm/kernel.toml \
     ./usr/share/ktune/sweeps/cpu.toml ./usr/share/ktune/deploy/k8s-sweep.yaml \
     ./usr/lib/systemd/user/ktuned.service ./usr/lib/systemd/user/ktuned.socket \
     ./usr/share/doc/ktune/copyright ./usr/share/doc/ktune/changelog.gz ./usr/share/doc/ktune/README.md \
     ./usr/share/bash-completion/completions/ktune ./usr/share/zsh/vendor-completions/_ktune \
     ./usr/share/fish/vendor_completions.d/ktune.fish \
     ./usr/share/man/man1/ktune.1.gz ./usr/share/man/man1/ktuned.1.gz ./usr/share/man/man1/ktune-worker.1.gz
# A man page per command group: every command ktune --help lists.
commands=$("$build/bin/ktune" --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF {print $1}')
[ -n "$commands" ] || fail "no commands in ktune --help"
for c in $commands; do has "$ktune" "./usr/share/man/man1/ktune-$c.1.gz"; done
lacks "$ktune" '^\./usr/(include|lib/[^/]*-linux-gnu|lib/python3)/|\.so(\.|$)|\.a$'
has "$lib" "./usr/lib/$multiarch/libktune_client.so.0" "./usr/lib/$multiarch/libktune_client.so.$version" \
    ./usr/share/doc/libktune-client0/copyright
lacks "$lib" '^\./usr/(include|bin)/|libktune_client\.so$|\.a$|cmake|pkgconfig'
has "$dev" ./usr/include/ktune/client.h ./usr/include/ktune/client.hpp \
    "./usr/lib/$multiarch/libktune_client.so" "./usr/lib/$multiarch/libktune_client.a" \
    "./usr/lib/$multiarch/cmake/ktune/ktuneConfig.cmake" "./usr/lib/$multiarch/pkgconfig/ktune.pc" \
    ./usr/share/doc/libktune-client-dev/copyright
lacks "$dev" 'libktune_client\.so\.'
has "$python" ./usr/lib/python3/dist-packages/ktune_client/__init__.py \
    ./usr/share/doc/python3-ktune-client/copyright
lacks "$python" '__pycache__|\.pyc$'
for deb in "$ktune" "$lib" "$dev" "$python"; do
  if contents "$deb" | grep -q "^./usr/local"; then fail "$(basename "$deb"): files under /usr/local"; fi
done
dpkg-deb --fsys-tarfile "$ktune" | tar -xO ./usr/lib/systemd/user/ktuned.service |
  grep -qx "ExecStart=/usr/bin/ktuned" || fail "ktuned.service does not run /usr/bin/ktuned"

# lintian: errors and warnings fail; overridden tags are listed with their reasons. Running as root
# needs --allow-root.
lintian_args=(--tag-display-limit 0 --show-overrides)
[ "$(id -u)" -eq 0 ] && lintian_args+=(--allow-root)
lintian "${lintian_args[@]}" "$ktune" "$lib" "$dev" "$python" >"$work/lintian.txt" 2>&1 || true
cat "$work/lintian.txt"
if grep -Eq "^(E|W): " "$work/lintian.txt"; then fail "lintian reported errors or warnings"; fi
echo "check_deb: ok"
