#!/usr/bin/env bash
# Fault drills against a real kube-apiserver (kube-lab, 1.20 + etcd on
# loopback): two `flotilla coordinator` replicas electing a leader on a
# Lease (A leads, B stands by) and two `flotilla worker` processes over
# mutual TLS, as deploy/ runs them. Pods are created while Flotilla
# schedules them; once scheduling is under way the drill's fault lands:
#
#   leader-sigkill   the leader is killed: B takes the Lease when it expires
#                    and the workers join it
#   leader-sigstop   the leader is frozen for the Lease duration plus 15 s:
#                    as a kill, and the woken leader must write nothing and
#                    exit (status 5)
#   apiserver-sigstop  kube-apiserver is frozen for FREEZE seconds (30):
#                    the leader cannot renew its Lease and steps down after
#                    its renew deadline (10 s), writes stopped; when the
#                    server is back a replica takes the Lease and lists
#   apiserver-sigstop-single  the same with one coordinator and no leader
#                    election: Bindings in flight get no answer; their room
#                    stays reserved until their outcome is known, then
#                    scheduling goes on
#
# Each drill checks, from the API server's own objects: every pod bound
# (0 lost), no node over-committed (CPU and pod count), no pod on the
# tainted nodes its spec forbids, and prints the time from the fault until
# Bindings were written again ("resumed") and until every pod was bound.
# A second Binding of a bound pod is refused by the API server itself
# (409 Conflict): that is the guarantee against a pod bound twice; the
# drill reads each pod's final node.
#
#   bash loadtest/scripts/drills.sh kube     # this script, in a throwaway kube-lab
#   KNODES=300 FREEZE=30 bash loadtest/scripts/drills-kube.sh
#
# Outside a lab (no LAB_API_URL) it starts one through
# ../shared/tools/kube-lab/apiserver-lab.sh (binaries from K8S_BIN, default
# ~/.cache/kube-lab/bin; `.ci/e2e-kube` builds them). Exit status: 0 when
# every drill passed, 1 otherwise (logs stay in $OUT/<drill>/).
set -euo pipefail
cd "$(dirname "$0")/../.."

LAB=../shared/tools/kube-lab
if [ -z "${LAB_API_URL:-}" ]; then
  if [ ! -d "$LAB" ]; then
    echo "kube drills: $LAB not found beside the project; skipped"
    exit 0
  fi
  export K8S_BIN=${K8S_BIN:-$HOME/.cache/kube-lab/bin}
  if [ ! -x "$K8S_BIN/kube-apiserver" ] || ! command -v etcd >/dev/null || ! command -v kubectl >/dev/null; then
    echo "kube drills: kube-apiserver, etcd or kubectl missing (bash .ci/e2e-kube builds kube-lab); skipped"
    exit 0
  fi
  export ETCD_PORT=${ETCD_PORT:-23379} ETCD_PEER_PORT=${ETCD_PEER_PORT:-23380} API_PORT=${API_PORT:-27443}
  exec bash "$LAB/apiserver-lab.sh" exec bash "$0" "$@"
fi

KNODES=${KNODES:-300}
FREEZE=${FREEZE:-30}
LEASE=${LEASE:-15}
OUT=${OUT:-target/drills}
# The release build of this checkout (a no-op when fresh), unless FLOTILLA
# names a binary.
if [ -z "${FLOTILLA:-}" ]; then
  cargo build --release --quiet -p flotilla --bin flotilla
  FLOTILLA=${CARGO_TARGET_DIR:-target}/release/flotilla
fi
mkdir -p "$OUT"
bash deploy/gen-certs.sh "$OUT/tls" >/dev/null
TLS=$OUT/tls
API_PORT_NOW=${LAB_API_URL##*:}
APISERVER_PID=$(pgrep -f "kube-apiserver.*--secure-port=$API_PORT_NOW" | head -1 || true)
FAILED=0
# Pods per node (500m each on 4-CPU nodes): the drill fills the cluster
# exactly, so a room counted twice shows as an over-committed node or a
# pod left pending.
PER_NODE=8
PODS=$((KNODES * PER_NODE))
WARM=$((PODS / 8))

now() { date +%s.%N; }
# shellcheck source=lib.sh
. loadtest/scripts/lib.sh
# The API server woken too: the lab's own teardown stops only etcd and
# the API server.
cleanup() {
  [ -n "${APISERVER_PID:-}" ] && kill -CONT "$APISERVER_PID" 2>/dev/null
  stop_started
}
trap cleanup EXIT
trap 'exit 130' INT TERM
since() { awk -v t0="$1" -v t1="$(now)" 'BEGIN { printf "%.1f", t1 - t0 }'; }
kc() { kubectl --request-timeout=20s "$@"; }
# Pods are created without a request timeout: a create sent into the API
# server's freeze completes when it wakes.
kc_create() { kubectl create "$@"; }

# bound_count NS: pods of NS with a node, from a server-side table (no
# objects), bounded so a frozen server gives "" instead of hanging.
bound_count() {
  curl -sf --max-time 2 --cacert "$LAB_CA_CERT" -H "Authorization: Bearer $LAB_TOKEN" \
    -H 'Accept: application/json;as=Table;v=v1;g=meta.k8s.io' \
    "$LAB_API_URL/api/v1/namespaces/$1/pods?fieldSelector=spec.nodeName%21%3D&includeObject=None" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["rows"]))' 2>/dev/null || true
}

# scheduled_events NS: the Scheduled Events of NS (same table form).
scheduled_events() {
  curl -sf --max-time 5 --cacert "$LAB_CA_CERT" -H "Authorization: Bearer $LAB_TOKEN" \
    -H 'Accept: application/json;as=Table;v=v1;g=meta.k8s.io' \
    "$LAB_API_URL/api/v1/namespaces/$1/events?fieldSelector=reason%3DScheduled&includeObject=None" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["rows"]))' 2>/dev/null || true
}

node_yaml() { # node_yaml NAME DRILL TAINTED
  local taint=""
  [ "$3" = yes ] && taint="
spec:
  taints: [{key: flotilla.io/drill-forbidden, value: \"yes\", effect: NoSchedule}]"
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {kubernetes.io/hostname: $1, flotilla.io/drill: $2}$taint
status:
  capacity: {cpu: "4", memory: 32Gi, pods: "110"}
  allocatable: {cpu: "4", memory: 32Gi, pods: "110"}
  conditions: [{type: Ready, status: "True", reason: KubeletReady, message: drill node}]
---
EOF
}

pod_yaml() { # pod_yaml NS NAME DRILL
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: $1}
spec:
  schedulerName: $3
  nodeSelector: {flotilla.io/drill: $3}
  containers:
  - {name: c, image: pause, resources: {requests: {cpu: 500m, memory: 64Mi}}}
---
EOF
}

# create_pods NS DRILL FROM TO DIR: pods FROM..TO-1, 4 kubectl in parallel.
# A create the fault cut (kubectl gave up on a frozen server) is sent
# again until the pod exists, so every drill schedules all PODS pods; the
# retries are counted in $dir/create-retries.
create_pods() {
  local ns=$1 drill=$2 from=$3 to=$4 dir=$5 i part pids=() parts=() try
  rm -f "$dir"/pods-*.yaml
  for i in $(seq "$from" $((to - 1))); do
    pod_yaml "$ns" "p-$i" "$drill" >>"$dir/pods-$((i % 4)).yaml"
  done
  for part in "$dir"/pods-*.yaml; do
    kc_create -f "$part" >/dev/null 2>>"$dir/kubectl.log" &
    pids+=($!)
    parts+=("$part")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" && continue
    part=${parts[$i]}
    for try in 1 2 3 4 5; do
      echo "kubectl create of $part failed; sent again (try $try)" >>"$dir/kubectl.log"
      echo "$part" >>"$dir/create-retries"
      # Pods that exist answer AlreadyExists: only the others are created.
      local errors
      errors=$(kc_create -f "$part" 2>&1 >/dev/null | grep -v AlreadyExists || true)
      [ -z "$errors" ] && break
      echo "$errors" >>"$dir/kubectl.log"
      sleep 2
    done
  done
}

# pending_report NS DIR: the pods of NS not bound, each with its
# PodScheduled condition and the last lines Flotilla logged of it.
pending_report() {
  [ -s "$2/kubectl.log" ] && tail -5 "$2/kubectl.log" | cut -c1-300 | sed 's/^/  kubectl: /'
  kc get pods -n "$1" -o json >"$2/pods-pending.json" 2>/dev/null || return 0
  python3 - "$2/pods-pending.json" <<'PY' | while read -r pod why; do
import json, sys
for p in json.load(open(sys.argv[1]))["items"]:
    if p["spec"].get("nodeName"):
        continue
    cond = [c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
    why = f"{cond[0].get('reason')}: {cond[0].get('message')}" if cond else "no PodScheduled condition"
    print(p["metadata"]["name"], why)
PY
    echo "  pending $pod ($why); Flotilla's last lines of it:"
    grep -hE "/$pod([^0-9-]|\$)" "$2"/coordinator-*.log "$2"/w*.log 2>/dev/null | tail -8 | cut -c1-400 | sed 's/^/    /'
  done
}

# wait_bound NS COUNT SECONDS: until COUNT pods of NS are bound.
wait_bound() {
  local end; end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$end" ]; do
    [ "$(bound_count "$1")" -ge "$2" ] 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

lease_holder() {
  kc get lease -n "$1" "$2" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true
}

# run_drill NAME FAULT: FAULT is leader-kill, leader-stop or api-stop.
run_drill() {
  local name=$1 fault=$2
  local dir="$OUT/$name" tag="d$((RANDOM % 100000))"
  local ns="drill-$name-$tag" drill="flotilla-drill-$name-$tag"
  rm -rf "$dir"; mkdir -p "$dir"
  kc create namespace "$ns" >/dev/null
  {
    local i
    for i in $(seq 0 $((KNODES - 1))); do node_yaml "$drill-n$i" "$drill" no; done
    # Two tainted nodes with room: no pod tolerates them.
    for i in 0 1; do node_yaml "$drill-t$i" "$drill" yes; done
  } >"$dir/nodes.yaml"
  kc create -f "$dir/nodes.yaml" >/dev/null
  printf 'apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: %s\n' \
    "$drill" >"$dir/scheduler-config.yaml"
  local pa pb; pa=$(free_port); pb=$(free_port)
  # One replica without leader election for api-stop-single, else A and B
  # on a Lease.
  local election=(--leader-elect --lease-name flotilla --lease-namespace "$ns" --lease-duration "$LEASE")
  [ "$fault" = api-stop-single ] && election=()
  coordinator() { # coordinator NAME PORT
    RUST_LOG=${RUST_LOG:-info} "$FLOTILLA" coordinator --kubeconfig "$KUBECONFIG" \
      --listen "127.0.0.1:$2" --config "$dir/scheduler-config.yaml" \
      --tls-cert "$TLS/coordinator.crt" --tls-key "$TLS/coordinator.key" --tls-client-ca "$TLS/ca.crt" \
      "${election[@]}" ${election[0]:+--lease-identity "$1"} >"$dir/coordinator-$1.log" 2>&1 &
  }
  coordinator a "$pa"; local coord_a=$!
  STARTED+=("$coord_a")
  disown
  local coord_b="" addrs="https://127.0.0.1:$pa"
  if [ ${#election[@]} -gt 0 ]; then
    for i in $(seq 1 300); do [ "$(lease_holder "$ns" flotilla)" = a ] && break; sleep 0.1; done
    coordinator b "$pb"; coord_b=$!
    STARTED+=("$coord_b")
    disown
    addrs="$addrs,https://127.0.0.1:$pb"
  fi
  local workers=()
  for w in 0 1; do
    RUST_LOG=${RUST_LOG:-info} "$FLOTILLA" worker --coordinator "$addrs" \
      --tls-ca "$TLS/ca.crt" --tls-cert "$TLS/worker-online.crt" --tls-key "$TLS/worker-online.key" \
      --config "$dir/scheduler-config.yaml" --class online --name "w$w" --connect-timeout 120 \
      >"$dir/w$w.log" 2>&1 &
    workers+=($!)
    STARTED+=($!)
    disown
  done

  # Warm-up: the first pods bound by A.
  create_pods "$ns" "$drill" 0 "$WARM" "$dir"
  local verdict="" problems=()
  wait_bound "$ns" "$WARM" 120 || problems+=("warm-up: $(bound_count "$ns")/$WARM bound by the leader")
  # The rest is created in the background; the fault lands once a tenth of
  # it is bound.
  local started; started=$(now)
  create_pods "$ns" "$drill" "$WARM" "$PODS" "$dir" &
  local creator=$!
  wait_bound "$ns" $((WARM + (PODS - WARM) / 10)) 120 || true
  local fault_at; fault_at=$(now)
  local before; before=$(bound_count "$ns")
  case "$fault" in
    leader-kill) kill -KILL "$coord_a" ;;
    leader-stop) kill -STOP "$coord_a" ;;
    api-stop*) kill -STOP "$APISERVER_PID" ;;
  esac
  local resumed="" done_in="" cont_at=""
  case "$fault" in api-stop*)
    sleep "$FREEZE"
    kill -CONT "$APISERVER_PID"
    cont_at=$(now)
  esac
  # Resumed: the first Binding counted after the fault had settled (1 s:
  # Bindings already at the server land).
  sleep 1
  local settled; settled=$(bound_count "$ns")
  local end=$(( $(date +%s) + 180 )) n
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$(bound_count "$ns")
    if [ -n "$n" ] && [ -z "$resumed" ] && [ -n "$settled" ] && [ "$n" -gt "$settled" ]; then
      resumed=$(since "$fault_at")
    fi
    if [ "$n" = "$PODS" ] 2>/dev/null; then
      done_in=$(since "$fault_at")
      break
    fi
    sleep 0.2
  done
  [ -z "$resumed" ] && [ "$n" = "$PODS" ] 2>/dev/null && resumed="(all bound within 1 s)"
  wait "$creator" 2>/dev/null || true
  if [ "$fault" = leader-stop ]; then
    # Frozen for the Lease and 15 s more, then woken: it must write nothing
    # and exit 5 (its write fence expired).
    local frozen_until; frozen_until=$(awk -v t="$fault_at" -v l="$LEASE" 'BEGIN { printf "%d", t + l + 15 }')
    while [ "$(date +%s)" -lt "$frozen_until" ]; do sleep 0.5; done
    kill -CONT "$coord_a"
    local status=""
    for i in $(seq 1 300); do
      if ! kill -0 "$coord_a" 2>/dev/null; then status=exited; break; fi
      sleep 0.1
    done
    if [ "$status" != exited ]; then
      problems+=("the woken leader did not exit within 30 s")
    elif ! grep -q "leadership lost" "$dir/coordinator-a.log"; then
      problems+=("the woken leader exited without saying why (see coordinator-a.log)")
    fi
  fi
  if ! [ "$n" = "$PODS" ] 2>/dev/null; then
    local exist
    exist=$(kc get pods -n "$ns" --no-headers 2>/dev/null | wc -l)
    problems+=("${n:-?}/$PODS bound after 180 s, $exist pods exist (kubectl.log: $(grep -c . "$dir/kubectl.log" 2>/dev/null || echo 0) lines)")
    pending_report "$ns" "$dir"
  fi
  # The API server's objects: nodes over-committed, pods on forbidden
  # nodes, pods bound more than once (a node that changed).
  kc get pods -n "$ns" -o json >"$dir/pods.json"
  local check
  check=$(python3 - "$dir/pods.json" "$drill" "$PER_NODE" <<'PY'
import json, sys
pods = json.load(open(sys.argv[1]))["items"]
drill, per_node = sys.argv[2], int(sys.argv[3])
on = {}
for p in pods:
    n = p["spec"].get("nodeName")
    if n:
        on.setdefault(n, []).append(p["metadata"]["name"])
over = [n for n, ps in on.items() if len(ps) > per_node]
forbidden = [n for n in on if n.startswith(drill + "-t")]
problems = []
if over:
    problems.append(f"{len(over)} nodes over-committed")
if forbidden:
    problems.append(f"pods on tainted nodes {forbidden}")
print("; ".join(problems))
PY
)
  [ -n "$check" ] && problems+=("$check")
  if grep -q "panicked" "$dir"/*.log; then problems+=("a process panicked"); fi
  # Events are best effort (as upstream's): reported, not checked. They
  # trail the Bindings; given 15 s to catch up.
  local events=""
  for i in $(seq 1 75); do
    events=$(scheduled_events "$ns")
    [ "${events:-0}" -ge "$PODS" ] 2>/dev/null && break
    sleep 0.2
  done
  # Tear down: processes, nodes (no controller-manager here deletes the
  # namespace's pods; they stay behind, bound to nodes that are gone).
  local procs=("$coord_a" ${coord_b:+"$coord_b"} "${workers[@]}")
  kill -TERM "${procs[@]}" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "${procs[@]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "${procs[@]}" 2>/dev/null || true
  STARTED=()
  kc delete nodes -l "flotilla.io/drill=$drill" --wait=false >/dev/null 2>&1 || true
  if [ ${#problems[@]} -eq 0 ]; then
    verdict="ok $PODS pods bound once, 0 over-committed, 0 on forbidden nodes; Scheduled Events ${events:-?}/$PODS"
    [ -s "$dir/create-retries" ] && verdict="$verdict; pod creates sent again: $(sort -u "$dir/create-retries" | wc -l) files"
  else
    verdict="FAIL $(IFS=';'; echo "${problems[*]}")"
    FAILED=1
  fi
  local resumed_col="${resumed:-never} s"
  [ -n "$cont_at" ] && resumed_col="$resumed_col (API back at $(awk -v a="$fault_at" -v b="$cont_at" 'BEGIN { printf "%.1f", b - a }') s)"
  printf '| %-24s | %-15s | %-28s | %9s | %s |\n' "$name" "$fault" "$resumed_col" "${done_in:-–} s" "$verdict"
}

echo "kube drills: $KNODES nodes (+2 tainted), $PODS pods of 500m (the cluster full), Lease ${LEASE} s, API freeze ${FREEZE} s"
echo "fault once a tenth of the pods after the warm-up ($WARM) are bound; times from the fault"
printf '| %-24s | %-15s | %-28s | %9s | %s |\n' drill fault "Bindings resumed" "all bound" verdict
echo "|--------------------------|-----------------|------------------------------|-----------|---------|"
[ -n "$APISERVER_PID" ] || { echo "kube-apiserver's pid not found (port $API_PORT_NOW)"; exit 1; }
DRILLS=${DRILLS:-leader-sigkill leader-sigstop apiserver-sigstop apiserver-sigstop-single}
for d in $DRILLS; do
  case "$d" in
    leader-sigkill) run_drill leader-sigkill leader-kill ;;
    leader-sigstop) run_drill leader-sigstop leader-stop ;;
    apiserver-sigstop) run_drill apiserver-sigstop api-stop ;;
    apiserver-sigstop-single) run_drill apiserver-sigstop-single api-stop-single ;;
    *) echo "unknown drill $d"; FAILED=1 ;;
  esac
done
exit $FAILED
