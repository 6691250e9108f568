#!/usr/bin/env bash
# The GPU bundle (scripts/gpu-pack.sh, docs/gpu.md) as the GPU machine gets it, checked here:
#   - packed from this build (--no-build), then copied to another directory, as the device
#     tool's carry does;
#   - every bundled program resolves every library it loads (ldd: directly or through another
#     library) with an empty LD_LIBRARY_PATH to glibc, libstdc++, libgcc_s, libz or the bundle's
#     own lib/, and nothing names this checkout or its build;
#   - the copy's gpu-check.sh --quick runs every step and exits 0, the GPU steps skipped with the
#     reason where there is no GPU (passed where there is one), and writes its summary.
# usage: gpu_bundle.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src="$1"
build="$2"
work="$3"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "gpu_bundle: $*" >&2; exit 1; }

pack_line=$("$src/scripts/gpu-pack.sh" --no-build --out "$work/packed" | tail -1)
echo "packed: $pack_line"
cp -r "$work/packed" "$work/elsewhere"
bundle="$work/elsewhere"
rm -rf "$work/packed"

allowed='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libz)\.so'
for file in "$bundle"/bin/*; do
  while read -r soname _ path _; do
    [[ "$soname" =~ $allowed || "$soname" == linux-vdso.so.1 ]] && continue
    [[ "$path" == "$bundle/lib/"* || "$path" == "$bundle/bin/../lib/"* ]] ||
      fail "$(basename "$file") loads $soname from '$path', not from the bundle's lib/"
  done < <(LD_LIBRARY_PATH= ldd "$file" | awk '/=>/ {print $1, $2, $3, $4}')
done
if grep -rlF -e "$src/" -e "$build/" "$bundle" >/dev/null; then
  fail "files in the bundle name $src or $build: $(grep -rlF -e "$src/" -e "$build/" "$bundle" | head -3)"
fi
bytes=$(du -sb "$bundle" | cut -f1)
((bytes <= 48 << 20)) || fail "the bundle is $bytes bytes, over 48 MiB"

out="$work/out"
(cd / && env -u KTUNE_HOME -u KTUNE_TEST_SOURCE_DIR -u KTUNE_TEST_BIN_DIR \
   LD_LIBRARY_PATH= "$bundle/gpu-check.sh" --quick --out "$out") >"$work/check.log" 2>&1 ||
  { cat "$work/check.log"; fail "gpu-check.sh --quick exited non-zero"; }
python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["ok"], s
assert set(s["steps"]) == {"env", "tests", "tune", "lookup", "measure", "ab"}, s["steps"].keys()
assert s["steps"]["env"]["status"] == "passed", s["steps"]["env"]
tests = s["steps"]["tests"]
assert tests["counts"]["passed"] + tests["counts"]["skipped"] > 0, tests
for name in ("tests", "tune", "lookup", "measure", "ab"):
    step = s["steps"][name]
    if s["gpu"]:
        assert step["status"] == "passed", (name, step)
    else:
        assert step["status"] == "skipped", (name, step)
        reason = step.get("reason") or "; ".join(step.get("skip_reasons", []))
        assert reason, (name, step)
print("gpu-check summary:", json.dumps({k: v["status"] for k, v in s["steps"].items()}), "gpu:", s["gpu"])
PY
