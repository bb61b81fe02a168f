// Package helm_test renders the Helm chart deploy/helm/fleetscribe with the
// real helm for every plan it ships (1, 4 and 8 GPUs, each sharing mode),
// decodes every object strictly into the Kubernetes, KEDA and
// Prometheus-operator API types (an unknown or misspelt field fails), and
// holds the rendering to its invariants. Each invariant is also run on a
// mutated rendering, which it must refuse: a check that cannot fail counts
// for nothing. `make k8s-validate` runs it and prints the RESULT line.
package helm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	keda "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoring "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/fleetscribe/fleetscribe/lab/kit/golden"
	"github.com/fleetscribe/fleetscribe/mps"
)

var update = flag.Bool("update", false, "rewrite the chart's generated plans (make docs)")

const (
	chart = "fleetscribe"
	// The oldest Kubernetes with native sidecars on by default.
	kubeVersion = "1.29.0"
)

var gpuCounts = []int{1, 4, 8}

func planFile(gpus int, sharing string) string {
	return filepath.Join(chart, "plans", fmt.Sprintf("gpus%d-%s.yaml", gpus, sharing))
}

func planValues(t *testing.T, gpus int, sharing string) (mps.KubePlan, []byte) {
	t.Helper()
	kp, err := mps.PlanKube(sharing, gpus, 0, 0, 8001)
	if err != nil {
		t.Fatal(err)
	}
	return kp, kp.Values(fmt.Sprintf("worker mps helm -gpus=%d -sharing=%s", gpus, sharing))
}

// The chart's plan files are what `worker mps helm` writes, and the default
// plan in values.yaml is the 1-GPU MPS one: the chart never carries a plan
// the plan code did not make.
func TestPlansAreCurrent(t *testing.T) {
	for _, g := range gpuCounts {
		for _, s := range mps.KubeSharings {
			_, body := planValues(t, g, s)
			golden.Check(t, planFile(g, s), body, *update, "make docs")
		}
	}
	path := filepath.Join(chart, "values.yaml")
	values, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "# BEGIN plan", "# END plan\n"
	i, j := bytes.Index(values, []byte(begin)), bytes.Index(values, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q section", path, begin, end)
	}
	_, body := planValues(t, 1, mps.KubeMPS)
	head := values[i : i+bytes.IndexByte(values[i:], '\n')+1]
	want := append(append(append([]byte{}, values[:i]...), head...), planBody(body)...)
	want = append(want, "# Other node sizes and sharing modes: -f plans/gpus<N>-<sharing>.yaml,\n# or `worker mps helm` for any other.\n"+end...)
	golden.Check(t, path, want, *update, "make docs")
}

// planBody is a plan file without its comment header.
func planBody(b []byte) []byte {
	for bytes.HasPrefix(b, []byte("#")) {
		b = b[bytes.IndexByte(b, '\n')+1:]
	}
	return b
}

// builtWorker is the worker binary TestMain builds from this checkout.
var builtWorker string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetscribe-chart-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	builtWorker = filepath.Join(dir, "worker")
	build := exec.Command("go", "build", "-o", builtWorker, "github.com/fleetscribe/fleetscribe/cmd/worker")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the worker: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLEETSCRIBE_HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("FLEETSCRIBE_REQUIRE_HELM") == "1" {
		t.Fatal("helm not found (make k8s-validate installs it)")
	}
	t.Skip("helm not found; make k8s-validate installs it")
	return ""
}

// object is one rendered object: its kind and name, and the typed value it
// decoded into.
type object struct {
	Kind, Name string
	Value      any
}

type rendering struct {
	Plan    mps.KubePlan
	Objects []object
}

func (r rendering) one(kind string) (any, error) {
	var found []any
	for _, o := range r.Objects {
		if o.Kind == kind {
			found = append(found, o.Value)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0], nil
}

func (r rendering) deployment() *appsv1.Deployment {
	d, err := r.one("Deployment")
	if err != nil {
		panic(err)
	}
	return d.(*appsv1.Deployment)
}

// newObject maps apiVersion and kind to the API type a rendered object must
// decode into; anything else the chart renders is an error.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "v1 Pod":
		return &corev1.Pod{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "keda.sh/v1alpha1 ScaledObject":
		return &keda.ScaledObject{}, nil
	case "keda.sh/v1alpha1 TriggerAuthentication":
		return &keda.TriggerAuthentication{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoring.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &monitoring.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("no API type for %s %s", apiVersion, kind)
}

// decode splits helm's output into objects and decodes each strictly.
func decode(out []byte) ([]object, error) {
	var objs []object
	for _, doc := range strings.Split(string(out), "\n---") {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("%w in\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // comments only
		}
		v, err := newObject(head.APIVersion, head.Kind)
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			return nil, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
		}
		objs = append(objs, object{head.Kind, head.Metadata.Name, v})
	}
	return objs, nil
}

func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return helmWith(t, nil, args...)
}

// helmWith runs helm with env added to the test's environment.
func helmWith(t *testing.T, env []string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// helmTemplate runs helm template on the chart with the test values, a
// plan file (empty: the default plan of values.yaml) and --set pairs.
func helmTemplate(t *testing.T, plan string, sets ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "fs", chart, "--kube-version", kubeVersion, "-f", "testdata/values.yaml"}
	if plan != "" {
		args = append(args, "-f", plan)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

// render renders one of the chart's plans, with sets, and decodes it.
func render(t *testing.T, gpus int, sharing string, sets ...string) rendering {
	t.Helper()
	kp, _ := planValues(t, gpus, sharing)
	out, err := helmTemplate(t, planFile(gpus, sharing), sets...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return rendering{kp, objs}
}

func container(spec *corev1.PodSpec, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

func env(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// tritons are the pod's Triton containers.
func tritons(spec *corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if strings.HasPrefix(c.Name, "triton") {
				out = append(out, c)
			}
		}
	}
	return out
}

func TestChartRendersEveryPlan(t *testing.T) {
	charts, objects := 0, 0
	for _, g := range gpuCounts {
		for _, s := range mps.KubeSharings {
			t.Run(fmt.Sprintf("gpus%d-%s", g, s), func(t *testing.T) {
				r := render(t, g, s)
				kinds := map[string]int{}
				for _, o := range r.Objects {
					kinds[o.Kind]++
				}
				want := map[string]int{"Deployment": 1, "ServiceAccount": 1, "Service": 1, "ConfigMap": 1, "PodDisruptionBudget": 1,
					"ScaledObject": 1, "TriggerAuthentication": 1, "ServiceMonitor": 1, "PrometheusRule": 1, "Pod": 1}
				if s != mps.KubeMPS {
					want["ConfigMap"] = 2 // and the device plugin's configuration
				}
				if fmt.Sprint(kinds) != fmt.Sprint(want) {
					t.Errorf("rendered %v, want %v", kinds, want)
				}
				for _, inv := range invariants {
					if err := inv.check(r); err != nil {
						t.Errorf("%s: %v", inv.name, err)
					}
				}
				charts++
				objects += len(r.Objects)
			})
		}
	}
	if !t.Failed() {
		fmt.Printf("CHARTS charts=%d objects=%d gpu_counts=%s\n", charts, objects, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(gpuCounts)), ","), "[]"))
	}
}

// Every invariant refuses its mutation of a real rendering (4 GPUs, each
// sharing mode the mutation applies to).
func TestInvariantsCatchTheirMutations(t *testing.T) {
	for _, s := range mps.KubeSharings {
		for _, inv := range invariants {
			if inv.appliesTo != "" && inv.appliesTo != s {
				continue
			}
			t.Run(s+"/"+inv.name, func(t *testing.T) {
				r := render(t, 4, s)
				if err := inv.check(r); err != nil {
					t.Fatalf("unmutated: %v", err)
				}
				inv.mutate(r)
				if err := inv.check(r); err == nil {
					t.Errorf("%s: the mutation (%s) passed", inv.name, inv.mutation)
				}
			})
		}
	}
	if !t.Failed() {
		for _, inv := range invariants {
			fmt.Printf("INVARIANT %s mutation=%q caught\n", inv.name, inv.mutation)
		}
	}
}

// The chart refuses values that would lose jobs or scale on nothing, with
// an error that says which value.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		sets []string
		want string
	}{
		{"a drain shorter than a job", []string{"worker.drainTimeoutSeconds=600"}, "drainTimeoutSeconds 600 is shorter than worker.jobTimeoutSeconds 1800"},
		{"no live queue", []string{"queues.live.url="}, "queues.live.url"},
		{"no input buckets", []string{"worker.inputBuckets="}, "worker.inputBuckets"},
		{"no model", []string{"model.s3Uri="}, "give model.s3Uri"},
		{"no queue weighs", []string{"queues.live.weight=0", "queues.bulk.weight=0"}, "no queue with a weight above 0"},
		{"a weight above 1", []string{"queues.bulk.weight=2"}, "queues.bulk.weight 2: must be between 0 and 1"},
		{"no plan", []string{"plan=null"}, "plan: no partitions"},
		{"a plan cut short", []string{"plan.perGPU=9"}, "8 partitions, but 1 GPUs x 9 per GPU"},
		{"an unknown scaler identity", []string{"scaling.identityOwner=node"}, `scaling.identityOwner "node"`},
		{"no worker image", []string{"image.worker.repository="}, "image.worker.repository: the worker image in your registry"},
		{"no Triton image", []string{"image.triton.repository="}, "image.triton.repository: the triton image in your registry"},
		// The pod-role module's trust policy lets only the worker's
		// service account assume the pod role: KEDA's operator cannot.
		{"the scaler as the workload", []string{"scaling.identityOwner=workload"}, "scaling.identityOwner workload: KEDA's operator would assume the worker's pod role"},
		{"a worker limit too small for the regions", []string{"worker.resources.limits.memory=1Gi"}, "cannot hold the worker's shared memory regions (235 MiB: 8 partitions x 16 in flight"},
		{"a worker limit in other units", []string{"worker.resources.limits.memory=4G"}, `worker.resources.limits.memory "4G": give it in Mi or Gi`},
		{"the chart's own worker settings in env", []string{"worker.env.FLEETSCRIBE_TRITON_MAX_INFLIGHT=48"}, "worker.env.FLEETSCRIBE_TRITON_MAX_INFLIGHT: the chart sets it"},
		{"a node of other GPUs", []string{"nodeType=g6e.12xlarge"}, "nodeType g6e.12xlarge has 4 GPUs; the plan is for 1"},
		{"a node the chart does not know", []string{"nodeType=p5.48xlarge"}, `nodeType "p5.48xlarge": the chart knows the g6e sizes`},
		{"a node too small for the partitions", []string{"nodeType=g6e.xlarge", "triton.perPartition.memory=4Gi"}, "nodeType g6e.xlarge cannot hold the pod: it asks 3000m CPU and 34816Mi memory"},
		{"CPU in fractions of a core", []string{"triton.perPartition.cpu=0.5"}, `triton.perPartition.cpu "0.5": give CPU in m or whole cores`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := helmTemplate(t, "", c.sets...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	// The device plugin reads its configuration in its own namespace.
	if _, err := helmTemplate(t, planFile(1, mps.KubeDevicePluginMPS), "devicePluginConfig.namespace="); err == nil || !strings.Contains(err.Error(), "devicePluginConfig.namespace: the NVIDIA device plugin's namespace") {
		t.Errorf("device plugin configuration without the plugin's namespace: %v", err)
	}
	// (Replicas with scaling: TestScalingLeavesReplicasUnrendered.)
	r := render(t, 1, "mps")
	if img := container(&r.deployment().Spec.Template.Spec, "worker").Image; img != "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:0.1.0" {
		t.Errorf("worker image %q: want the given repository at the chart's appVersion", img)
	}
	if _, err := helm(t, "template", "fs", chart, "--kube-version", "1.28.9", "-f", "testdata/values.yaml"); err == nil {
		t.Error("rendered for Kubernetes 1.28, which has no native sidecars on by default")
	}
}

func TestLint(t *testing.T) {
	for _, s := range mps.KubeSharings {
		if out, err := helm(t, "lint", chart, "--strict", "--kube-version", kubeVersion, "-f", "testdata/values.yaml", "-f", planFile(8, s)); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

var errMissing = errors.New("missing")

func must[T any](v any, err error) T {
	if err != nil {
		panic(err)
	}
	return v.(T)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func selects(sel map[string]string, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Decoding is strict for every kind the chart renders: a field the API type
// does not have is an error, as the API server's field validation makes it.
func TestDecodeIsStrict(t *testing.T) {
	out, err := helmTemplate(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode(out); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "\n---")
	kinds := 0
	for i, doc := range docs {
		if !strings.Contains(doc, "\nkind: ") {
			continue
		}
		kinds++
		bad := slices.Clone(docs)
		// Inside spec, where the kind's own type decides, else metadata.
		if strings.Contains(doc, "\nspec:\n") {
			bad[i] = strings.Replace(doc, "\nspec:\n", "\nspec:\n  nmae: typo\n", 1)
		} else {
			bad[i] = strings.Replace(doc, "\nmetadata:\n", "\nmetadata:\n  nmae: typo\n", 1)
		}
		if _, err := decode([]byte(strings.Join(bad, "\n---"))); err == nil || !strings.Contains(err.Error(), "nmae") {
			t.Errorf("a misspelt field in %s decoded: %v", strings.SplitN(doc[strings.Index(doc, "\nkind: ")+7:], "\n", 2)[0], err)
		}
	}
	if kinds < 9 {
		t.Errorf("%d objects", kinds)
	}
}

// Every optional part off, an existing service account and a volume for
// the models: what is left still decodes, and still holds the invariants
// that do not need the parts turned off.
func TestChartWithOptionsOff(t *testing.T) {
	r := render(t, 1, mps.KubeMPS, "scaling.enabled=false", "replicas=3", "podDisruptionBudget.enabled=false",
		"metrics.serviceMonitor.enabled=false", "metrics.prometheusRule.enabled=false", "metrics.dashboard.enabled=false", "helmTest.enabled=false",
		"serviceAccount.create=false", "serviceAccount.name=transcriber", "model.s3Uri=", "model.volume.persistentVolumeClaim.claimName=models",
		"imagePullSecrets[0].name=registry")
	var kinds []string
	for _, o := range r.Objects {
		kinds = append(kinds, o.Kind)
	}
	slices.Sort(kinds)
	if fmt.Sprint(kinds) != "[Deployment Service]" {
		t.Fatalf("rendered %v", kinds)
	}
	d := r.deployment()
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 || spec.ServiceAccountName != "transcriber" || len(spec.ImagePullSecrets) != 1 {
		t.Errorf("replicas %v, account %q, pull secrets %v", d.Spec.Replicas, spec.ServiceAccountName, spec.ImagePullSecrets)
	}
	if container(&spec, "model-sync") != nil {
		t.Error("a model sync with the models on a volume")
	}
	for _, v := range spec.Volumes {
		if v.Name == "models" && (v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "models") {
			t.Errorf("models volume %+v", v)
		}
	}
	for _, inv := range []func(rendering) error{checkGrace, checkWorkerAddrs, checkPartitions, checkGPUs, checkLifecycle, checkProbes} {
		if err := inv(r); err != nil {
			t.Error(err)
		}
	}
}

// ptrValue is *p, or -1 for nil.
func ptrValue(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}
