#!/usr/bin/env bash
# install_and_consume.sh BUILD_DIR SOURCE_DIR WORK_DIR [CONFIG] [SANITIZE]
# Installs the build into WORK_DIR/prefix, moves the tree to WORK_DIR/moved (an install is
# relocatable) and uses it from there, with the working directory outside the source tree and
# nothing pointing into it:
#   - the files a user runs or reads are installed (share/ktune, deploy, docs, units, completion)
#   - no build or source path is compiled into ktuned or libktune_client.so
#   - ktuned starts with no config file and loads the shipped kernel families
#   - examples/runtime_lookup (copied out of the sources) builds with find_package(ktune) and
#     with pkg-config, and answers from a ktuned started from the moved prefix
#   - the installed Python client (lib/python3/dist-packages) looks up the same winner
#   - the README's install line of the Python client works offline with every python3 here (the
#     one on PATH and Debian's /usr/bin/python3), in a venv of its own, with and without build
#     isolation, and leaves nothing in the source directory
set -euo pipefail
build="$1" src="$2" work="$3" config="${4:-}" sanitize="${5:-OFF}"

fail() { echo "install_and_consume: $*" >&2; exit 1; }
step() { echo "--- $*"; }

rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" ${config:+--config "$config"} >/dev/null
mv "$work/prefix" "$work/moved"
p="$work/moved"

step "installed files"
libdir=$(cd "$p" && find lib* -path '*/pkgconfig/ktune.pc' | head -1 | xargs dirname | xargs dirname)
[ -n "$libdir" ] || fail "no pkgconfig/ktune.pc installed"
for f in bin/ktune bin/ktuned bin/ktune-worker include/ktune/client.h include/ktune/client.hpp \
         "$libdir/pkgconfig/ktune.pc" "$libdir/cmake/ktune/ktuneConfig.cmake" \
         share/ktune/ktuned.toml share/ktune/kernels/gemm/kernel.toml \
         share/ktune/deploy/Dockerfile \
         share/ktune/deploy/k8s-sweep.yaml share/ktune/deploy/k8s-merge.yaml \
         share/ktune/deploy/ktuned.service share/ktune/deploy/ktuned.socket \
         lib/systemd/user/ktuned.service lib/systemd/user/ktuned.socket \
         lib/python3/dist-packages/ktune_client/__init__.py share/ktune/sweeps/cpu.toml \
         share/doc/ktune/README.md share/doc/ktune/protocol.md share/doc/ktune/deploy.md \
         share/bash-completion/completions/ktune share/zsh/vendor-completions/_ktune \
         share/fish/vendor_completions.d/ktune.fish \
         share/man/man1/ktune.1.gz share/man/man1/ktune-tune.1.gz share/man/man1/ktune-daemon.1.gz; do
  [ -e "$p/$f" ] || fail "cmake --install did not install $f"
done
if command -v help2man >/dev/null; then
  for f in share/man/man1/ktuned.1.gz share/man/man1/ktune-worker.1.gz; do
    [ -e "$p/$f" ] || fail "cmake --install did not install $f"
  done
fi
grep -q '^prefix=${pcfiledir}/' "$p/$libdir/pkgconfig/ktune.pc" || fail "ktune.pc does not use \${pcfiledir}"
grep -q "ExecStart=.*/ktuned$" "$p/share/ktune/deploy/ktuned.service" ||
  fail "ktuned.service passes options ktuned does not need"

step "no source or build path compiled in"
for f in bin/ktuned "$libdir/libktune_client.so"; do
  for dir in "$src" "$build"; do
    if grep -q --binary-files=text -F "$dir/" "$(readlink -f "$p/$f")"; then
      fail "$f contains the path $dir"
    fi
  done
done

# Everything below runs from the work directory with a private instance.
cd "$work"
export KTUNE_HOME="$work/home" PATH="$p/bin:$PATH"
unset KTUNE_KERNEL_DIRS KTUNE_DAEMON
mkdir -p "$KTUNE_HOME"
trap 'ktune daemon stop >/dev/null 2>&1 || true' EXIT

step "ktuned from the moved prefix, no config file"
ktune daemon start
ktune --json kernels > kernels.json
python3 - "$p" <<'PY'
import json, sys
k = json.load(open("kernels.json"))
names = [x["name"] for x in k["kernels"]]
assert "gemm" in names, names
PY
ktune daemon stop

step "tune with short measurements, then the runtime programs"
cat > "$work/tiny.toml" <<'TOML'
[measure]
min_samples = 3
max_samples = 10
max_time_s = 0.02
min_time_s = 0
warmup_ms = 1
flush_cache = false
TOML
ktune daemon start --config "$work/tiny.toml"
ktune tune gemm --shape M=32,N=32,K=32 --wait

cp -r "$src/examples/runtime_lookup" "$work/example-src"
example_args=(-DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_TYPE=Release)
link_flags=()
if [ "$sanitize" = ON ]; then
  example_args+=("-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
  link_flags+=(-fsanitize=address,undefined)
fi
cmake -S "$work/example-src" -B "$work/example" "${example_args[@]}" >/dev/null
cmake --build "$work/example" >/dev/null
for program in runtime_lookup_c runtime_lookup_cpp; do
  out=$("$work/example/$program" gemm M=32,N=32,K=32)
  echo "$program: $out"
  [[ "$out" =~ rung=exact\ source=(map|daemon) ]] || fail "$program: expected the tuned winner"
done
export PKG_CONFIG_PATH="$p/$libdir/pkgconfig"
cc "$work/example-src/main.c" -o "$work/runtime_lookup_pc" $(pkg-config --cflags --libs ktune) \
   -Wl,-rpath,"$(pkg-config --variable=libdir ktune)" "${link_flags[@]}"
out=$("$work/runtime_lookup_pc" gemm M=32,N=32,K=32)
echo "runtime_lookup (pkg-config): $out"
[[ "$out" =~ rung=exact\ source=(map|daemon) ]] || fail "the pkg-config build: expected the tuned winner"

step "the installed Python client"
(cd / && PYTHONPATH="$p/lib/python3/dist-packages" python3 - <<'PY'
import ktune_client
answer = ktune_client.Client(timeout=2.0).lookup("gemm", "M=32,N=32,K=32")
print("python (installed):", answer)
assert answer.rung == "exact" and answer.source in ("map", "daemon"), answer
PY
)

step "the README's pip install of the Python client, offline, with each python3"
pythons=("$(command -v python3)")
[ -x /usr/bin/python3 ] && [ "$(readlink -f /usr/bin/python3)" != "$(readlink -f "${pythons[0]}")" ] &&
  pythons+=(/usr/bin/python3)
n=0
for python in "${pythons[@]}"; do
  for isolation in --no-build-isolation ""; do
    n=$((n + 1))
    rm -rf "$work/python-src"
    cp -r "$src/client/python" "$work/python-src"
    find "$work/python-src" -name __pycache__ -prune -exec rm -rf {} +
    before=$(cd "$work/python-src" && find . | sort)
    "$python" -m venv "$work/venv$n"
    "$work/venv$n/bin/pip" install --quiet --no-index $isolation "$work/python-src" ||
      fail "pip install ${isolation:-(isolated)} ./client/python failed with $python"
    after=$(cd "$work/python-src" && find . | sort)
    [ "$before" = "$after" ] ||
      fail "pip install with $python left files in the source tree: $(comm -13 <(echo "$before") <(echo "$after"))"
    (cd / && "$work/venv$n/bin/python" - "$python ${isolation:-(isolated)}" <<'PY'
import sys
import ktune_client
answer = ktune_client.Client(timeout=2.0).lookup("gemm", "M=32,N=32,K=32")
print("python (pip,", sys.argv[1] + "):", answer.rung, answer.source)
assert answer.rung == "exact" and answer.source in ("map", "daemon"), answer
try:
    ktune_client.Client(socket_path="/nonexistent.sock", db_path="/nonexistent.db",
                        kernel_dirs=[]).lookup("no_such_kernel", "M=1")
except LookupError:  # the builtin catches the client's
    pass
PY
    )
  done
done
ktune daemon stop

step "the last published winner table without a daemon"
out=$("$work/example/runtime_lookup_c" gemm M=32,N=32,K=32)
[[ "$out" == *"rung=exact source=map"* ]] || fail "runtime_lookup_c without a daemon, from the table: $out"
(cd / && PYTHONPATH="$p/lib/python3/dist-packages" python3 - <<'PY'
import ktune_client
answer = ktune_client.Client(timeout=2.0).lookup("gemm", "M=32,N=32,K=32")
assert (answer.rung, answer.source) == ("exact", "map"), answer
PY
)
rm "$KTUNE_HOME/ktuned.table"

step "the shipped [default] without a daemon or its table"
out=$("$work/example/runtime_lookup_c" gemm M=64,N=64,K=64)
[[ "$out" == *"rung=exact source=database"* || "$out" == *"rung=default"* ]] ||
  fail "runtime_lookup_c without a daemon: $out"
rm -rf "$KTUNE_HOME"
out=$("$work/example/runtime_lookup_c" gemm M=64,N=64,K=64)
[[ "$out" == *"rung=default source=spec"* ]] || fail "no shipped [default] found: $out"
echo "install_and_consume: ok"
