#!/usr/bin/env bash
# Runs bench scenarios with the single-scheduler baseline and 1, 2 and 4
# workers (release build), one JSON report and one SVG chart per run in
# $OUT, then prints the Markdown results table of docs/benchmarks.md.
#
#   bash loadtest/scripts/bench-matrix.sh                       # everything (~30 min)
#   SCENARIOS="scheduling-basic openb" MODES="1 4" bash loadtest/scripts/bench-matrix.sh
#   EXTRA="--scale 0.1" bash loadtest/scripts/bench-matrix.sh   # extra flags for every run
#
# A run that fails its safety checks or times out is reported and the
# matrix goes on; its row says so.
set -euo pipefail
cd "$(dirname "$0")/../.."

SCENARIOS=${SCENARIOS:-"scheduling-basic scheduling-basic-50k pod-anti-affinity topology-spreading mixed-churn preemption-basic unschedulable openb dlrm godel-30k"}
MODES=${MODES:-"single 1 2 4"}
OUT=${OUT:-target/bench/matrix}
EXTRA=${EXTRA:-}

cargo build --release --quiet
mkdir -p "$OUT"
for s in $SCENARIOS; do
  for m in $MODES; do
    if [ "$m" = single ]; then args=(--single-scheduler); else args=(--workers "$m"); fi
    echo "== $s ($m)" >&2
    # shellcheck disable=SC2086 # EXTRA is a list of flags
    if ! target/release/flotilla bench --scenario "$s" "${args[@]}" --no-progress \
        --output json --chart "$OUT/$s-$m.svg" $EXTRA > "$OUT/$s-$m.json"; then
      echo "   $s ($m) exited with $?" >&2
    fi
  done
done
python3 - "$OUT" $SCENARIOS -- $MODES <<'PY'
import json, os, sys
out = sys.argv[1]
rest = sys.argv[2:]
sep = rest.index("--")
scenarios, modes = rest[:sep], rest[sep + 1:]
print("| scenario | workers | pods/s avg | pods/s peak | p50 / p99 latency, ms | conflicts | attempts/pod | CPU s / 1k pods | peak RSS | API writes/pod |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for s in scenarios:
    for m in modes:
        path = os.path.join(out, f"{s}-{m}.json")
        who = "1, no arbiter" if m == "single" else m
        try:
            r = json.load(open(path))
        except (OSError, ValueError):
            print(f"| `{s}` | {who} | failed | | | | | | | |")
            continue
        name = f"`{s}`"
        if r["scheduled"] < r["pods"]:
            name += f" ({r['scheduled']:,} of {r['pods']:,} bound)"
        if r.get("timedOut"):
            name += " (timed out)"
        lat = r["latencyMs"]
        print(f"| {name} | {who} | {r['podsPerSecondAvg']:,.0f} | {r['podsPerSecondPeak']:,.0f} "
              f"| {lat['p50']:,.0f} / {lat['p99']:,.0f} | {100 * r['conflictFraction']:.2f} % "
              f"| {r['attemptsPerPod']:.3f} | {r['cpuSecondsPer1000Pods']:.2f} "
              f"| {r['peakRssBytes'] / 2**30:.2f} GiB | {r['apiWritesPerPod']:.2f} |")
PY
