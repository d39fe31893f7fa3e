#!/usr/bin/env bash
# Server-side validation of deploy/manifests/ against the cluster in KUBECONFIG:
#
#   kubectl apply --dry-run=server -f deploy/manifests/
#
# The API server decodes, defaults, validates and admits every object, and
# stores nothing. Then the control channel as the server sees it: the
# NetworkPolicy (only worker pods to the coordinator's gRPC port, metrics
# open), the TLS flags of every container, and the Secrets they mount made by
# deploy/gen-certs.sh (needs openssl) and dry-run created as deploy/README.md
# says. kubectl also validates the fields against the server's
# OpenAPI schema first (on servers older than 1.25, which have no server-side
# field validation, this client-side check is what catches unknown fields).
#
# Usage: deploy/check.sh [--create-namespace] [--rbac]
#   --create-namespace  create the namespace flotilla-system for real when it
#                       is missing (namespaced objects cannot be dry-run into a
#                       namespace that does not exist); it is left in place
#   --rbac              THROWAWAY CLUSTERS ONLY: apply the ServiceAccounts and
#                       RBAC objects for real, then ask the authorizer
#                       (`kubectl auth can-i --as=...`) what each ServiceAccount
#                       may do; needs a kubeconfig allowed to impersonate
#
# Environment: KUBECONFIG (required), KUBECTL (default: kubectl).
# Exit status: 0 all checks passed, 1 a check failed, 2 bad usage.
#
# In the kube-lab (a real kube-apiserver 1.20 + etcd on loopback):
#   API_PORT=36443 ETCD_PORT=32379 ETCD_PEER_PORT=32380 K8S_BIN=~/.cache/kube-lab/bin \
#     bash ../shared/tools/kube-lab/apiserver-lab.sh exec \
#     bash deploy/check.sh --create-namespace --rbac
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

create_ns=0
rbac=0
for arg in "$@"; do
  case "$arg" in
    --create-namespace) create_ns=1 ;;
    --rbac) rbac=1 ;;
    -h|--help) usage ;;
    *) echo "check.sh: unknown argument $arg" >&2; usage ;;
  esac
done

cd "$(dirname "$0")/.."
KUBECTL=${KUBECTL:-kubectl}
NS=flotilla-system
if [ -z "${KUBECONFIG:-}" ]; then
  echo "check.sh: set KUBECONFIG to the cluster to validate against" >&2
  exit 2
fi

echo "== server: $("$KUBECTL" version -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | tail -1)"

if ! "$KUBECTL" get namespace "$NS" >/dev/null 2>&1; then
  if [ "$create_ns" = 1 ]; then
    echo "== creating namespace $NS (for real: namespaced objects need it)"
    "$KUBECTL" apply -f deploy/manifests/00-namespace.yaml
  else
    echo "check.sh: namespace $NS does not exist; the namespaced objects cannot be" >&2
    echo "dry-run into it. Create it (kubectl apply -f deploy/manifests/00-namespace.yaml)" >&2
    echo "or pass --create-namespace." >&2
    exit 1
  fi
fi

echo "== kubectl apply --dry-run=server -f deploy/manifests/"
"$KUBECTL" apply --dry-run=server -f deploy/manifests/

echo "== mutual TLS and the NetworkPolicy, as the server admits them"
tls_failed=0
# want  what  got
expect() {
  if [ "$3" = "$1" ]; then
    printf '  ok   %s: %s\n' "$2" "$3"
  else
    printf '  FAIL %s: want %s, got %s\n' "$2" "$1" "${3:-nothing}"
    tls_failed=1
  fi
}
np() { "$KUBECTL" apply --dry-run=server -f deploy/manifests/60-networkpolicy.yaml -o jsonpath="$1"; }
expect coordinator "NetworkPolicy podSelector component" "$(np '{.spec.podSelector.matchLabels.app\.kubernetes\.io/component}')"
expect worker "NetworkPolicy: gRPC admitted from component" "$(np '{.spec.ingress[0].from[0].podSelector.matchLabels.app\.kubernetes\.io/component}')"
expect grpc "NetworkPolicy: port admitted from workers" "$(np '{.spec.ingress[0].ports[*].port}')"
expect metrics "NetworkPolicy: port open to all" "$(np '{.spec.ingress[1].ports[*].port}')"
expect "" "NetworkPolicy: peers of the open rule" "$(np '{.spec.ingress[1].from}')"
args() {
  "$KUBECTL" apply --dry-run=server -f "deploy/manifests/$1" -o \
    jsonpath='{range .items[*]}{.spec.template.spec.containers[0].args}{"\n"}{end}{.spec.template.spec.containers[0].args}{"\n"}'
}
coord_args=$(args 40-coordinator.yaml)
for f in --tls-cert --tls-key --tls-client-ca; do
  expect yes "coordinator $f" "$(grep -q -- "\"$f\"" <<<"$coord_args" && echo yes)"
done
expect no "coordinator --insecure" "$(grep -q -- '"--insecure"' <<<"$coord_args" && echo yes || echo no)"
while read -r worker_args; do
  [ -n "$worker_args" ] || continue
  for f in --tls-ca --tls-cert --tls-key '"https://'; do
    expect yes "worker $(sed -n 's/.*"--class","\([a-z]*\)".*/\1/p' <<<"$worker_args") $f" \
      "$(grep -q -- "$f" <<<"$worker_args" && echo yes)"
  done
done <<<"$(args 50-workers.yaml)"
if command -v openssl >/dev/null; then
  certs=$(mktemp -d)
  trap 'rm -rf "$certs"' EXIT
  bash deploy/gen-certs.sh "$certs" "$NS" >/dev/null
  for s in coordinator worker-online worker-batch; do
    got=$("$KUBECTL" -n "$NS" create secret generic "flotilla-$s-tls" --dry-run=server -o name \
      --from-file=tls.crt="$certs/$s.crt" --from-file=tls.key="$certs/$s.key" \
      --from-file=ca.crt="$certs/ca.crt" 2>&1 || true)
    expect "secret/flotilla-$s-tls" "Secret of deploy/gen-certs.sh, dry-run created" "$got"
  done
else
  echo "  skip the Secrets of deploy/gen-certs.sh: openssl not found"
fi
if [ "$tls_failed" != 0 ]; then
  echo "check.sh: TLS / NetworkPolicy check failed" >&2
  exit 1
fi

echo "== kubectl apply --dry-run=server -f deploy/crds/"
"$KUBECTL" apply --dry-run=server -f deploy/crds/

if [ "$rbac" = 1 ]; then
  echo "== applying ServiceAccounts and RBAC for real (--rbac)"
  "$KUBECTL" apply -f deploy/manifests/10-serviceaccounts.yaml -f deploy/manifests/20-rbac.yaml
  # kubectl auth can-i maps a resource through discovery: the PodGroup
  # checks need the CRD served (a throwaway cluster: install it for real).
  if ! "$KUBECTL" get crd podgroups.scheduling.x-k8s.io >/dev/null 2>&1; then
    "$KUBECTL" apply -f deploy/crds/podgroups.yaml
    "$KUBECTL" wait --for=condition=Established --timeout=60s crd/podgroups.scheduling.x-k8s.io
  fi
  failed=0
  # want  as-ServiceAccount  namespace  verb  resource[/name]  [--subresource=...]
  check() {
    local want=$1 sa=$2 ns=$3; shift 3
    local got
    got=$("$KUBECTL" auth can-i --as="system:serviceaccount:$NS:$sa" -n "$ns" "$@" 2>/dev/null || true)
    if [ "$got" = "$want" ]; then
      printf '  ok   %-3s %-20s -n %-16s %s\n' "$want" "$sa" "$ns" "$*"
    else
      printf '  FAIL want %s got %s: %s -n %s %s\n' "$want" "${got:-error}" "$sa" "$ns" "$*"
      failed=1
    fi
  }
  c=flotilla-coordinator
  w=flotilla-worker
  # What the coordinator needs.
  for v in get list watch; do
    check yes $c default "$v" nodes
    check yes $c team-a "$v" pods
    check yes $c default "$v" namespaces
  done
  check yes $c team-a delete pods
  for v in list watch; do
    check yes $c default "$v" priorityclasses.scheduling.k8s.io
    check yes $c team-a "$v" poddisruptionbudgets.policy
    check yes $c team-a "$v" persistentvolumeclaims
    check yes $c default "$v" persistentvolumes
    for r in storageclasses csinodes csidrivers volumeattachments; do
      check yes $c default "$v" "$r.storage.k8s.io"
    done
  done
  check yes $c default get persistentvolumes
  check yes $c default update persistentvolumes
  check yes $c team-a patch persistentvolumeclaims
  check yes $c team-a create pods --subresource=binding
  check yes $c team-a patch pods --subresource=status
  check yes $c team-a update pods --subresource=status
  for v in create patch update; do check yes $c team-a "$v" events.events.k8s.io; done
  for v in create patch; do check yes $c team-a "$v" events; done
  for v in get list watch; do check yes $c team-a "$v" podgroups.scheduling.x-k8s.io; done
  check yes $c team-a patch podgroups.scheduling.x-k8s.io --subresource=status
  # Kubernetes' own PodGroups: can-i needs them served (1.36+, feature gate).
  if "$KUBECTL" api-resources --api-group=scheduling.k8s.io -o name 2>/dev/null \
      | grep -qx 'podgroups.scheduling.k8s.io'; then
    for v in get list watch; do check yes $c team-a "$v" podgroups.scheduling.k8s.io; done
    check yes $c team-a patch podgroups.scheduling.k8s.io --subresource=status
  else
    echo "  skip scheduling.k8s.io podgroups: not served by this server"
  fi
  check yes $c "$NS" create leases.coordination.k8s.io
  for v in get update patch; do check yes $c "$NS" "$v" leases.coordination.k8s.io/flotilla-coordinator; done
  # What it must not be able to do.
  check no $c default delete priorityclasses.scheduling.k8s.io
  check no $c team-a delete poddisruptionbudgets.policy
  check no $c team-a update persistentvolumeclaims
  check no $c default patch persistentvolumes
  check no $c default delete persistentvolumes
  check no $c team-a create pods
  check no $c team-a update pods
  check no $c default update nodes
  check no $c team-a get secrets
  check no $c team-a get configmaps
  check no $c team-a update events
  check no $c team-a delete events.events.k8s.io
  check no $c default create leases.coordination.k8s.io
  check no $c "$NS" get leases.coordination.k8s.io/kube-scheduler
  check no $c "$NS" delete leases.coordination.k8s.io/flotilla-coordinator
  check no $c "$NS" list leases.coordination.k8s.io
  # Workers get nothing.
  check no $w default get nodes
  check no $w team-a get pods
  check no $w team-a create pods --subresource=binding
  check no $w "$NS" create leases.coordination.k8s.io
  if [ "$failed" != 0 ]; then
    echo "check.sh: RBAC check failed" >&2
    exit 1
  fi
fi
echo "check.sh: all checks passed"
