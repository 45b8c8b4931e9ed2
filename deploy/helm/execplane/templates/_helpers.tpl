{{/* The release's base name: the release name, or "execplane" inside it. */}}
{{- define "execplane.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "execplane.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "gateway"). */}}
{{- define "execplane.selector" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
The labels of one component's Pods, (dict "ctx" $ "component" "gateway"): the chart's own,
then the component's podLabels. A podLabels key the chart sets itself fails the render
instead of winning or being dropped: the Deployment (whose selector is immutable), the
Service, the PodDisruptionBudget and the NetworkPolicies find these Pods by the selector
labels, so an override would orphan the Pods or cut them off, and a silently dropped value
would hide the mistake from the operator who wrote it.
*/}}
{{- define "execplane.podLabels" -}}
{{- $own := printf "%s\napp.kubernetes.io/component: %s" (include "execplane.labels" .ctx) .component -}}
{{- $extra := (index .ctx.Values .component).podLabels | default dict -}}
{{- range $key := keys (fromYaml $own) | sortAlpha -}}
{{- if hasKey $extra $key -}}
{{- fail (printf "%s.podLabels: %q is one of the chart's own labels on these Pods (their Deployment, Service, PodDisruptionBudget and NetworkPolicies select by them); choose another key" $.component $key) -}}
{{- end -}}
{{- end -}}
{{- $own }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The annotations of one component's Pods, (dict "ctx" $ "component" "gateway" "own" (dict …)):
the chart's own (checksums that roll the Pods when the configuration they stand for
changes), then the component's podAnnotations without the chart's keys — a checksum must
follow its configuration, so the chart's value wins.
*/}}
{{- define "execplane.podAnnotations" -}}
{{- $extra := omit ((index .ctx.Values .component).podAnnotations | default dict) -}}
{{- range $key := keys .own -}}
{{- $_ := unset $extra $key -}}
{{- end -}}
{{- toYaml .own }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The scheduling fields of one component's Pod spec, (dict "ctx" $ "component" "gateway").
Unset values render nothing, except affinity: without one, the replicas prefer distinct
nodes. A topology spread constraint without a labelSelector gets the component's selector
labels: without one it would count no Pods, and so spread nothing (and matchLabelKeys is
refused without one).
*/}}
{{- define "execplane.podScheduling" -}}
{{- $values := index .ctx.Values .component -}}
{{- $selector := include "execplane.selector" (dict "ctx" .ctx "component" .component) -}}
{{- with $values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if $values.affinity }}
  {{- toYaml $values.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- $selector | nindent 14 }}
{{- end }}
{{- with $values.topologySpreadConstraints }}
{{- $constraints := list }}
{{- range . }}
{{- if hasKey . "labelSelector" }}
{{- $constraints = append $constraints . }}
{{- else }}
{{- $constraints = append $constraints (merge (dict "labelSelector" (dict "matchLabels" (fromYaml $selector))) .) }}
{{- end }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An image reference: (dict "ctx" $ "name" "gateway"): by digest when image.digests names
one (the tag then only documents it), by tag otherwise. */}}
{{- define "execplane.image" -}}
{{- $ref := printf "%s/%s:%s" .ctx.Values.image.repository .name (default .ctx.Chart.AppVersion .ctx.Values.image.tag) -}}
{{- with get (default (dict) .ctx.Values.image.digests) .name -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{- define "execplane.controllerServerName" -}}
{{- default (printf "%s-controller.%s.svc" (include "execplane.fullname" .) .Release.Namespace) .Values.gateway.controllerServerName -}}
{{- end -}}

{{/* The restricted security context every execplane container runs with. */}}
{{- define "execplane.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "execplane.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The security material volume: every file in one projected volume. */}}
{{- define "execplane.securityVolume" -}}
- name: security
  projected:
    sources:
      {{- toYaml .Values.security.sources | nindent 6 }}
- name: profiles
  configMap:
    name: {{ include "execplane.fullname" . }}-profiles
{{- end -}}

{{/* The gateway identities the controller admits. */}}
{{- define "execplane.gatewayIdentities" -}}
{{- if .Values.controller.gatewayIdentities -}}
{{- toYaml .Values.controller.gatewayIdentities -}}
{{- else -}}
{{- list (printf "spiffe://%s/ns/%s/sa/%s-gateway" .Values.trustDomain .Release.Namespace (include "execplane.fullname" .)) | toYaml -}}
{{- end -}}
{{- end -}}

{{/* The executor namespace: executor Pods, workspace claims and the ExecutionEnvironments. */}}
{{- define "execplane.executorNamespace" -}}
{{- default (printf "%s-executors" .Release.Namespace | trunc 63 | trimSuffix "-") .Values.executorNamespace.name -}}
{{- end -}}

{{/* The controller's and the gateway's ServiceAccount user names. */}}
{{- define "execplane.controllerUser" -}}
{{- printf "system:serviceaccount:%s:%s-controller" .Release.Namespace (include "execplane.fullname" .) -}}
{{- end -}}
