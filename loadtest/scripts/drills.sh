#!/usr/bin/env bash
# Fault drills against real processes: an embedded `flotilla coordinator`
# and two `flotilla worker` processes on loopback, one of them killed,
# frozen or stopped in the middle of a run. Each drill checks the run's
# report (every pod scheduled once, 0 over-committed nodes, every Binding
# counted once) and prints a row: the run's scheduling time (pods
# submitted to all resolved), the time from the fault until the others
# took the faulty worker's pods, and the verdict. The results table of
# docs/reliability.md comes from here.
#
#   bash loadtest/scripts/drills.sh            # full: 30 s freeze, 6,000 nodes, 200,000 pods
#   bash loadtest/scripts/drills.sh short      # CI: 15 s freeze, 2,000 nodes, 60,000 pods
#   FLOTILLA=target/release/flotilla bash loadtest/scripts/drills.sh
#
# Exit status: 0 when every drill passed, 1 otherwise (each drill's logs
# stay in $OUT/<drill>/).
set -euo pipefail
cd "$(dirname "$0")/../.."

MODE=${1:-full}
case "$MODE" in
  short) NODES=${NODES:-2000}; PODS=${PODS:-60000}; FREEZE=${FREEZE:-15} ;;
  full) NODES=${NODES:-6000}; PODS=${PODS:-200000}; FREEZE=${FREEZE:-30} ;;
  *) echo "usage: $0 [short|full]" >&2; exit 2 ;;
esac
# Every pod fits (100m each, 4 CPU nodes): a pod left unscheduled is a
# failure of the drill.
OUT=${OUT:-target/drills}
FLOTILLA=${FLOTILLA:-target/release/flotilla}
if [ ! -x "$FLOTILLA" ]; then
  cargo build --release --quiet
fi
mkdir -p "$OUT"
PORT=$((17000 + RANDOM % 2000))
FAILED=0

now() { date +%s.%N; }

# run_drill NAME FAULT: FAULT is none, kill, stop or term (what worker w0
# gets FAULT_AFTER seconds after the pods were submitted).
run_drill() {
  local name=$1 fault=$2 dir="$OUT/$1"
  rm -rf "$dir"; mkdir -p "$dir"
  PORT=$((PORT + 1))
  local addr="127.0.0.1:$PORT"
  RUST_LOG=${RUST_LOG:-info} "$FLOTILLA" coordinator --listen "$addr" --workers 2 \
    --synthetic-nodes "$NODES" --synthetic-pods "$PODS" --timeout 300 \
    --no-progress --output json >"$dir/report.json" 2>"$dir/coordinator.log" &
  local coord=$!
  local w
  for w in 0 1; do
    RUST_LOG=${RUST_LOG:-info} "$FLOTILLA" worker --coordinator "http://$addr" \
      --class online --name "w$w" --connect-timeout 30 >"$dir/w$w.log" 2>&1 &
    eval "worker$w=\$!"
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
  esac
  local recovered=""
  if [ "$fault" != none ]; then
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
  local result verdict took
  result=$(python3 - "$dir/report.json" "$status" <<'PY'
import json, sys
path, status = sys.argv[1], int(sys.argv[2])
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
if c["bindingsWritten"] != c["podsBoundByFlotilla"]:
    problems.append(f"{c['bindingsWritten']} Bindings for {c['podsBoundByFlotilla']} pods")
print("FAIL " + "; ".join(problems) if problems else f"ok {r['scheduled']} pods bound once")
PY
)
  took=${result%% *}
  verdict=${result#* }
  printf '| %-14s | %-9s | %10s | %12s | %s |\n' "$name" "$fault" "$took s" "${recovered:+$recovered s}" "$verdict"
  case "$verdict" in ok*) ;; *) FAILED=1 ;; esac
}

echo "drills ($MODE): $NODES nodes, $PODS pods, 2 workers; w0 faulted 1 s into the run"
printf '| %-14s | %-9s | %10s | %12s | %s |\n' drill "w0 gets" scheduling "pods moved" verdict
echo "|----------------|-----------|------------|--------------|--------|"
run_drill baseline none
run_drill worker-sigkill kill
run_drill worker-sigstop stop
run_drill worker-sigterm term
exit $FAILED
