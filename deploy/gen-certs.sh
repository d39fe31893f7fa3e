#!/usr/bin/env bash
# Makes the certificates of Flotilla's control channel (mutual TLS between the
# coordinator and its workers) with openssl: a CA, the coordinator's server
# certificate, and one client certificate per worker class.
#
# Usage: deploy/gen-certs.sh OUT_DIR [NAMESPACE] [DAYS]
#   OUT_DIR    where the files go (created; existing files are overwritten)
#   NAMESPACE  the coordinator Service's namespace, for its DNS names
#              (default flotilla-system)
#   DAYS       validity of every certificate (default 365)
#
# Writes, PEM:
#   ca.crt, ca.key                  the CA (keep ca.key out of the cluster)
#   coordinator.crt, coordinator.key
#       DNS names flotilla-coordinator, flotilla-coordinator.NAMESPACE,
#       flotilla-coordinator.NAMESPACE.svc, ...svc.cluster.local, localhost,
#       IP 127.0.0.1; extendedKeyUsage serverAuth
#   worker-online.crt/.key, worker-batch.crt/.key
#       CN flotilla-worker-CLASS, DNS name CLASS.worker.flotilla.internal
#       (the class the coordinator lets it register for); extendedKeyUsage
#       clientAuth
# and prints the kubectl commands that load them into the Secrets
# deploy/manifests/ mounts (flotilla-coordinator-tls, flotilla-worker-online-tls,
# flotilla-worker-batch-tls: keys tls.crt, tls.key, ca.crt).
#
# Exit status: 0 done, 1 openssl failed, 2 bad usage.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 3 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
fi
out=$1
ns=${2:-flotilla-system}
days=${3:-365}
mkdir -p "$out"
cd "$out"
umask 077

# The CA: basicConstraints CA:TRUE, may sign certificates.
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
  -keyout ca.key -out ca.crt -days "$days" -subj "/CN=flotilla-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# issue NAME CN SUBJECT_ALT_NAMES EXTENDED_KEY_USAGE
issue() {
  local name=$1 cn=$2 san=$3 eku=$4
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$name.key" -out "$name.csr" -subj "/CN=$cn" 2>/dev/null
  printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=$eku" \
    "subjectAltName=$san" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out "$name.crt" -days "$days" -extfile "$name.ext" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

svc=flotilla-coordinator
issue coordinator "$svc.$ns.svc" \
  "DNS:$svc,DNS:$svc.$ns,DNS:$svc.$ns.svc,DNS:$svc.$ns.svc.cluster.local,DNS:localhost,IP:127.0.0.1" \
  serverAuth
for class in online batch; do
  issue "worker-$class" "flotilla-worker-$class" "DNS:$class.worker.flotilla.internal" clientAuth
done
rm -f ca.srl
chmod 644 ./*.crt

cat <<EOF
certificates written to $out; load them with:
  kubectl -n $ns create secret generic flotilla-coordinator-tls \\
    --from-file=tls.crt=$out/coordinator.crt --from-file=tls.key=$out/coordinator.key --from-file=ca.crt=$out/ca.crt
  kubectl -n $ns create secret generic flotilla-worker-online-tls \\
    --from-file=tls.crt=$out/worker-online.crt --from-file=tls.key=$out/worker-online.key --from-file=ca.crt=$out/ca.crt
  kubectl -n $ns create secret generic flotilla-worker-batch-tls \\
    --from-file=tls.crt=$out/worker-batch.crt --from-file=tls.key=$out/worker-batch.key --from-file=ca.crt=$out/ca.crt
EOF
