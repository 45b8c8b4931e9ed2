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

{{/* An image reference: (dict "ctx" $ "name" "gateway"). */}}
{{- define "execplane.image" -}}
{{- printf "%s/%s:%s" .ctx.Values.image.repository .name (default .ctx.Chart.AppVersion .ctx.Values.image.tag) -}}
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
