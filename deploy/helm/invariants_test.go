package helm_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	keda "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoring "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/fleetscribe/fleetscribe/mps"
	"github.com/fleetscribe/fleetscribe/triton"
)

// invariant is a property every rendering must have, and a mutation of a
// rendering that breaks it.
type invariant struct {
	name      string
	appliesTo string // a sharing mode, or "" for all
	check     func(rendering) error
	mutation  string
	mutate    func(rendering)
}

var invariants = []invariant{
	{
		name:     "grace_period_covers_the_drain",
		check:    checkGrace,
		mutation: "terminationGracePeriodSeconds = the drain timeout",
		mutate: func(r rendering) {
			d := r.deployment()
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(1800))
		},
	},
	{
		name:     "worker_dials_the_plan",
		check:    checkWorkerAddrs,
		mutation: "one partition's address left out of FLEETSCRIBE_TRITON_ADDRS",
		mutate: func(r rendering) {
			w := container(&r.deployment().Spec.Template.Spec, "worker")
			for i, e := range w.Env {
				if e.Name == "FLEETSCRIBE_TRITON_ADDRS" {
					w.Env[i].Value = e.Value[:strings.LastIndexByte(e.Value, ',')]
				}
			}
		},
	},
	{
		name:     "partitions_run_the_plan",
		check:    checkPartitions,
		mutation: "a partition's --grpc-port moved, or the MPS run's -per-gpu changed",
		mutate: func(r rendering) {
			spec := &r.deployment().Spec.Template.Spec
			c := container(spec, tritons(spec)[0].Name)
			for i, a := range c.Command {
				if strings.HasPrefix(a, "--grpc-port=") && !strings.Contains(a, "{") {
					c.Command[i] = "--grpc-port=9999"
				}
				if a == "-per-gpu=8" {
					c.Command[i] = "-per-gpu=4"
				}
			}
		},
	},
	{
		name:     "gpus_requested_are_the_plans",
		check:    checkGPUs,
		mutation: "one GPU (replica) fewer asked for",
		mutate: func(r rendering) {
			spec := &r.deployment().Spec.Template.Spec
			c := container(spec, tritons(spec)[0].Name)
			n := c.Resources.Limits[gpu]
			n.Sub(resource.MustParse("1"))
			c.Resources.Limits[gpu] = n
		},
	},
	{
		name:      "device_plugin_replicas_are_the_plans",
		appliesTo: mps.KubeDevicePluginMPS,
		check:     checkDevicePlugin,
		mutation:  "the device plugin offers 4 replicas per GPU for a plan of 8",
		mutate: func(r rendering) {
			cm := devicePluginConfig(r)
			for k, v := range cm.Data {
				cm.Data[k] = strings.Replace(v, "replicas: 8", "replicas: 4", 1)
			}
		},
	},
	{
		name:     "partitions_outlive_the_drain",
		check:    checkLifecycle,
		mutation: "the Triton containers as plain init containers (no restartPolicy: Always)",
		mutate: func(r rendering) {
			spec := &r.deployment().Spec.Template.Spec
			for i := range spec.InitContainers {
				spec.InitContainers[i].RestartPolicy = nil
			}
		},
	},
	{
		name:     "preStop_and_probes_reach_the_worker",
		check:    checkProbes,
		mutation: "the preStop drain aimed at another port",
		mutate: func(r rendering) {
			w := container(&r.deployment().Spec.Template.Spec, "worker")
			w.Lifecycle.PreStop.Exec.Command[3] = "127.0.0.1:9200"
		},
	},
	{
		name:     "scaling_is_the_terraform_rule",
		check:    checkScaling,
		mutation: "the in-flight messages counted without the cap of what the pods hold",
		mutate: func(r rendering) {
			so := must[*keda.ScaledObject](r.one("ScaledObject"))
			f := so.Spec.Advanced.ScalingModifiers.Formula
			so.Spec.Advanced.ScalingModifiers.Formula = f[:strings.Index(f, " + ((")] + " + (live_all - live_visible) + 0.1 * (bulk_all - bulk_visible)"
		},
	},
	{
		name:     "metrics_reach_prometheus_and_the_alerts",
		check:    checkMetrics,
		mutation: "the Service's job label renamed, so alerts.yml's up{job=...} matches nothing",
		mutate: func(r rendering) {
			svc := must[*corev1.Service](r.one("Service"))
			svc.Labels[jobLabel] = "worker"
		},
	},
	{
		name:     "disruptions_are_bounded",
		check:    checkDisruption,
		mutation: "the PodDisruptionBudget selects no pod",
		mutate: func(r rendering) {
			pdb := must[*policyv1.PodDisruptionBudget](r.one("PodDisruptionBudget"))
			pdb.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] = "other"
		},
	},
	{
		name:     "least_privilege_pod",
		check:    checkPrivilege,
		mutation: "hostIPC on the pod",
		mutate:   func(r rendering) { r.deployment().Spec.Template.Spec.HostIPC = true },
	},
	{
		name:     "pod_security_restricted",
		check:    checkPodSecurity,
		mutation: "the worker allowed to escalate privileges",
		mutate: func(r rendering) {
			container(&r.deployment().Spec.Template.Spec, "worker").SecurityContext.AllowPrivilegeEscalation = ptr(true)
		},
	},
	{
		name:     "placement_is_the_plans",
		check:    checkPlacement,
		mutation: "the node affinity's GPU count one more than the plan's",
		mutate: func(r rendering) {
			for _, term := range r.deployment().Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				for j, e := range term.MatchExpressions {
					if e.Key == "nvidia.com/gpu.count" {
						term.MatchExpressions[j].Values = []string{strconv.Itoa(r.Plan.GPUs + 1)}
					}
				}
			}
		},
	},
	{
		name:     "requests_are_the_plans",
		check:    checkRequests,
		mutation: "every Triton container back at a fixed 4 CPU and 16Gi, whatever partitions it runs",
		mutate: func(r rendering) {
			spec := &r.deployment().Spec.Template.Spec
			for i := range spec.InitContainers {
				if c := &spec.InitContainers[i]; strings.HasPrefix(c.Name, "triton") {
					c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}
				}
			}
		},
	},
	{
		name:     "spread_over_zones",
		check:    checkZoneSpread,
		mutation: "the pods spread over nodes instead of zones",
		mutate: func(r rendering) {
			c := r.deployment().Spec.Template.Spec.TopologySpreadConstraints
			for i := range c {
				c[i].TopologyKey = "kubernetes.io/hostname"
			}
		},
	},
	{
		name:     "shared_memory_holds_the_plan",
		check:    checkSharedMemory,
		mutation: "the pod's /dev/shm back at a fixed 512Mi, and mounted in every partition",
		mutate: func(r rendering) {
			spec := &r.deployment().Spec.Template.Spec
			for i, v := range spec.Volumes {
				if v.Name == "shm" {
					spec.Volumes[i].EmptyDir.SizeLimit = ptr(resource.MustParse("512Mi"))
				}
			}
			for i := range spec.InitContainers {
				c := &spec.InitContainers[i]
				if strings.HasPrefix(c.Name, "triton") && !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "shm" }) {
					c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "shm", MountPath: "/dev/shm"})
				}
			}
		},
	},
}

// checkSharedMemory: the worker reserves a region a partition at start
// (its in-flight slots of its longest chunk, as triton.SharedMemoryBytes
// sizes it), so its budget must hold every partition's, its memory limit
// those and 1 GiB for its jobs (tmpfs pages are charged to it), and
// /dev/shm those and 32 MiB a partition for the Python backend's own.
func checkSharedMemory(r rendering) error {
	spec := r.deployment().Spec.Template.Spec
	w := container(&spec, "worker")
	if r.Plan.Sharing == mps.KubeDevicePluginMPS {
		// The plugin mounts its MPS /dev/shm in the partitions: they must
		// not get the pod's, and the worker sends audio in the request.
		for _, c := range tritons(&spec) {
			for _, m := range c.VolumeMounts {
				if m.Name == "shm" {
					return fmt.Errorf("%s mounts the pod's /dev/shm over the device plugin's MPS one", c.Name)
				}
			}
		}
		if env(w, "FLEETSCRIBE_TRITON_SHARED_MEMORY") != "false" {
			return errors.New("the worker offers shared memory to partitions that cannot map it")
		}
		return nil
	}
	inflight, err1 := strconv.Atoi(env(w, "FLEETSCRIBE_TRITON_MAX_INFLIGHT"))
	chunk, err2 := strconv.ParseFloat(env(w, "FLEETSCRIBE_CHUNK_SECONDS"), 64)
	budget, err3 := strconv.ParseInt(env(w, "FLEETSCRIBE_TRITON_SHARED_MEMORY_BUDGET"), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("the worker's shared memory settings: %w", err)
	}
	parts := int64(len(r.Plan.Partitions))
	regions := parts * triton.SharedMemoryBytes(inflight, int(chunk*16000))
	if budget < regions {
		return fmt.Errorf("shared memory budget %d bytes, below the %d partitions' regions (%d bytes): some would go over gRPC", budget, parts, regions)
	}
	if lim, ok := w.Resources.Limits[corev1.ResourceMemory]; !ok || lim.Value() < regions+1<<30 {
		return fmt.Errorf("worker memory limit %v cannot hold its regions (%d MiB) and 1 GiB for jobs", w.Resources.Limits.Memory(), regions>>20)
	}
	for _, v := range spec.Volumes {
		if v.Name != "shm" {
			continue
		}
		if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit == nil {
			return fmt.Errorf("/dev/shm is not a sized memory emptyDir: %+v", v.VolumeSource)
		}
		if need := regions + parts*32<<20; v.EmptyDir.SizeLimit.Value() < need {
			return fmt.Errorf("/dev/shm of %v, below the regions (%d MiB) and 32 MiB a partition for Triton (%d MiB)", v.EmptyDir.SizeLimit, regions>>20, need>>20)
		}
		return nil
	}
	return errors.New("no /dev/shm volume")
}

const (
	gpu      = corev1.ResourceName("nvidia.com/gpu")
	jobLabel = "fleetscribe.io/job"
)

func ptr[T any](v T) *T { return &v }

func workerDuration(w *corev1.Container, name string) (time.Duration, error) {
	d, err := time.ParseDuration(env(w, name))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

func checkGrace(r rendering) error {
	spec := r.deployment().Spec.Template.Spec
	w := container(&spec, "worker")
	drain, err := workerDuration(w, "FLEETSCRIBE_DRAIN_TIMEOUT")
	if err != nil {
		return err
	}
	job, err := workerDuration(w, "FLEETSCRIBE_JOB_TIMEOUT")
	if err != nil {
		return err
	}
	if drain < job {
		return fmt.Errorf("drain %s shorter than a job (%s)", drain, job)
	}
	if spec.TerminationGracePeriodSeconds == nil {
		return errors.New("no terminationGracePeriodSeconds")
	}
	// The drain, then releasing what is left and exiting.
	if grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; grace < drain+30*time.Second {
		return fmt.Errorf("grace period %s leaves under 30 s after a drain of %s", grace, drain)
	}
	return nil
}

func checkWorkerAddrs(r rendering) error {
	w := container(&r.deployment().Spec.Template.Spec, "worker")
	if got, want := env(w, "FLEETSCRIBE_TRITON_ADDRS"), strings.Join(mps.Addrs("127.0.0.1", r.Plan.Partitions), ","); got != want {
		return fmt.Errorf("worker dials %q, the plan runs %q", got, want)
	}
	if got := env(w, "FLEETSCRIBE_GPUS"); got != strconv.Itoa(r.Plan.GPUs) {
		return fmt.Errorf("FLEETSCRIBE_GPUS %q for a plan of %d", got, r.Plan.GPUs)
	}
	if got := env(w, "FLEETSCRIBE_CONCURRENCY"); got != strconv.Itoa(16*r.Plan.GPUs) {
		return fmt.Errorf("FLEETSCRIBE_CONCURRENCY %q: want 16 jobs per GPU", got)
	}
	return nil
}

// runPlan is the plan `worker mps run` starts given the container's
// flags: `worker mps plan` with the same flags, which plans through the
// same code as run.
func runPlan(cmd []string) ([]mps.Partition, error) {
	i, j := indexOf(cmd, "run"), indexOf(cmd, "--")
	if i < 0 || j < i {
		return nil, fmt.Errorf("not a worker mps run command: %q", cmd)
	}
	args := append(append([]string{"mps", "plan"}, cmd[i+1:j]...), "-format", "json")
	out, err := exec.Command(builtWorker, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", strings.Join(args, " "), err)
	}
	var ps []mps.Partition
	if err := json.Unmarshal(out, &ps); err != nil {
		return nil, err
	}
	return ps, nil
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func checkPartitions(r rendering) error {
	spec := r.deployment().Spec.Template.Spec
	ts := tritons(&spec)
	if r.Plan.Sharing == mps.KubeMPS {
		if len(ts) != 1 {
			return fmt.Errorf("%d Triton containers, want the one that runs the plan", len(ts))
		}
		got, err := runPlan(ts[0].Command)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(got, r.Plan.Partitions) {
			return fmt.Errorf("the container's worker mps run starts %d partitions from port %d, the plan has %d from %d",
				len(got), got[0].GRPCPort, len(r.Plan.Partitions), r.Plan.Partitions[0].GRPCPort)
		}
		tail := strings.Join(ts[0].Command[indexOf(ts[0].Command, "--")+1:], " ")
		for _, ph := range []string{"--grpc-port={grpc_port}", "--http-port={http_port}", "--metrics-port={metrics_port}"} {
			if !strings.Contains(tail, ph) {
				return fmt.Errorf("tritonserver is not given %s: %s", ph, tail)
			}
		}
		return nil
	}
	if len(ts) != len(r.Plan.Partitions) {
		return fmt.Errorf("%d Triton containers for %d partitions", len(ts), len(r.Plan.Partitions))
	}
	for i, p := range r.Plan.Partitions {
		want := append([]string{"tritonserver"}, p.TritonArgs("/models")...)
		if !reflect.DeepEqual(ts[i].Command, want) {
			return fmt.Errorf("container %s runs %q, partition %s is %q", ts[i].Name, ts[i].Command, p.Name(), want)
		}
		for kind, probe := range map[string]*corev1.Probe{"startup": ts[i].StartupProbe, "liveness": ts[i].LivenessProbe} {
			if probe == nil {
				continue // which ones there are: partitions_outlive_the_drain
			}
			if got := probe.HTTPGet.Port.IntValue(); got != p.HTTPPort {
				return fmt.Errorf("container %s's %s probe asks port %d, its HTTP port is %d", ts[i].Name, kind, got, p.HTTPPort)
			}
		}
	}
	return nil
}

func checkGPUs(r rendering) error {
	spec := r.deployment().Spec.Template.Spec
	var total int64
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if n, ok := c.Resources.Limits[gpu]; ok {
				if !strings.HasPrefix(c.Name, "triton") {
					return fmt.Errorf("container %s asks for GPUs", c.Name)
				}
				total += n.Value()
			}
		}
	}
	want := int64(r.Plan.GPUs)
	if r.Plan.Sharing != mps.KubeMPS {
		want = int64(r.Plan.GPUs * r.Plan.PerGPU) // device plugin replicas
	}
	if total != want {
		return fmt.Errorf("the pod asks for %d of %s, the plan needs %d", total, gpu, want)
	}
	return nil
}

func devicePluginConfig(r rendering) *corev1.ConfigMap {
	for _, o := range r.Objects {
		if o.Kind == "ConfigMap" && strings.HasSuffix(o.Name, "-device-plugin") {
			return o.Value.(*corev1.ConfigMap)
		}
	}
	return nil
}

func checkDevicePlugin(r rendering) error {
	cm := devicePluginConfig(r)
	if r.Plan.Sharing == mps.KubeMPS {
		if cm != nil {
			return errors.New("a device plugin sharing configuration for a pod that runs its own MPS daemon")
		}
		return nil
	}
	mode := map[string]string{mps.KubeDevicePluginMPS: "mps", mps.KubeDevicePluginTimeSlicing: "timeslicing"}[r.Plan.Sharing]
	planKey := fmt.Sprintf("fleetscribe-%s-%d", mode, r.Plan.PerGPU)
	// The plan's key, and one without sharing for the plugin's default: a
	// lone key would be every node's.
	if cm == nil || len(cm.Data) != 2 || strings.TrimSpace(cm.Data["fleetscribe-none"]) != "version: v1" || cm.Data[planKey] == "" {
		return fmt.Errorf("device plugin configuration %v: want %s and fleetscribe-none", cm, planKey)
	}
	if cm.Namespace == "" {
		return errors.New("the device plugin configuration is not in the plugin's namespace")
	}
	var cfg struct {
		Version string `json:"version"`
		Sharing map[string]struct {
			Resources []struct {
				Name     string `json:"name"`
				Replicas int    `json:"replicas"`
			} `json:"resources"`
		} `json:"sharing"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data[planKey]), &cfg); err != nil {
		return err
	}
	key := map[string]string{mps.KubeDevicePluginMPS: "mps", mps.KubeDevicePluginTimeSlicing: "timeSlicing"}[r.Plan.Sharing]
	res := cfg.Sharing[key].Resources
	if cfg.Version != "v1" || len(cfg.Sharing) != 1 || len(res) != 1 || res[0].Name != string(gpu) || res[0].Replicas != r.Plan.PerGPU {
		return fmt.Errorf("device plugin configuration %+v: want %s of %s with %d replicas", cfg, key, gpu, r.Plan.PerGPU)
	}
	return nil
}

func checkLifecycle(r rendering) error {
	spec := r.deployment().Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "worker" {
		return fmt.Errorf("containers %d: want the worker alone (the partitions are sidecars)", len(spec.Containers))
	}
	ts := tritons(&spec)
	for i, c := range ts {
		if container(&corev1.PodSpec{InitContainers: spec.InitContainers}, c.Name) == nil ||
			c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			return fmt.Errorf("%s is not a native sidecar: it would not be up before the worker or would stop before the drain ends", c.Name)
		}
		// The last sidecar's startup probe holds the worker back until it
		// serves; one on any before it would hold the next sidecar's start
		// back too, and the partitions would load one after another.
		switch last := i == len(ts)-1; {
		case last && c.StartupProbe == nil:
			return fmt.Errorf("%s has no startup probe: the worker could start before it serves", c.Name)
		case !last && c.StartupProbe != nil:
			return fmt.Errorf("%s has a startup probe: the sidecars after it would start only once it is ready, one model load after another", c.Name)
		}
		if c.LivenessProbe == nil {
			return fmt.Errorf("%s has no liveness probe", c.Name)
		}
	}
	return nil
}

func checkProbes(r rendering) error {
	w := container(&r.deployment().Spec.Template.Spec, "worker")
	if len(w.Ports) != 1 || w.Ports[0].Name != "metrics" {
		return fmt.Errorf("worker ports %+v", w.Ports)
	}
	port := w.Ports[0].ContainerPort
	if got := env(w, "FLEETSCRIBE_METRICS_ADDR"); got != fmt.Sprintf(":%d", port) {
		return fmt.Errorf("the worker listens on %q, its port is %d", got, port)
	}
	for name, p := range map[string]*corev1.Probe{"/readyz": w.ReadinessProbe, "/healthz": w.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port != intstr.FromString("metrics") {
			return fmt.Errorf("no probe of %s on the metrics port", name)
		}
	}
	want := []string{"/usr/local/bin/worker", "drain", "-addr", fmt.Sprintf("127.0.0.1:%d", port)}
	if w.Lifecycle == nil || w.Lifecycle.PreStop == nil || w.Lifecycle.PreStop.Exec == nil || !reflect.DeepEqual(w.Lifecycle.PreStop.Exec.Command, want) {
		return fmt.Errorf("preStop %+v: want %q", w.Lifecycle, want)
	}
	return nil
}

// backlogCase is a moment of the queues: the metrics KEDA's triggers
// report, and the backlog per GPU the Terraform fleet's target tracking
// computes for it (terraform/metricmath_test.go has the same cases).
type backlogCase struct {
	name                      string
	gpus                      int // per pod; 0: any
	liveVisible, liveInflight float64
	bulkVisible, bulkInflight float64
	pods                      float64
	want                      float64 // backlog per GPU; 0: from the rule
}

var backlogCases = []backlogCase{
	{name: "two 1-GPU pods", gpus: 1, liveVisible: 100, liveInflight: 20, pods: 2, want: 60},
	{name: "retry storm: 5,000 parked messages, 2 GPUs of 16 jobs", gpus: 1, liveInflight: 5000, pods: 2, want: 16},
	{name: "bulk backfill at a tenth", gpus: 1, bulkVisible: 6000, pods: 2, want: 300},
	{name: "one 8-GPU pod", gpus: 8, liveVisible: 800, liveInflight: 64, pods: 1, want: 108},
	{name: "busy live and bulk", liveVisible: 250, liveInflight: 40, bulkVisible: 900, bulkInflight: 30, pods: 3},
	{name: "bulk in flight beyond the cap", liveVisible: 5, bulkInflight: 9000, pods: 1},
}

// rule is the Terraform fleet's backlog per GPU (scaling.tf), for weights
// live 1 and bulk 0.1 and 16 jobs per GPU.
func (c backlogCase) rule(gpus int) float64 {
	g := c.pods * float64(gpus)
	inflight := math.Min(c.liveInflight+0.1*c.bulkInflight, g*16)
	return (c.liveVisible + 0.1*c.bulkVisible + inflight) / g
}

func checkScaling(r rendering) error {
	so := must[*keda.ScaledObject](r.one("ScaledObject"))
	d := r.deployment()
	if so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != d.Name {
		return errors.New("the ScaledObject does not scale the Deployment")
	}
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 0 {
		return errors.New("no scale to zero")
	}
	m := so.Spec.Advanced.ScalingModifiers
	if m.Target != strconv.Itoa(64*r.Plan.GPUs) || m.MetricType != "AverageValue" {
		return fmt.Errorf("target %q (%s): want 64 messages per GPU x %d GPUs, averaged per pod", m.Target, m.MetricType, r.Plan.GPUs)
	}
	names := map[string]keda.ScaleTriggers{}
	for _, tr := range so.Spec.Triggers {
		names[tr.Name] = tr
	}
	for q, inflight := range map[string]string{"live_visible": "false", "live_all": "true", "bulk_visible": "false", "bulk_all": "true"} {
		tr, ok := names[q]
		if !ok || tr.Type != "aws-sqs-queue" || tr.Metadata["scaleOnInFlight"] != inflight || tr.AuthenticationRef == nil {
			return fmt.Errorf("trigger %s: %+v", q, tr)
		}
	}
	pods := names["pods"]
	if pods.Type != "kubernetes-workload" || pods.Metadata["podSelector"] != labelSelector(d.Spec.Template.Labels) {
		return fmt.Errorf("the pods trigger counts %q, the pods are %v", pods.Metadata["podSelector"], d.Spec.Template.Labels)
	}
	// KEDA's own admission checks, and the formula compiled as KEDA
	// compiles it (its webhook's code).
	if err := keda.ValidateTriggers(so.Spec.Triggers); err != nil {
		return err
	}
	if err := keda.CheckReplicaCountBoundsAreValid(so); err != nil {
		return err
	}
	prog, err := keda.ValidateAndCompileScalingModifiers(so.DeepCopy())
	if err != nil {
		return err
	}
	ta := must[*keda.TriggerAuthentication](r.one("TriggerAuthentication"))
	if _, err := ta.ValidateCreate(nil); err != nil {
		return err
	}
	if ref := so.Spec.Triggers[0].AuthenticationRef; ref.Name != ta.Name {
		return fmt.Errorf("the triggers authenticate with %q, the chart's TriggerAuthentication is %q", ref.Name, ta.Name)
	}
	target, _ := strconv.ParseFloat(m.Target, 64)
	for _, c := range backlogCases {
		if c.gpus != 0 && c.gpus != r.Plan.GPUs {
			continue
		}
		out, err := expr.Run(prog, map[string]float64{
			"live_visible": c.liveVisible, "live_all": c.liveVisible + c.liveInflight,
			"bulk_visible": c.bulkVisible, "bulk_all": c.bulkVisible + c.bulkInflight, "pods": c.pods,
		})
		if err != nil {
			return fmt.Errorf("formula %q: %w", m.Formula, err)
		}
		total, ok := out.(float64)
		if !ok {
			return fmt.Errorf("formula %q gives %T", m.Formula, out)
		}
		got, want := total/(c.pods*float64(r.Plan.GPUs)), c.rule(r.Plan.GPUs)
		if c.want != 0 && math.Abs(want-c.want) > 1e-9 {
			return fmt.Errorf("%s: the rule gives %g, Terraform's test %g", c.name, want, c.want)
		}
		if math.Abs(got-want) > 1e-9 {
			return fmt.Errorf("%s: KEDA's backlog per GPU %g, Terraform's %g (%s)", c.name, got, want, m.Formula)
		}
		// The HPA's desired pods for that total equal the fleet's GPUs
		// for that backlog, in whole pods.
		if a, b := math.Ceil(total/target), math.Ceil(want*c.pods/64); a != b {
			return fmt.Errorf("%s: %g pods, the fleet would run %g", c.name, a, b)
		}
	}
	return nil
}

func labelSelector(l map[string]string) string {
	return fmt.Sprintf("app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s", l["app.kubernetes.io/name"], l["app.kubernetes.io/instance"])
}

func checkMetrics(r rendering) error {
	d := r.deployment()
	svc := must[*corev1.Service](r.one("Service"))
	sm := must[*monitoring.ServiceMonitor](r.one("ServiceMonitor"))
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" {
		return errors.New("the metrics Service does not select the pods' metrics port")
	}
	if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
		return errors.New("the ServiceMonitor does not scrape the Service's metrics port")
	}
	alerts, err := os.ReadFile(filepath.Join("..", "monitoring", "alerts.yml"))
	if err != nil {
		return err
	}
	if sm.Spec.JobLabel != jobLabel || !strings.Contains(string(alerts), fmt.Sprintf("job=%q", svc.Labels[jobLabel])) {
		return fmt.Errorf("Prometheus's job label is %q, alerts.yml names another", svc.Labels[jobLabel])
	}
	var want struct {
		Groups []monitoring.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(alerts, &want); err != nil {
		return err
	}
	pr := must[*monitoring.PrometheusRule](r.one("PrometheusRule"))
	if len(want.Groups) == 0 || !jsonEqual(pr.Spec.Groups, want.Groups) {
		return errors.New("the PrometheusRule is not deploy/monitoring/alerts.yml")
	}
	dash, err := os.ReadFile(filepath.Join("..", "monitoring", "grafana", "dashboards", "fleetscribe.json"))
	if err != nil {
		return err
	}
	for _, o := range r.Objects {
		if cm, ok := o.Value.(*corev1.ConfigMap); ok && strings.HasSuffix(o.Name, "-dashboard") {
			if cm.Data["fleetscribe.json"] != string(dash) {
				return errors.New("the dashboard ConfigMap is not the Grafana dashboard")
			}
			return nil
		}
	}
	return errMissing
}

func checkDisruption(r rendering) error {
	d := r.deployment()
	pdb := must[*policyv1.PodDisruptionBudget](r.one("PodDisruptionBudget"))
	if !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		return errors.New("the PodDisruptionBudget does not bound evictions of these pods to one at a time")
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 0 {
		return errors.New("a rollout may take pods down before their replacements serve")
	}
	return nil
}

func checkPrivilege(r rendering) error {
	spec := r.deployment().Spec.Template.Spec
	if spec.HostIPC || spec.HostNetwork || spec.HostPID {
		return errors.New("the pod shares a host namespace")
	}
	if sa := must[*corev1.ServiceAccount](r.one("ServiceAccount")); spec.ServiceAccountName != sa.Name {
		return fmt.Errorf("the pod runs as %q, the chart's account is %q", spec.ServiceAccountName, sa.Name)
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || (sc.Privileged != nil && *sc.Privileged) {
				return fmt.Errorf("%s may escalate privileges", c.Name)
			}
		}
	}
	w := container(&spec, "worker").SecurityContext
	if w.RunAsNonRoot == nil || !*w.RunAsNonRoot || w.ReadOnlyRootFilesystem == nil || !*w.ReadOnlyRootFilesystem {
		return errors.New("the worker runs as root or on a writable root")
	}
	return nil
}

// checkPlacement: the pod goes only to nodes of the plan's GPU count and
// sharing, as GPU feature discovery labels them, or as Karpenter and the
// documented NodePool do.
func checkPlacement(r rendering) error {
	a := r.deployment().Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return errors.New("no required node affinity: the pod can land on a node of another GPU count or sharing")
	}
	gpus := strconv.Itoa(r.Plan.GPUs)
	strategy := map[string]string{mps.KubeMPS: "none", mps.KubeDevicePluginMPS: "mps", mps.KubeDevicePluginTimeSlicing: "time-slicing"}[r.Plan.Sharing]
	want := []map[string]string{
		{"nvidia.com/gpu.count": gpus, "nvidia.com/gpu.sharing-strategy": strategy},
		{"karpenter.k8s.aws/instance-gpu-count": gpus, "fleetscribe.io/gpu-sharing": r.Plan.Sharing},
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != len(want) {
		return fmt.Errorf("%d node selector terms, want %d", len(terms), len(want))
	}
	for i, term := range terms {
		got := map[string]string{}
		for _, e := range term.MatchExpressions {
			if e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 {
				return fmt.Errorf("node selector term %d: %s %s %v, want In one value", i, e.Key, e.Operator, e.Values)
			}
			got[e.Key] = e.Values[0]
		}
		if !reflect.DeepEqual(got, want[i]) {
			return fmt.Errorf("node selector term %d: %v, want %v", i, got, want[i])
		}
	}
	return nil
}

// perPartition is values.yaml's triton.perPartition.
var perPartition = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("3Gi")}

// checkRequests: the Triton containers together ask for a partition's CPU
// and memory once for each partition of the plan, so the pod's requests
// grow with the plan and the scheduler places it where the plan fits.
func checkRequests(r rendering) error {
	got := corev1.ResourceList{}
	for _, c := range tritons(&r.deployment().Spec.Template.Spec) {
		for k, q := range c.Resources.Requests {
			sum := got[k]
			sum.Add(q)
			got[k] = sum
		}
	}
	n := int64(len(r.Plan.Partitions))
	for k, per := range perPartition {
		want := per.DeepCopy()
		want.SetMilli(per.MilliValue() * n)
		if g := got[k]; g.Cmp(want) != 0 {
			return fmt.Errorf("the Triton containers ask for %s %s, want %s (%d partitions x %s)", g.String(), k, want.String(), n, per.String())
		}
	}
	return nil
}

// checkZoneSpread: the pods spread over availability zones where they can
// (a zone's outage, or its lack of g6e capacity, takes fewer of them), and
// still schedule where they cannot.
func checkZoneSpread(r rendering) error {
	d := r.deployment()
	for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
		if c.TopologyKey == "topology.kubernetes.io/zone" && c.WhenUnsatisfiable == corev1.ScheduleAnyway && c.MaxSkew == 1 &&
			c.LabelSelector != nil && selects(c.LabelSelector.MatchLabels, d.Spec.Template.Labels) {
			return nil
		}
	}
	return errors.New("no zone spread of the release's pods (topology.kubernetes.io/zone, maxSkew 1, ScheduleAnyway)")
}

// checkPodSecurity: the pod passes Pod Security admission at restricted,
// as Kubernetes' own policy code evaluates it (the checks a namespace
// labelled pod-security.kubernetes.io/enforce=restricted runs).
func checkPodSecurity(r rendering) error {
	d := r.deployment()
	e, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		return err
	}
	res := psapolicy.AggregateCheckResults(e.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()},
		&d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec))
	if !res.Allowed {
		return fmt.Errorf("Pod Security restricted refuses the pod: %s", res.ForbiddenDetail())
	}
	return nil
}
