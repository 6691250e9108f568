#!/usr/bin/env python3
"""Lists the long functions of the tree and fails when there are too many.

The rule: every function and method definition in the C and C++ files git tracks (sources,
tests, benchmarks; .c .cc .cpp .h .hpp .cu), as universal-ctags sees it, counted from the line
ctags starts it at (its name) to its closing brace, lambdas inside it included. A Catch2
TEST_CASE is a macro, not a function, and is not counted (its SECTIONs are what split it).
CUDA's `__launch_bounds__(...)` is read as the attribute it is (ctags is told it is a macro
that expands to nothing), so a kernel declared `__global__ void __launch_bounds__(N) gemm(...)`
is counted as `gemm`, not as a function named `__launch_bounds__`.
A function of --lines lines or more (default 80) is long; more than --max long functions
(default 10) fail.

  scripts/long-functions.py                 list them, exit 1 when more than 10
  scripts/long-functions.py --lines 60 --max 40

Needs universal-ctags (Debian package universal-ctags, scripts/install-deps.sh).
"""
import argparse
import json
import os
import subprocess
import sys

EXTENSIONS = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu")


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    return [f for f in out if f.endswith(EXTENSIONS) and os.path.isfile(os.path.join(root, f))]


def functions(root, files):
    """(lines, path, first line, name) of every function ctags finds with an end line."""
    cmd = ["ctags", "--output-format=json", "--fields=+ne", "--kinds-C++=f", "--kinds-C=f",
           "--languages=C,C++", "--langmap=C++:+.cu", "-D", "__launch_bounds__(...)=",
           "-o", "-"] + files
    run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("long-functions: ctags failed: " + run.stderr.strip())
    found = []
    for line in run.stdout.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or "end" not in tag or tag["name"].startswith("__anon"):
            continue
        name = tag["name"] if "scope" not in tag else tag["scope"] + "::" + tag["name"]
        found.append((tag["end"] - tag["line"] + 1, tag["path"], tag["line"], name))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--lines", type=int, default=80, help="a function this long is long")
    parser.add_argument("--max", type=int, default=10, help="more long functions than this fail")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    try:
        subprocess.run(["ctags", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        sys.exit("long-functions: universal-ctags is not installed (apt-get install universal-ctags)")
    long_ones = sorted((f for f in functions(root, tracked_files(root)) if f[0] >= args.lines),
                       reverse=True)
    for lines, path, first, name in long_ones:
        print(f"{lines:5d}  {path}:{first}  {name}")
    verdict = "ok" if len(long_ones) <= args.max else "too many"
    print(f"{len(long_ones)} function(s) of {args.lines} lines or more (at most {args.max}): {verdict}")
    return 0 if len(long_ones) <= args.max else 1


if __name__ == "__main__":
    sys.exit(main())
