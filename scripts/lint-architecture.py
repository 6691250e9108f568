#!/usr/bin/env python3
"""Checks the rules of docs/ARCHITECTURE.md § Rules that a reader can check by reading the code.

  1. No include cycle among the project's headers.
  2. In daemon/, only session.{hpp,cpp} include daemon/session.hpp: services answer through the
     reply interface (daemon/reply.hpp), never through a Session.
  3. Only the store writer's callbacks write the store. In daemon/ a `Store&` that is not const
     appears only in the StoreWriter (daemon/store_writer.*), as the parameter of a write
     callback (`(Store& store)`), or of a write step one calls (WRITE_STEPS below); the Server
     hands its Store to the writer and `const Store&` to everyone else. A Store method that
     writes (every non-const method of db/store.hpp) is called in daemon/ only on `store`, a
     callback's parameter.
  4. No error code compared as a string (`.code == "`, `.code != "`) anywhere: codes are
     ErrorCode values (core/error_code.hpp); strings exist only where messages are encoded.
  5. Sizes: no daemon/ file over 800 lines; the dispatch (daemon/handlers.cpp) at most 300.
  6. No ';' in a Catch2 test name: catch_discover_tests splits a name there, and ctest then runs
     two halves that match no test and pass without running anything.

  scripts/lint-architecture.py                      every rule
  scripts/lint-architecture.py --rules cycles,session,codes,testnames

Exit 1 with one line per violation. ctest runs it (test lint_architecture) with the rules the
tree keeps today; a rule joins that list once the tree keeps it.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SOURCE_EXT = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu")
# Write steps: functions taking the writer's Store& that a write callback calls.
WRITE_STEPS = {"daemon/table_import.hpp", "daemon/table_import.cpp"}
MAX_DAEMON_LINES = 800
MAX_DISPATCH_LINES = 300
DISPATCH_FILE = "daemon/handlers.cpp"


def tracked():
    out = subprocess.run(["git", "-C", ROOT, "ls-files"], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    return [f for f in out if f.endswith(SOURCE_EXT) and os.path.isfile(os.path.join(ROOT, f))]


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def include_cycles(files):
    headers = {f for f in files if f.endswith((".h", ".hpp"))}
    graph = {}
    for h in headers:
        graph[h] = [inc for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', read(h), re.M)
                    if inc in headers]
    problems, state, stack = [], {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                problems.append("include cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for h in sorted(headers):
        if h not in state:
            visit(h)
    return problems


def session_includes(files):
    return [f"{f}: includes daemon/session.hpp (answer through daemon/client.hpp or daemon/reply.hpp)"
            for f in files
            if f.startswith("daemon/") and not os.path.basename(f).startswith("session.")
            and re.search(r'#\s*include\s+"daemon/session\.hpp"', read(f))]


def store_write_methods():
    """The public methods of db/store.hpp's Store that are not const (they write)."""
    text = strip_comments(read("db/store.hpp"))
    body = text[text.index("class Store"):]
    body = body[:body.index("private:")]
    methods = set()
    for decl in body.split(";"):
        m = re.search(r"\b(\w+)\s*\(", decl)
        if not m or decl.strip().startswith(("class", "enum", "struct", "using")):
            continue
        name = m.group(1)
        if re.search(r"\)\s*const\s*(\{|$)", decl.strip()) or name[0].isupper():
            continue
        if name in ("open", "operator", "set_busy_timeout", "set_write_check", "mode", "path"):
            continue
        methods.add(name)
    return methods


def store_writes(files):
    problems = []
    methods = store_write_methods()
    call = re.compile(r"(\b[\w.\->()*]+?)\s*(?:\.|->)\s*(" + "|".join(sorted(methods)) + r")\s*\(")
    for f in files:
        if not f.startswith("daemon/") or os.path.basename(f).startswith("store_writer."):
            continue
        text = strip_comments(read(f))
        for n, line in enumerate(text.split("\n"), 1):
            for m in re.finditer(r"(?<!const )\bStore\s*&", line):
                if f in WRITE_STEPS or re.search(r"\(\s*Store\s*&\s*store\s*\)", line):
                    continue
                problems.append(f"{f}:{n}: a Store& that is not const (only the writer writes)")
            for m in call.finditer(line):
                receiver = m.group(1).split("(")[-1].strip()
                if receiver != "store":
                    problems.append(f"{f}:{n}: {receiver}.{m.group(2)}() writes the store outside "
                                    "a store writer callback")
    return problems


def code_compares(files):
    problems = []
    for f in files:
        for n, line in enumerate(read(f).split("\n"), 1):
            if re.search(r'\.code\s*[!=]=\s*"', line):
                problems.append(f"{f}:{n}: an error code compared as a string (use ErrorCode)")
    return problems


def sizes(files):
    problems = []
    for f in files:
        if not f.startswith("daemon/"):
            continue
        lines = read(f).count("\n")
        limit = MAX_DISPATCH_LINES if f == DISPATCH_FILE else MAX_DAEMON_LINES
        if lines > limit:
            problems.append(f"{f}: {lines} lines (at most {limit})")
    return problems


def test_names(files):
    problems = []
    name = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
    for f in files:
        if not f.startswith("tests/"):
            continue
        text = read(f)
        for m in name.finditer(text):
            if ";" in m.group(1):
                n = text.count("\n", 0, m.start()) + 1
                problems.append(f"{f}:{n}: a ';' in a test name (ctest would run no test by it)")
    return problems


RULES = {"cycles": include_cycles, "session": session_includes, "store": store_writes,
         "codes": code_compares, "sizes": sizes, "testnames": test_names}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", default=",".join(RULES),
                        help="comma-separated: " + ", ".join(RULES) + " (default: all)")
    args = parser.parse_args()
    chosen = [r for r in args.rules.split(",") if r]
    unknown = [r for r in chosen if r not in RULES]
    if unknown:
        parser.error("unknown rule(s) " + ", ".join(unknown) + "; expected " + ", ".join(RULES))
    files = tracked()
    problems = []
    for rule in chosen:
        problems += RULES[rule](files)
    for p in problems:
        print(p)
    print(f"lint-architecture: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
