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

{{/*
The worker's shared memory regions, from the plan: one a partition of
tritonMaxInflight slots of a chunkSeconds chunk (16 kHz float32, as the
worker's triton.SharedMemoryBytes sizes them), reserved at start and
charged to the worker's memory; /dev/shm holds them and each partition's
Python backend region. Refuses a worker memory limit that cannot hold the
regions and 1 GiB for its jobs. Takes dict "plan" "values".
*/}}
{{- define "fleetscribe.sharedMemory" -}}
{{- $w := .values.worker -}}
{{- range $k := list "FLEETSCRIBE_TRITON_MAX_INFLIGHT" "FLEETSCRIBE_CHUNK_SECONDS" "FLEETSCRIBE_TRITON_SHARED_MEMORY_BUDGET" -}}
{{- if hasKey ($w.env | default dict) $k -}}
{{- fail (printf "worker.env.%s: the chart sets it (worker.tritonMaxInflight, worker.chunkSeconds); set those instead" $k) -}}
{{- end -}}
{{- end -}}
{{- $inflight := int $w.tritonMaxInflight -}}
{{- $chunk := int $w.chunkSeconds -}}
{{- if or (lt $inflight 1) (lt $chunk 1) -}}
{{- fail "worker.tritonMaxInflight and worker.chunkSeconds must be positive" -}}
{{- end -}}
{{- $slot := mul $chunk 16000 4 -}}
{{- $parts := len .plan.partitions -}}
{{- $enabled := ne .plan.sharing "device-plugin-mps" -}}
{{- $regions := 0 -}}
{{- if $enabled -}}{{- $regions = mul $parts $inflight $slot -}}{{- end -}}
{{- $regionsMi := add (div $regions 1048576) 1 -}}
{{- $limit := toString (dig "resources" "limits" "memory" "" $w) -}}
{{- $limitMi := 0 -}}
{{- if hasSuffix "Gi" $limit -}}{{- $limitMi = mul (trimSuffix "Gi" $limit | int) 1024 -}}
{{- else if hasSuffix "Mi" $limit -}}{{- $limitMi = trimSuffix "Mi" $limit | int -}}
{{- else -}}{{- fail (printf "worker.resources.limits.memory %q: give it in Mi or Gi; the chart checks it holds the shared memory regions" $limit) -}}
{{- end -}}
{{- if lt $limitMi (add $regionsMi 1024) -}}
{{- fail (printf "worker.resources.limits.memory %s cannot hold the worker's shared memory regions (%d MiB: %d partitions x %d in flight x %d-s chunks, reserved at start and charged to the worker) and 1 GiB for its jobs: raise it to %dMi, or lower worker.tritonMaxInflight" $limit $regionsMi $parts $inflight $chunk (add $regionsMi 1024)) -}}
{{- end -}}
enabled: {{ $enabled }}
inflight: {{ $inflight }}
chunkSeconds: {{ $chunk }}
regionsBytes: {{ $regions }}
sizeMi: {{ if $enabled }}{{ add $regionsMi (mul $parts (int .values.sharedMemory.tritonPerPartitionMi)) }}{{ else }}64{{ end }}
{{- end -}}

{{/*
An image of the chart's own (worker, triton): the repository is required,
since neither is on a registry EKS pulls from by default (push them to
your ECR: the repository's Dockerfile, make triton-image); the tag defaults to the chart's
appVersion for the worker. Takes dict "name" "image" "chart".
*/}}
{{- define "fleetscribe.image" -}}
{{- $repo := required (printf "image.%s.repository: the %s image in your registry (e.g. <account>.dkr.ecr.<region>.amazonaws.com/%s); push it first (docs/kubernetes.md)" .name .name (ternary "fleetscribe/worker" "fleetscribe-triton" (eq .name "worker"))) .image.repository -}}
{{- printf "%s:%s" $repo (.image.tag | default .chart.AppVersion) -}}
{{- end -}}
