#!/usr/bin/env bash
# check_deb.sh BUILD_DIR WORK_DIR: builds the Debian package with CPack (as `make package`
# does) into WORK_DIR and checks it: control fields and dependencies (dpkg-deb --info), the
# files a user needs (dpkg-deb --contents), and lintian with no errors.
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
debs=("$work"/ktune_*_*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "expected one ktune_<version>_<arch>.deb in $work"
deb="${debs[0]}"
echo "package: $(basename "$deb")"

info=$(dpkg-deb --info "$deb")
for field in "Package: ktune" "Architecture: amd64" "Depends:.*libsqlite3" "Depends:.*libtomlplusplus3" \
             "Depends:.*g++" "Maintainer: " "Description: "; do
  grep -Eq "^ ?$field" <<<"$info" || fail "dpkg-deb --info: no '$field' in
$info"
done

contents=$(dpkg-deb --contents "$deb" | awk '{print $6}')
for f in ./usr/bin/ktune ./usr/bin/ktuned ./usr/bin/ktune-worker \
         ./usr/share/ktune/ktuned.toml ./usr/share/ktune/kernels/gemm/kernel.toml \
         ./usr/share/ktune/deploy/k8s-sweep.yaml ./usr/lib/systemd/user/ktuned.service \
         ./usr/lib/systemd/user/ktuned.socket ./usr/share/doc/ktune/copyright \
         ./usr/share/doc/ktune/changelog.gz ./usr/share/doc/ktune/README.md \
         ./usr/share/bash-completion/completions/ktune ./usr/share/zsh/vendor-completions/_ktune \
         ./usr/share/fish/vendor_completions.d/ktune.fish \
         ./usr/share/man/man1/ktune.1.gz ./usr/share/man/man1/ktuned.1.gz \
         ./usr/include/ktune/client.h; do
  grep -qxF "$f" <<<"$contents" || fail "dpkg-deb --contents: $f missing"
done
grep -q "^./usr/lib/.*libktune_client.so" <<<"$contents" || fail "libktune_client.so missing"
if grep -q "^./usr/local" <<<"$contents"; then fail "files under /usr/local"; fi
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/user/ktuned.service |
  grep -qx "ExecStart=/usr/bin/ktuned" || fail "ktuned.service does not run /usr/bin/ktuned"

# lintian: errors fail, warnings are listed. Running as root needs --allow-root.
lintian_args=(--no-tag-display-limit)
[ "$(id -u)" -eq 0 ] && lintian_args+=(--allow-root)
lintian "${lintian_args[@]}" "$deb" >"$work/lintian.txt" 2>&1 || true
cat "$work/lintian.txt"
if grep -q "^E: " "$work/lintian.txt"; then fail "lintian reported errors"; fi
echo "check_deb: ok"
