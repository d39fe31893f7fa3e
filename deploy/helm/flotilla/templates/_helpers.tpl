{{/*
Named templates shared by the chart's manifests. Keep to plain Go-template
constructs: tests/deploy_manifests.rs renders the chart with a Go-template
engine plus Helm's `include`, `toYaml` and `nindent` only.
*/}}

{{/* Labels on every object. */}}
{{- define "flotilla.labels" -}}
app.kubernetes.io/name: flotilla
app.kubernetes.io/part-of: flotilla
{{- end }}

{{/* Selector labels of the coordinator pods (Deployment, Service, anti-affinity). */}}
{{- define "flotilla.coordinator.selectorLabels" -}}
app.kubernetes.io/name: flotilla
app.kubernetes.io/component: coordinator
{{- end }}

{{/* Pod securityContext of every Flotilla pod: non-root, RuntimeDefault seccomp. */}}
{{- define "flotilla.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Container securityContext of every Flotilla container. */}}
{{- define "flotilla.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/* The coordinator Service's DNS names, its server certificate's names. */}}
{{- define "flotilla.coordinator.dnsNames" -}}
- flotilla-coordinator
- flotilla-coordinator.{{ .Values.namespace }}
- flotilla-coordinator.{{ .Values.namespace }}.svc
- flotilla-coordinator.{{ .Values.namespace }}.svc.cluster.local
{{- end }}

{{/*
The Secrets of the control channel's mutual TLS, made by Helm (tls.generate):
the CA (flotilla-ca; no pod mounts it), the coordinator's server certificate
(flotilla-coordinator-tls) and one client certificate per worker pool
(flotilla-worker-<class>-tls, DNS name <class>.worker.flotilla.internal: the
class the coordinator lets it register for). Dot: a dict with Values, ca (the
CA: genCA's or the existing one's) and reuse (the CA existed: keep the
certificates already issued).
*/}}
{{- define "flotilla.tlsSecrets" -}}
{{- $ns := .Values.namespace }}
{{- $days := int .Values.tls.validityDays }}
{{- $svc := "flotilla-coordinator" }}
apiVersion: v1
kind: Secret
metadata:
  name: flotilla-ca
  namespace: {{ $ns }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
type: kubernetes.io/tls
data:
  tls.crt: {{ b64enc .ca.Cert }}
  tls.key: {{ b64enc .ca.Key }}
{{- $old := lookup "v1" "Secret" $ns "flotilla-coordinator-tls" }}
---
apiVersion: v1
kind: Secret
metadata:
  name: flotilla-coordinator-tls
  namespace: {{ $ns }}
  labels:
    {{- include "flotilla.labels" . | nindent 4 }}
    app.kubernetes.io/component: coordinator
type: kubernetes.io/tls
data:
{{- if and .reuse $old }}
  {{- toYaml $old.data | nindent 2 }}
{{- else }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) (list) (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) $days .ca }}
  tls.crt: {{ b64enc $cert.Cert }}
  tls.key: {{ b64enc $cert.Key }}
  ca.crt: {{ b64enc .ca.Cert }}
{{- end }}
{{- range .Values.workers }}
{{- $name := printf "flotilla-worker-%s-tls" .class }}
{{- $old := lookup "v1" "Secret" $ns $name }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ $name }}
  namespace: {{ $ns }}
  labels:
    {{- include "flotilla.labels" $ | nindent 4 }}
    app.kubernetes.io/component: worker
    flotilla.io/workload-class: {{ .class }}
type: kubernetes.io/tls
data:
{{- if and $.reuse $old }}
  {{- toYaml $old.data | nindent 2 }}
{{- else }}
{{- $cert := genSignedCert (printf "flotilla-worker-%s" .class) (list) (list (printf "%s.worker.flotilla.internal" .class)) $days $.ca }}
  tls.crt: {{ b64enc $cert.Cert }}
  tls.key: {{ b64enc $cert.Key }}
  ca.crt: {{ b64enc $.ca.Cert }}
{{- end }}
{{- end }}
{{- end }}
