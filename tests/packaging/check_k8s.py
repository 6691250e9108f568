#!/usr/bin/env python3
"""The Kubernetes files (configs/deploy/k8s-*.yaml) checked without a cluster (ctest: test_k8s_files):
each parses as YAML and is a batch/v1 Job of the shape Kubernetes requires (the fields
`kubectl apply --dry-run=client` would reject when missing or mistyped); the sweep Job is Indexed
and runs `ktune fleet shard` with --shard i/N where N is its completion count; the merge Job runs
`ktune fleet merge` on the same directory with --shards N; both name the image the Dockerfile
builds; every option they pass is one the built ktune's --help lists; and the Dockerfile installs
NVRTC of the CUDA version ktune was built with (CUDA_VERSION, when built with CUDA).

    tests/packaging/check_k8s.py BIN_DIR SOURCE_DIR [CUDA_VERSION]
"""
import re
import shlex
import subprocess
import sys

import yaml

bin_dir, src = sys.argv[1], sys.argv[2]
cuda_version = sys.argv[3] if len(sys.argv) > 3 else ""   # the CUDA toolkit ktune is built with
deploy = f"{src}/configs/deploy"


def fail(message):
    print(f"FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def expect(condition, message):
    if not condition:
        fail(message)


def typed(obj, path, kind):
    node = obj
    for key in path.split("."):
        expect(isinstance(node, dict) and key in node, f"missing {path} (at {key})")
        node = node[key]
    expect(isinstance(node, kind), f"{path}: expected {kind.__name__}, found {type(node).__name__}")
    return node


def job(name):
    path = f"{deploy}/{name}"
    with open(path) as f:
        docs = list(yaml.safe_load_all(f))
    expect(len(docs) == 1, f"{path}: expected one document, found {len(docs)}")
    doc = docs[0]
    expect(doc.get("apiVersion") == "batch/v1" and doc.get("kind") == "Job", f"{path}: not a batch/v1 Job")
    typed(doc, "metadata.name", str)
    pod = typed(doc, "spec.template.spec", dict)
    expect(pod.get("restartPolicy") in ("Never", "OnFailure"), f"{path}: a Job's restartPolicy must be Never or OnFailure")
    containers = typed(doc, "spec.template.spec.containers", list)
    expect(len(containers) == 1, f"{path}: expected one container")
    c = containers[0]
    for key in ("name", "image"):
        expect(isinstance(c.get(key), str), f"{path}: container {key} must be a string")
    for key in ("command", "args"):
        if key in c:
            expect(all(isinstance(a, str) for a in c[key]), f"{path}: container {key} must be strings")
    volumes = {v["name"] for v in typed(doc, "spec.template.spec.volumes", list)}
    for m in c.get("volumeMounts", []):
        expect(m["name"] in volumes, f"{path}: volumeMount {m['name']} has no volume")
        expect(m["mountPath"].startswith("/"), f"{path}: mountPath {m['mountPath']} is not absolute")
    return path, doc, c


def ktune_words(container):
    words = container.get("command", []) + container.get("args", [])
    if words[:2] == ["/bin/sh", "-c"]:
        words = shlex.split(" ".join(words[2:]))
    if words and words[0] == "exec":
        words = words[1:]
    return words


def check_options(words, subcommand):
    helptext = subprocess.run([f"{bin_dir}/ktune", "fleet", subcommand, "--help"], check=True,
                              capture_output=True, text=True).stdout
    for w in words:
        if w.startswith("--"):
            expect(re.search(rf"(^|[ ,]){re.escape(w)}\b", helptext, re.M),
                   f"ktune fleet {subcommand} has no option {w}")


sweep_path, sweep, shard = job("k8s-sweep.yaml")
expect(typed(sweep, "spec.completionMode", str) == "Indexed", f"{sweep_path}: not an Indexed Job")
completions = typed(sweep, "spec.completions", int)
words = ktune_words(shard)
expect(words[:3] == ["ktune", "fleet", "shard"], f"{sweep_path}: runs {words[:3]}, expected ktune fleet shard")
shard_arg = words[words.index("--shard") + 1]
expect(shard_arg == f"$((JOB_COMPLETION_INDEX + 1))/{completions}",
       f"{sweep_path}: --shard {shard_arg} does not map completion index i to shard i+1 of {completions}")
out_dir = words[words.index("--out") + 1]
check_options(words, "shard")

merge_path, merge, merger = job("k8s-merge.yaml")
words = ktune_words(merger)
expect(words[:3] == ["ktune", "fleet", "merge"], f"{merge_path}: runs {words[:3]}, expected ktune fleet merge")
expect(words[3] == out_dir, f"{merge_path}: merges {words[3]}, the shards write {out_dir}")
expect(words[words.index("--shards") + 1] == str(completions), f"{merge_path}: --shards differs from {completions}")
check_options(words, "merge")

expect(shard["image"] == merger["image"], "the two Jobs name different images")
with open(f"{deploy}/Dockerfile") as f:
    dockerfile = f.read()
expect(shard["image"] in dockerfile, f"the Dockerfile does not say how to build {shard['image']}")
expect(re.search(r"^FROM debian:12", dockerfile, re.M), "the Dockerfile does not start from Debian 12")
expect("ktune_*.deb" in dockerfile, "the Dockerfile does not install ktune's .deb")
# NVRTC, loaded by the workers at run time, of the CUDA major version ktune was built with.
expect("cuda-nvrtc-${CUDA_MAJOR}-${CUDA_MINOR}" in dockerfile, "the Dockerfile does not install NVRTC")
expect(re.search(r"KTUNE_NVRTC_LIBRARY=\S*/libnvrtc\.so\.\$\{CUDA_MAJOR\}", dockerfile),
       "the Dockerfile does not point KTUNE_NVRTC_LIBRARY at the NVRTC it installs")
if cuda_version:
    major, minor = cuda_version.split(".")[:2]
    for name, value in (("CUDA_MAJOR", major), ("CUDA_MINOR", minor)):
        arg = re.search(rf"^ARG {name}=(\S+)", dockerfile, re.M)
        expect(arg and arg.group(1) == value,
               f"the Dockerfile's ARG {name} is {arg.group(1) if arg else 'missing'}, but ktune is "
               f"built with CUDA {cuda_version}: its workers load libnvrtc.so.{major}")
print("k8s files: two batch/v1 Jobs, the shard entry point and the merge with options ktune has")
