{{/* Names and labels. */}}
{{- define "fleetscribe.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fleetscribe.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleetscribe.labels" -}}
{{ include "fleetscribe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fleetscribe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fleetscribe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: the existing service account (serviceAccount.create is false)" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The plan, checked: every template reads the partitions from here, so the
containers that run them and the addresses the worker dials are one list.
*/}}
{{- define "fleetscribe.plan" -}}
{{- $p := .Values.plan | default dict -}}
{{- if not $p.partitions -}}
{{- fail "plan: no partitions; give a plan: -f plans/gpus<N>-<sharing>.yaml, or write one with `worker mps helm`" -}}
{{- end -}}
{{- if not (has $p.sharing (list "mps" "device-plugin-mps" "device-plugin-timeslicing")) -}}
{{- fail (printf "plan.sharing %q: want mps, device-plugin-mps or device-plugin-timeslicing" (toString $p.sharing)) -}}
{{- end -}}
{{- if ne (len $p.partitions) (mul $p.gpus $p.perGPU | int) -}}
{{- fail (printf "plan: %d partitions, but %d GPUs x %d per GPU; regenerate it with `worker mps helm`" (len $p.partitions) (int $p.gpus) (int $p.perGPU)) -}}
{{- end -}}
{{- toYaml $p -}}
{{- end -}}

{{/* The worker's -triton-addrs: every partition's gRPC port in the pod. */}}
{{- define "fleetscribe.tritonAddrs" -}}
{{- $addrs := list -}}
{{- range .partitions -}}
{{- $addrs = append $addrs (printf "127.0.0.1:%d" (int .grpcPort)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* Seconds as a Go duration for the worker's flags. */}}
{{- define "fleetscribe.seconds" -}}
{{- printf "%ds" (int .) -}}
{{- end -}}
