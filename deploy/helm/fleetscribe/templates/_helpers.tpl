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

{{/*
A CPU quantity in millicores ("250m", "2", "0.5" refused: give 500m) or a
memory quantity in MiB ("512Mi", "3Gi"), for the chart's sums. Takes dict
"q" "kind" ("cpu" or "memory") "what" (the value's name, for the error).
*/}}
{{- define "fleetscribe.quantity" -}}
{{- $q := toString .q -}}
{{- if eq .kind "cpu" -}}
{{- if regexMatch "^[0-9]+m$" $q -}}{{- trimSuffix "m" $q | int -}}
{{- else if regexMatch "^[0-9]+$" $q -}}{{- mul ($q | int) 1000 -}}
{{- else -}}{{- fail (printf "%s %q: give CPU in m or whole cores (250m, 2); the chart adds the pod's requests up" .what $q) -}}
{{- end -}}
{{- else -}}
{{- if regexMatch "^[0-9]+Mi$" $q -}}{{- trimSuffix "Mi" $q | int -}}
{{- else if regexMatch "^[0-9]+Gi$" $q -}}{{- mul (trimSuffix "Gi" $q | int) 1024 -}}
{{- else -}}{{- fail (printf "%s %q: give it in Mi or Gi; the chart adds the pod's requests up" .what $q) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
What the pod asks for, from the plan: each Triton container's requests
(triton.perPartition times the partitions it runs), the worker's, the
small init containers', and the pod's total (what the scheduler places:
the sidecars and the worker together; the init containers ask less than
that). Where nodeType names an instance, refuses a plan whose GPUs or
total that node cannot hold. Takes dict "plan" "values".
*/}}
{{- define "fleetscribe.podResources" -}}
{{- $v := .values -}}
{{- $per := $v.triton.perPartition -}}
{{- $cpu := include "fleetscribe.quantity" (dict "q" $per.cpu "kind" "cpu" "what" "triton.perPartition.cpu") | int -}}
{{- $mem := include "fleetscribe.quantity" (dict "q" $per.memory "kind" "memory" "what" "triton.perPartition.memory") | int -}}
{{- $parts := len .plan.partitions -}}
{{- $perContainer := ternary $parts 1 (eq .plan.sharing "mps") -}}
{{- $containers := ternary 1 $parts (eq .plan.sharing "mps") -}}
{{- $wr := $v.worker.resources.requests | default dict -}}
{{- $wcpu := include "fleetscribe.quantity" (dict "q" (get $wr "cpu" | default "0m") "kind" "cpu" "what" "worker.resources.requests.cpu") | int -}}
{{- $wmem := include "fleetscribe.quantity" (dict "q" (get $wr "memory" | default "0Mi") "kind" "memory" "what" "worker.resources.requests.memory") | int -}}
{{- $disk := include "fleetscribe.quantity" (dict "q" $v.worker.tmpSizeLimit "kind" "memory" "what" "worker.tmpSizeLimit") | int -}}
{{- if $v.model.s3Uri -}}
{{- $disk = add $disk (include "fleetscribe.quantity" (dict "q" $v.model.sizeLimit "kind" "memory" "what" "model.sizeLimit") | int) -}}
{{- end -}}
{{- if not $v.compileCache.volume -}}
{{- $disk = add $disk (include "fleetscribe.quantity" (dict "q" $v.compileCache.sizeLimit "kind" "memory" "what" "compileCache.sizeLimit") | int) -}}
{{- end -}}
{{- $totalCPU := add (mul $cpu $parts) $wcpu -}}
{{- $totalMem := add (mul $mem $parts) $wmem -}}
tritonCPU: {{ printf "%dm" (mul $cpu $perContainer) }}
tritonMemory: {{ printf "%dMi" (mul $mem $perContainer) }}
diskMi: {{ $disk }}
totalCPU: {{ $totalCPU }}
totalMemoryMi: {{ $totalMem }}
{{- with $v.nodeType }}
{{- $sizes := dict "g6e.xlarge" (list 4 32 1) "g6e.2xlarge" (list 8 64 1) "g6e.4xlarge" (list 16 128 1) "g6e.8xlarge" (list 32 256 1) "g6e.16xlarge" (list 64 512 1) "g6e.12xlarge" (list 48 384 4) "g6e.24xlarge" (list 96 768 4) "g6e.48xlarge" (list 192 1536 8) -}}
{{- if not (hasKey $sizes .) -}}
{{- fail (printf "nodeType %q: the chart knows the g6e sizes (g6e.xlarge ... g6e.48xlarge); leave it empty to skip the check" .) -}}
{{- end -}}
{{- $s := get $sizes . -}}
{{- $vcpu := index $s 0 -}}
{{- if ne (int (index $s 2)) (int $.plan.gpus) -}}
{{- fail (printf "nodeType %s has %d GPUs; the plan is for %d (a plan for fewer strands the rest, one for more never fits): use plans/gpus%d-%s.yaml" . (int (index $s 2)) (int $.plan.gpus) (int (index $s 2)) $.plan.sharing) -}}
{{- end -}}
{{- /* EKS's kubelet reservations: CPU 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest; memory 255Mi + 11Mi a pod (110 pods below 30 vCPUs, 250 above) and 100Mi eviction; the kernel keeps about 3% of the instance's memory. */ -}}
{{- $cpuAlloc := sub (mul $vcpu 1000) (add 80 (div (mul (sub $vcpu 4) 5) 2)) -}}
{{- $pods := ternary 110 250 (lt (int $vcpu) 30) -}}
{{- $memAlloc := sub (div (mul (index $s 1) 1024 97) 100) (add 255 (mul 11 $pods) 100) -}}
{{- if or (gt (int $totalCPU) (int $cpuAlloc)) (gt (int $totalMem) (int $memAlloc)) -}}
{{- fail (printf "nodeType %s cannot hold the pod: it asks %dm CPU and %dMi memory (%d partitions x triton.perPartition, and the worker), the node offers %dm and %dMi after the kubelet's reservations; lower triton.perPartition or take a larger node" . (int $totalCPU) (int $totalMem) $parts (int $cpuAlloc) (int $memAlloc)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
