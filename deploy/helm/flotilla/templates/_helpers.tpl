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
