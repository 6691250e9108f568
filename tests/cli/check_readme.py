#!/usr/bin/env python3
"""The README's command lines run as pasted (ctest: readme_usage): every `ktune ...` line of the
code blocks of its Usage section is one shell command with no placeholder syntax ([optional],
a|b alternatives, <angle> words), and the built ktune parses it (KTUNE_PARSE_ONLY=1: parsed,
not run) without a usage error, in README order from an empty directory in which each line's
outputs are made before the next line is parsed (the files of -o/--out/--output/--junit, the
family directory of new-kernel): a line that needs a file needs it from an earlier line.
`new-kernel`, the first command for a kernel of one's own, is among them.

    tests/cli/check_readme.py BIN_DIR SOURCE_DIR
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

bin_dir, src = os.path.abspath(sys.argv[1]), sys.argv[2]
with open(os.path.join(src, "README.md"), encoding="utf-8") as f:
    readme = f.read()

usage = re.search(r"^## Usage\n(.*?)^## ", readme, re.S | re.M)
if not usage:
    sys.exit("FAILED: README.md has no '## Usage' section")
blocks = re.findall(r"^```\n(.*?)^```", usage.group(1), re.S | re.M)
commands = []
for block in blocks:
    for line in block.splitlines():
        if line.startswith("ktune "):
            commands.append(re.sub(r"\s+#.*$", "", line))   # the comment after the command
if len(commands) < 20:
    sys.exit(f"FAILED: only {len(commands)} ktune lines in the Usage section")

cwd = tempfile.mkdtemp(prefix="ktune-readme-")


def make_outputs(words):
    """What the line would leave behind for the lines after it, as empty files and directories."""
    for i, w in enumerate(words[:-1]):
        if w in ("-o", "--out", "--output", "--junit") and not words[i + 1].startswith("/"):
            path = os.path.join(cwd, words[i + 1])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
    if words[1] == "new-kernel":
        where = words[words.index("--dir") + 1] if "--dir" in words else "."
        os.makedirs(os.path.join(cwd, where, words[2]), exist_ok=True)


problems = []
env = dict(os.environ, KTUNE_PARSE_ONLY="1", KTUNE_NO_AUTOSTART="1",
           KTUNE_HOME="/nonexistent/ktune-readme-check")
seen = set()
for command in commands:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    # `ktune repro ... && /tmp/r/run.sh`: each ktune command of an && list.
    parts, part = [], []
    for token in tokens:
        if token == "&&":
            parts.append(part)
            part = []
        else:
            part.append(token)
    parts.append(part)
    for words in parts:
        if words[0] != "ktune":
            continue
        bad = [w for w in words if w in ("|", "||", ";", "&", "<", ">", "(", ")") or
               re.search(r"[\[\]<>|]", w)]
        if bad:
            problems.append(f"{command}\n    not one command as pasted: {bad}")
            continue
        seen.add(words[1])
        run = subprocess.run([os.path.join(bin_dir, "ktune"), "--json"] + words[1:], env=env,
                             cwd=cwd, capture_output=True, text=True)
        if run.returncode != 0:
            problems.append(f"{command}\n    exit {run.returncode}: {(run.stdout + run.stderr).strip()}")
        make_outputs(words)

shutil.rmtree(cwd, ignore_errors=True)
if "new-kernel" not in seen:
    problems.append("no `ktune new-kernel` line in the Usage section")
if problems:
    print("FAILED: README command lines that fail when pasted:", file=sys.stderr)
    for p in problems:
        print("  " + p, file=sys.stderr)
    sys.exit(1)
print(f"readme: {len(commands)} command lines parse ({len(seen)} commands)")
