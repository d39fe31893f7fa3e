#!/usr/bin/env bash
# Fault and attack drills against real processes: an embedded `flotilla
# coordinator` and two `flotilla worker` processes on loopback, over mutual
# TLS as deploy/ runs them (certificates by deploy/gen-certs.sh), one worker
# killed, frozen or stopped in the middle of a run, or hostile clients
# knocking while it runs. Each drill checks the run's report (every pod
# scheduled once, 0 over-committed nodes, every Binding counted once) and
# prints a row: the run's scheduling time (pods submitted to all
# resolved), the time from the fault until the others took the faulty
# worker's pods (for the intruders, until the last was refused), and the
# verdict. The results table of docs/reliability.md comes from here.
#
#   bash loadtest/scripts/drills.sh            # full: 30 s freeze, 6,000 nodes, 200,000 pods
#   bash loadtest/scripts/drills.sh short      # CI: 15 s freeze, 2,000 nodes, 60,000 pods
#   bash loadtest/scripts/drills.sh kube       # leader killed and frozen, API server
#                                              # frozen: loadtest/scripts/drills-kube.sh
#   FLOTILLA=target/release/flotilla bash loadtest/scripts/drills.sh
#
# The intruders (loadtest/examples/drill_client.rs): plaintext, no client
# certificate, a certificate of another CA, the batch pool's certificate
# registering for online, a made-up session credential, and a registered
# worker proposing Bindings and reports for pods it was never handed. Each
# must be refused, and counted in flotilla_refused_calls_total.
#
# Exit status: 0 when every drill passed, 1 otherwise (each drill's logs
# stay in $OUT/<drill>/).
set -euo pipefail
cd "$(dirname "$0")/../.."

MODE=${1:-full}
case "$MODE" in
  kube) exec bash loadtest/scripts/drills-kube.sh ;;
  short) NODES=${NODES:-2000}; PODS=${PODS:-60000}; FREEZE=${FREEZE:-15} ;;
  full) NODES=${NODES:-6000}; PODS=${PODS:-200000}; FREEZE=${FREEZE:-30} ;;
  *) echo "usage: $0 [short|full|kube]" >&2; exit 2 ;;
esac
# Every pod fits (100m each, 4 CPU nodes): a pod left unscheduled is a
# failure of the drill. The workload is SchedulingBasic's shape with rules
# to break: every tenth node tainted NoSchedule (no pod tolerates it), and
# nodes in pools a and b with half the pods selecting pool a, so a
# placement against a pod's rules shows in the report's
# placementsAgainstPodRules. Names (and so uids) are the synthetic
# workload's, which the intruder reads.
OUT=${OUT:-target/drills}
# The release build of this checkout (a no-op when fresh), unless
# FLOTILLA names a binary.
if [ -z "${FLOTILLA:-}" ]; then
  cargo build --release --quiet -p flotilla --bin flotilla
  FLOTILLA=${CARGO_TARGET_DIR:-target}/release/flotilla
fi
cargo build --release --quiet -p flotilla-loadtest --example drill_client
CLIENT=${CARGO_TARGET_DIR:-target}/release/examples/drill_client
mkdir -p "$OUT"
python3 - "$OUT/workload.json" "$NODES" "$PODS" <<'PY'
import json, sys
path, nodes, pods = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
items = []
for i in range(nodes):
    name = f"node-{i:05d}"
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "drill.flotilla.dev/pool": "ab"[i % 2]}},
            "status": {"capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                       "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    if i % 10 == 3:
        node["spec"] = {"taints": [{"key": "drill.flotilla.dev/forbidden", "value": "yes",
                                    "effect": "NoSchedule"}]}
    items.append(node)
for i in range(pods):
    spec = {"containers": [{"name": "c", "image": "pause",
                            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}
    if i % 2 == 0:
        spec["nodeSelector"] = {"drill.flotilla.dev/pool": "a"}
    items.append({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"pod-{i:05d}", "namespace": "default"}, "spec": spec})
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(path, "w"))
PY
# The control channel's certificates, and another CA's for the intruder.
bash deploy/gen-certs.sh "$OUT/tls" >/dev/null
bash deploy/gen-certs.sh "$OUT/tls-other" >/dev/null
# shellcheck source=lib.sh
. loadtest/scripts/lib.sh
trap stop_started EXIT
trap 'exit 130' INT TERM
# DRILLS="worker-sigstop intruders" runs only those.
DRILLS=${DRILLS:-baseline worker-sigkill worker-sigstop worker-sigterm intruders}
FAILED=0

now() { date +%s.%N; }

# run_drill NAME FAULT: FAULT is none, kill, stop or term (what worker w0
# gets 1 s after the pods were submitted), or intrude (the hostile clients
# then).
run_drill() {
  local name=$1 fault=$2 dir="$OUT/$1"
  case " $DRILLS " in *" $name "*) ;; *) return 0 ;; esac
  rm -rf "$dir"; mkdir -p "$dir"
  local addr="127.0.0.1:$(free_port)" metrics="127.0.0.1:$(free_port)" tls="$OUT/tls"
  RUST_LOG=${RUST_LOG:-info} "$FLOTILLA" coordinator --listen "$addr" --workers 2 \
    --tls-cert "$tls/coordinator.crt" --tls-key "$tls/coordinator.key" \
    --tls-client-ca "$tls/ca.crt" --metrics-listen "$metrics" \
    --trace k8s --cluster "$OUT/workload.json" --timeout 300 \
    --no-progress --output json >"$dir/report.json" 2>"$dir/coordinator.log" &
  local coord=$!
  STARTED+=("$coord")
  local w
  for w in 0 1; do
    RUST_LOG=${RUST_LOG:-info} "$FLOTILLA" worker --coordinator "https://$addr" \
      --tls-ca "$tls/ca.crt" --tls-cert "$tls/worker-online.crt" \
      --tls-key "$tls/worker-online.key" \
      --class online --name "w$w" --connect-timeout 30 >"$dir/w$w.log" 2>&1 &
    eval "worker$w=\$!"
    STARTED+=("$!")
    # Killed on purpose: no job notice from the shell.
    disown
  done
  # The pods are submitted once both workers joined: wait for the first
  # bindings, then the fault.
  local i
  for i in $(seq 1 300); do
    grep -q "submitting the pods" "$dir/coordinator.log" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
  local fault_at; fault_at=$(now)
  case "$fault" in
    kill) kill -KILL "$worker0" ;;
    stop) kill -STOP "$worker0" ;;
    term) kill -TERM "$worker0" ;;
    none) ;;
    intrude)
      "$CLIENT" --coordinator "https://$addr" --certs "$tls" \
        --other-certs "$OUT/tls-other" --nodes "$NODES" --pods "$PODS" \
        >"$dir/intruders.jsonl" 2>"$dir/intruders.log" || true
      curl -sf "http://$metrics/metrics" >"$dir/metrics.txt" || true
      ;;
  esac
  local recovered=""
  if [ "$fault" = intrude ]; then
    recovered=$(python3 -c 'import json, sys; ms = [json.loads(l)["ms"] for l in open(sys.argv[1]) if l.strip()]; print("%.1f" % (max(ms, default=0) / 1000))' "$dir/intruders.jsonl")
  elif [ "$fault" != none ]; then
    # The coordinator logs "worker left; re-dispatching its pods" when the
    # others get w0's pods (at once for a kill, within the liveness bound
    # for a freeze; a drained worker leaves with none).
    for i in $(seq 1 600); do
      if grep -q "worker left\|worker stream closed" "$dir/coordinator.log"; then
        recovered=$(awk -v t0="$fault_at" -v t1="$(now)" 'BEGIN { printf "%.1f", t1 - t0 }')
        break
      fi
      sleep 0.1
    done
  fi
  if [ "$fault" = stop ]; then
    sleep "$FREEZE"
    kill -CONT "$worker0" 2>/dev/null || true
  fi
  local status=0
  { wait "$coord"; } 2>/dev/null || status=$?
  kill -TERM "$worker0" "$worker1" 2>/dev/null || true
  for i in $(seq 1 300); do
    kill -0 "$worker0" 2>/dev/null || kill -0 "$worker1" 2>/dev/null || break
    sleep 0.1
  done
  # Ended (or left to the trap if not): no stale pid is signalled later.
  if ! kill -0 "$worker0" 2>/dev/null && ! kill -0 "$worker1" 2>/dev/null; then STARTED=(); fi
  local result verdict took
  result=$(python3 - "$dir/report.json" "$status" "$fault" "$dir" <<'PY'
import json, os, sys
path, status, fault, d = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"- FAIL no report ({e}); exit {status}")
    sys.exit()
print(f"{r['schedulingSeconds']:.1f}", end=" ")
problems = []
if status != 0:
    problems.append(f"exit {status}")
if r["scheduled"] != r["pods"]:
    problems.append(f"{r['scheduled']}/{r['pods']} scheduled")
c = r["checks"]
if c["overcommittedNodes"]:
    problems.append(f"{c['overcommittedNodes']} nodes over-committed")
if c.get("placementsAgainstPodRules", 1):
    problems.append(f"{c['placementsAgainstPodRules']} pods placed against their own rules")
if c["bindingsWritten"] != c["podsBoundByFlotilla"]:
    problems.append(f"{c['bindingsWritten']} Bindings for {c['podsBoundByFlotilla']} pods")
if fault == "intrude":
    # Every intruder refused, and the refusals counted by the coordinator.
    attempts = [json.loads(l) for l in open(os.path.join(d, "intruders.jsonl")) if l.strip()]
    if len(attempts) < 6:
        problems.append(f"{len(attempts)}/6 intruders ran (see intruders.log)")
    for a in attempts:
        if not a["refused"]:
            problems.append(f"intruder {a['attack']} let in: {a['answer']}")
    refused = {}
    try:
        for line in open(os.path.join(d, "metrics.txt")):
            if line.startswith("flotilla_refused_calls_total{"):
                labels, value = line.rsplit(" ", 1)
                refused[labels[len("flotilla_refused_calls_total"):]] = float(value)
    except OSError:
        pass
    # Each TLS intruder refused for its own reason (plaintext: the
    # handshake; no certificate; another CA's: its issuer unknown, or, as
    # gen-certs.sh names every CA alike, its signature bad).
    want = [('method="TLS",reason="handshake"',), ('method="TLS",reason="no_certificate"',),
            ('method="TLS",reason="unknown_ca"', 'method="TLS",reason="bad_certificate"'),
            ('reason="class"',), ('reason="session"',), ('reason="not_assigned"',)]
    missing = [" or ".join(w) for w in want
               if not any(a in k and v > 0 for a in w for k, v in refused.items())]
    if missing:
        problems.append("refusals not counted: " + ", ".join(missing))
    # The coordinator's own count: the intruder's session bound nothing.
    for w in r.get("podsPerWorker", []):
        if w["worker"] == "drill-intruder" and w["pods"]:
            problems.append(f"the intruder's session bound {w['pods']} pods")
    with open(os.path.join(d, "refusals.txt"), "w") as f:
        for k, v in sorted(refused.items()):
            f.write(f"{k} {v:.0f}\n")
print("FAIL " + "; ".join(problems) if problems else f"ok {r['scheduled']} pods bound once, 0 over-committed, 0 against their rules")
PY
)
  took=${result%% *}
  verdict=${result#* }
  printf '| %-14s | %-9s | %10s | %12s | %s |\n' "$name" "$fault" "$took s" "${recovered:+$recovered s}" "$verdict"
  case "$verdict" in ok*) ;; *) FAILED=1 ;; esac
}

echo "drills ($MODE): $NODES nodes, $PODS pods, 2 workers over mTLS; w0 faulted (or intruders sent) 1 s into the run"
printf '| %-14s | %-9s | %10s | %12s | %s |\n' drill "w0 gets" scheduling recovery verdict
echo "|----------------|-----------|------------|--------------|--------|"
run_drill baseline none
run_drill worker-sigkill kill
run_drill worker-sigstop stop
run_drill worker-sigterm term
run_drill intruders intrude
[ -f "$OUT/intruders/intruders.jsonl" ] || exit $FAILED
echo
echo "intruders (each must be refused):"
python3 - "$OUT/intruders/intruders.jsonl" <<'PY' || true
import json, sys
for l in open(sys.argv[1]):
    a = json.loads(l)
    print(f"  {a['attack']:<18} {'refused' if a['refused'] else 'LET IN'} in {a['ms']} ms: {a['answer'][:150]}")
PY
echo "flotilla_refused_calls_total:"
sed 's/^/  /' "$OUT/intruders/refusals.txt" 2>/dev/null || true
exit $FAILED
