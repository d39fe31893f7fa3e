#!/usr/bin/env python3
"""Checks a `flotilla run --placements` file of an openb run, independently
of the scheduler: no GPU device is shared beyond 1000 milli-GPU, and every
bound GPU pod of the trace has its devices written.

Usage: check-gpu-placements.py POD_LIST.csv PLACEMENTS.jsonl
"""
import collections
import csv
import json
import sys

pods_csv, placements = sys.argv[1], sys.argv[2]
gpu_pods = set()
with open(pods_csv) as f:
    for row in csv.DictReader(f):
        if int(row["num_gpu"]) > 0:
            gpu_pods.add("openb/" + row["name"].strip())
used = collections.Counter()
bound_gpu = with_devices = 0
for line in open(placements):
    p = json.loads(line)
    if p.get("node") and p["pod"] in gpu_pods:
        bound_gpu += 1
        if "gpus" in p:
            with_devices += 1
            for d in p["gpus"]:
                used[(p["node"], d)] += p["gpuMilli"]
over = {k: v for k, v in used.items() if v > 1000}
if over:
    sys.exit(f"GPUs shared beyond 1000 milli: {list(over.items())[:5]}")
if with_devices != bound_gpu:
    sys.exit(f"{bound_gpu - with_devices} of {bound_gpu} bound GPU pods have no devices written")
print(f"gpu placements ok: {bound_gpu} GPU pods bound, each with its devices; "
      f"{len(used)} devices used, none beyond 1000 milli")
