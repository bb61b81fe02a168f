package helm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/fleetscribe/fleetscribe/lab/kit/golden"
	"github.com/fleetscribe/fleetscribe/lab/kit/modroot"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/mps"
)

// The CRDs the chart's objects are applied against: KEDA's oldest release
// the chart supports (2.13: provider aws with identityOwner; 2.12 drops
// the field), KEDA's release this module's types come from, and the
// Prometheus operator's.
const (
	kedaOldest       = "github.com/kedacore/keda/v2@v2.13.1"
	kedaNewest       = "github.com/kedacore/keda/v2@v2.21.0"
	prometheusCRDs   = "github.com/prometheus-operator/prometheus-operator@v0.88.0"
	checkNamespace   = "fleetscribe"
	pluginNamespace  = "nvidia-device-plugin"
	fieldManager     = "fleetscribe-chart-check"
	checkTaint       = "fleetscribe.io/check"
	placementTimeout = 2 * time.Minute
)

// g6eSize is an EC2 g6e instance type as a node: its vCPUs, memory (GiB)
// and L40S GPUs.
type g6eSize struct {
	name      string
	vcpu, gib int
	gpus      int
}

var g6eSizes = []g6eSize{
	{"g6e.xlarge", 4, 32, 1}, {"g6e.2xlarge", 8, 64, 1}, {"g6e.4xlarge", 16, 128, 1}, {"g6e.8xlarge", 32, 256, 1},
	{"g6e.16xlarge", 64, 512, 1}, {"g6e.12xlarge", 48, 384, 4}, {"g6e.24xlarge", 96, 768, 4}, {"g6e.48xlarge", 192, 1536, 8},
}

// documentedSizes are the sizes docs/kubernetes.md says each plan's GPU
// count runs on ("Which node a plan fits"): every size of that GPU count.
// A plan must fit each of them and no other (a plan on a node of more GPUs
// strands the rest).
func documentedSizes(gpus int) []string {
	var out []string
	for _, s := range g6eSizes {
		if s.gpus == gpus {
			out = append(out, s.name)
		}
	}
	return out
}

// allocatable is what EKS's kubelet offers of a size: the instance less
// the kubelet's reservations (CPU: 6% of the first core, 1% of the second,
// 0.5% of the next two, 0.25% of the rest; memory: 255Mi + 11Mi a pod,
// 110 pods below 30 vCPUs and 250 above, and 100Mi for eviction) and
// about 3% of the memory the kernel keeps before the kubelet counts it;
// a 200 GiB root volume less 10% for eviction. The chart's nodeType check
// takes the same off (_helpers.tpl, fleetscribe.podResources).
func (s g6eSize) allocatable(sharing string) corev1.ResourceList {
	cpuMilli := s.vcpu*1000 - (80 + (s.vcpu-4)*5/2)
	pods := 110
	if s.vcpu >= 30 {
		pods = 250
	}
	memMi := s.gib*1024*97/100 - (255 + 11*pods + 100)
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(int64(cpuMilli), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(memMi)<<20, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(int64(pods), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(180<<30, resource.BinarySI),
		"nvidia.com/gpu":                *resource.NewQuantity(int64(s.gpus*replicas(sharing)), resource.DecimalSI),
	}
}

// replicas is how many nvidia.com/gpu the device plugin offers a GPU in a
// sharing mode (the plans' per-GPU partitions), and the label GPU feature
// discovery puts on such a node.
func replicas(sharing string) int {
	switch sharing {
	case mps.KubeDevicePluginMPS:
		return 8
	case mps.KubeDevicePluginTimeSlicing:
		return 4
	}
	return 1
}

func sharingLabel(sharing string) string {
	return map[string]string{mps.KubeMPS: "none", mps.KubeDevicePluginMPS: "mps", mps.KubeDevicePluginTimeSlicing: "time-slicing"}[sharing]
}

func nodeName(sharing string, s g6eSize) string {
	return strings.ReplaceAll(s.name, ".", "-") + "-" + sharing
}

// moduleDir is a module's folder in the module cache, downloaded if
// need be (the CRDs are files of the projects' own modules).
func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", modVersion).Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); err != nil || jerr != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", modVersion, err, m.Error)
	}
	return m.Dir
}

// cluster is the control plane's clients and what the checks made.
type cluster struct {
	cp     *controlPlane
	cs     *kubernetes.Clientset
	dyn    *dynamic.DynamicClient
	mapper meta.RESTMapper
}

func newCluster(t *testing.T, cp *controlPlane) *cluster {
	t.Helper()
	c := &cluster{cp: cp, cs: kubernetes.NewForConfigOrDie(cp.cfg), dyn: dynamic.NewForConfigOrDie(cp.cfg)}
	c.refreshMapper(t)
	return c
}

func (c *cluster) refreshMapper(t *testing.T) {
	t.Helper()
	if err := c.readDiscovery(); err != nil {
		t.Fatal(err)
	}
}

// readDiscovery maps kinds to resources as the server's discovery lists
// them now.
func (c *cluster) readDiscovery() error {
	d, err := discovery.NewDiscoveryClientForConfig(c.cp.cfg)
	if err != nil {
		return err
	}
	groups, err := restmapper.GetAPIGroupResources(d)
	if err != nil {
		return err
	}
	c.mapper = restmapper.NewDiscoveryRESTMapper(groups)
	return nil
}

// installCRDs creates (or replaces) every CustomResourceDefinition in the
// files and waits until each is established.
func (c *cluster) installCRDs(t *testing.T, files ...string) {
	t.Helper()
	ctx := context.Background()
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var names []string
	var kinds []schema.GroupVersionKind
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range toUnstructured(t, b) {
			names = append(names, u.GetName())
			group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
			versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
			for _, v := range versions {
				m, _ := v.(map[string]any)
				if name, _ := m["name"].(string); name != "" && m["served"] == true {
					kinds = append(kinds, schema.GroupVersionKind{Group: group, Version: name, Kind: kind})
				}
			}
			old, err := c.dyn.Resource(gvr).Get(ctx, u.GetName(), metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = c.dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
			case err == nil:
				u.SetResourceVersion(old.GetResourceVersion())
				_, err = c.dyn.Resource(gvr).Update(ctx, u, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Fatalf("CRD %s from %s: %v", u.GetName(), f, err)
			}
		}
	}
	for _, n := range names {
		testwait.For(t, "CRD "+n+" established", func() bool {
			u, err := c.dyn.Resource(gvr).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cd := range conds {
				m, _ := cd.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true
				}
			}
			return false
		})
	}
	// Established is not yet served: discovery lists a new group version
	// a moment later, and a mapper read before that maps none of its kinds.
	testwait.For(t, "the CRDs' kinds in discovery", func() bool {
		if c.readDiscovery() != nil {
			return false
		}
		for _, k := range kinds {
			if _, err := c.mapper.RESTMapping(k.GroupKind(), k.Version); err != nil {
				return false
			}
		}
		return true
	})
}

func toUnstructured(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(b), "\n---") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if string(j) == "null" || len(j) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != "" {
			out = append(out, u)
		}
	}
	return out
}

// dryRun applies every object of a rendering with server-side apply,
// dry run (every admission step, nothing stored; a field the schema does
// not declare is an error), each in checkNamespace unless the chart names
// another. It returns how many the server accepted and the errors of the
// others.
func (c *cluster) dryRun(t *testing.T, out []byte, kinds ...string) (ok int, errs []error) {
	t.Helper()
	for _, u := range toUnstructured(t, out) {
		if len(kinds) > 0 && !slices.Contains(kinds, u.GetKind()) {
			continue
		}
		m, err := c.mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err))
			continue
		}
		ns := u.GetNamespace()
		if ns == "" {
			ns = checkNamespace
		}
		_, err = c.dyn.Resource(m.Resource).Namespace(ns).Apply(context.Background(), u.GetName(), u,
			metav1.ApplyOptions{FieldManager: fieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err))
			continue
		}
		ok++
	}
	return ok, errs
}

// podOf is the pod a rendering's Deployment makes, named name.
func podOf(r rendering, name string) *corev1.Pod {
	d := r.deployment()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: checkNamespace, Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
}

// addNodes makes a node of every g6e size for every sharing mode, as EKS
// and the NVIDIA device plugin (with GPU feature discovery) present them:
// GPUs tainted, labelled with their count and sharing, offered as
// nvidia.com/gpu replicas; and a taint of its own, so that a check's pod
// (which tolerates one node's) is placed on that node or on none.
func (c *cluster) addNodes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, sharing := range mps.KubeSharings {
		for _, s := range g6eSizes {
			name := nodeName(sharing, s)
			n := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
					"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"node.kubernetes.io/instance-type": s.name,
					"nvidia.com/gpu.count":             fmt.Sprint(s.gpus),
					"nvidia.com/gpu.replicas":          fmt.Sprint(replicas(sharing)),
					"nvidia.com/gpu.sharing-strategy":  sharingLabel(sharing),
				}},
				Spec: corev1.NodeSpec{Taints: []corev1.Taint{
					{Key: "nvidia.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule},
					{Key: checkTaint, Value: name, Effect: corev1.TaintEffectNoSchedule},
				}},
			}
			created, err := c.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			alloc := s.allocatable(sharing)
			created.Status = corev1.NodeStatus{
				Capacity: alloc, Allocatable: alloc,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			}
			updated, err := c.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The API server taints a new node not-ready until a node
			// controller sees it Ready; none runs here.
			updated.Spec.Taints = n.Spec.Taints
			if _, err := c.cs.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// placement is where kube-scheduler put one plan's pod, tried on one size.
type placement struct {
	plan, size string
	gpus       int
	fits       bool
	why        string // the scheduler's reason where it did not fit
}

// place creates a pod of each rendering for each size (tolerating only
// that size's node of the plan's sharing), waits until the scheduler has
// placed or refused every one, and returns what it decided.
func (c *cluster) place(t *testing.T, plans []string, renderings map[string]rendering) []placement {
	t.Helper()
	ctx := context.Background()
	type try struct {
		placement
		pod string
	}
	var tries []*try
	for _, plan := range plans {
		r := renderings[plan]
		for _, s := range g6eSizes {
			name := strings.ToLower(plan + "-" + strings.ReplaceAll(s.name, ".", "-"))
			pod := podOf(r, name)
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: checkTaint, Operator: corev1.TolerationOpEqual,
				Value: nodeName(r.Plan.Sharing, s), Effect: corev1.TaintEffectNoSchedule})
			if _, err := c.cs.CoreV1().Pods(checkNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("pod of %s for %s: %v", plan, s.name, err)
			}
			tries = append(tries, &try{placement{plan: plan, size: s.name, gpus: r.Plan.GPUs}, name})
		}
	}
	decided := func(tr *try) bool {
		p, err := c.cs.CoreV1().Pods(checkNamespace).Get(ctx, tr.pod, metav1.GetOptions{})
		if err != nil {
			return false
		}
		if p.Spec.NodeName != "" {
			tr.fits = true
			return true
		}
		for _, cd := range p.Status.Conditions {
			if cd.Type == corev1.PodScheduled && cd.Status == corev1.ConditionFalse && cd.Reason == corev1.PodReasonUnschedulable {
				tr.why = schedulerReason(cd.Message)
				return true
			}
		}
		return false
	}
	for _, tr := range tries {
		if !testwait.Within(t, placementTimeout, func() bool { return decided(tr) }) {
			t.Fatalf("kube-scheduler decided nothing for %s on %s in %s", tr.plan, tr.size, placementTimeout)
		}
	}
	var out []placement
	for _, tr := range tries {
		out = append(out, tr.placement)
		zero := int64(0)
		if err := c.cs.CoreV1().Pods(checkNamespace).Delete(ctx, tr.pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Error(err)
		}
	}
	return out
}

// schedulerReason is the scheduler's reason for the one node a check's pod
// tolerates: its message counts every node's, and the others are refused
// for a taint (the check's own).
func schedulerReason(msg string) string {
	_, rest, ok := strings.Cut(msg, "nodes are available: ")
	if !ok {
		return msg
	}
	rest, _, _ = strings.Cut(rest, ". preemption")
	rest = strings.TrimSuffix(rest, ".")
	var keep []string
	for _, part := range strings.Split(rest, ", ") {
		if !strings.Contains(part, "untolerated taint") {
			_, why, found := strings.Cut(part, " ")
			if !found {
				why = part
			}
			keep = append(keep, why)
		}
	}
	if len(keep) == 0 { // the node of the check was refused for a taint too
		return "node(s) had untolerated taint(s)"
	}
	return strings.Join(keep, "; ")
}

// TestAgainstControlPlane holds the chart to a real kube-apiserver and
// kube-scheduler (make k8s-validate):
//   - every rendering applied as a strict server-side dry run, with the
//     Prometheus operator's CRDs and KEDA's oldest supported and newest
//     known CRDs installed;
//   - each plan's pod admitted by Pod Security at restricted (the
//     namespace enforces it);
//   - each plan placed by kube-scheduler on a node of every g6e size as
//     EKS offers it: it fits every size docs/kubernetes.md names for it and
//     no other, and the chart's nodeType check refuses exactly the sizes
//     the scheduler refused.
func TestAgainstControlPlane(t *testing.T) {
	clusterWanted(t)
	bin := kubeBinary(t)
	start := time.Now()
	cp := startControlPlane(t, bin)
	c := newCluster(t, cp)
	ctx := context.Background()
	version := cp.version(t)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: checkNamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: pluginNamespace}},
	} {
		if _, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prom := filepath.Join(moduleDir(t, prometheusCRDs), "example", "prometheus-operator-crd")
	c.installCRDs(t, filepath.Join(prom, "monitoring.coreos.com_servicemonitors.yaml"), filepath.Join(prom, "monitoring.coreos.com_prometheusrules.yaml"))
	kedaCRDs := func(modVersion string) []string {
		dir := filepath.Join(moduleDir(t, modVersion), "config", "crd", "bases")
		return []string{filepath.Join(dir, "keda.sh_scaledobjects.yaml"), filepath.Join(dir, "keda.sh_triggerauthentications.yaml")}
	}
	c.installCRDs(t, kedaCRDs(kedaOldest)...)

	// The pods run as the chart's service account (the helm test's as the
	// namespace's default, which a controller that does not run here would
	// make), and the ServiceAccount admission plugin looks them up; a dry
	// run stores nothing.
	sa, err := render(t, 1, mps.KubeMPS).one("ServiceAccount")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{sa.(*corev1.ServiceAccount).Name, "default"} {
		if _, err := c.cs.CoreV1().ServiceAccounts(checkNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var plans []string
	renderings := map[string]rendering{}
	outputs := map[string][]byte{}
	dryOK, objects := 0, 0
	for _, g := range gpuCounts {
		for _, s := range mps.KubeSharings {
			plan := fmt.Sprintf("gpus%d-%s", g, s)
			plans = append(plans, plan)
			out, err := helmTemplate(t, planFile(g, s))
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decode(out)
			if err != nil {
				t.Fatal(err)
			}
			kp, _ := planValues(t, g, s)
			renderings[plan], outputs[plan] = rendering{kp, objs}, out
			ok, errs := c.dryRun(t, out)
			for _, err := range errs {
				t.Errorf("%s, KEDA %s's CRDs: %v", plan, strings.TrimPrefix(kedaOldest, "github.com/kedacore/keda/v2@"), err)
			}
			dryOK += ok
			objects += len(objs)
			// Pod Security admits or refuses pods, not Deployments.
			if _, err := c.cs.CoreV1().Pods(checkNamespace).Create(ctx, podOf(renderings[plan], "psa-"+plan),
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
				t.Errorf("%s: the pod in a namespace that enforces Pod Security restricted: %v", plan, err)
			} else {
				dryOK++
			}
			objects++
		}
	}
	// The dry run is strict: a field the schema does not declare is
	// refused, in a built-in kind and in a CRD's.
	for _, kind := range []string{"Deployment", "ScaledObject"} {
		typo := strings.Replace(string(outputs[plans[0]]), "\nkind: "+kind+"\n", "\nkind: "+kind+"\nnmae: typo\n", 1)
		if ok, errs := c.dryRun(t, []byte(typo), kind); ok != 0 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "nmae") {
			t.Errorf("a %s with a misspelt field: %d accepted, %v", kind, ok, errs)
		}
	}
	// KEDA's fallback behavior came after 2.13: its CRD refuses the
	// chart's fallback (so the chart keeps it off by default).
	fallback, err := helmTemplate(t, planFile(1, mps.KubeMPS), "scaling.fallback.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	if ok, errs := c.dryRun(t, fallback, "ScaledObject"); ok != 0 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "behavior") {
		t.Errorf("the fallback with KEDA %s's CRDs: %d accepted, %v", kedaOldest, ok, errs)
	}
	c.installCRDs(t, kedaCRDs(kedaNewest)...)
	if ok, errs := c.dryRun(t, fallback, "ScaledObject"); ok != 1 {
		t.Errorf("the fallback with KEDA %s's CRDs: %v", kedaNewest, errs)
	}
	for _, plan := range plans {
		ok, errs := c.dryRun(t, outputs[plan], "ScaledObject", "TriggerAuthentication")
		for _, err := range errs {
			t.Errorf("%s, KEDA %s's CRDs: %v", plan, strings.TrimPrefix(kedaNewest, "github.com/kedacore/keda/v2@"), err)
		}
		dryOK += ok
		objects += ok + len(errs)
	}

	// The release's life with KEDA's count: helm's patches leave it.
	steps := releaseLifecycle(t, cp, c)
	fmt.Printf("REPLICAS %s\n", strings.Join(steps, ", "))

	c.addNodes(t)
	cp.startScheduler(t)
	placements := c.place(t, plans, renderings)

	asDocumented, fits := 0, 0
	for _, p := range placements {
		want := slices.Contains(documentedSizes(p.gpus), p.size)
		if p.fits {
			fits++
		}
		if p.fits == want {
			asDocumented++
		} else {
			t.Errorf("%s on %s: fits %v, docs/kubernetes.md says %v (%s)", p.plan, p.size, p.fits, want, p.why)
		}
		g, s, _ := strings.Cut(strings.TrimPrefix(p.plan, "gpus"), "-")
		_, err := helmTemplate(t, planFile(atoi(g), s), "nodeType="+p.size)
		if (err == nil) != p.fits {
			t.Errorf("%s with nodeType %s: the chart's check says %v, the scheduler %v (%s)", p.plan, p.size, err, p.fits, p.why)
		}
	}
	table := placementTable(plans, placements)
	fmt.Print(table)
	checkPlacementsDoc(t, table)
	if !t.Failed() {
		fmt.Printf("# %d of %d dry runs accepted, %d of %d placements as documented, in %.0f s\n", dryOK, objects, asDocumented, len(placements), time.Since(start).Seconds())
		fmt.Printf("CLUSTER apiserver=%s dry_run_ok=%d placements=%d fit_as_documented=%d\n", version, dryOK, fits, asDocumented)
	}
}

func atoi(s string) int {
	var n int
	_, _ = fmt.Sscan(s, &n)
	return n
}

// placementTable is the plans × sizes table: fits, or the scheduler's reason.
func placementTable(plans []string, ps []placement) string {
	var b strings.Builder
	b.WriteString("| plan |")
	for _, s := range g6eSizes {
		fmt.Fprintf(&b, " %s |", strings.TrimPrefix(s.name, "g6e."))
	}
	b.WriteString("\n|---|")
	for range g6eSizes {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, plan := range plans {
		fmt.Fprintf(&b, "| %s |", plan)
		for _, s := range g6eSizes {
			for _, p := range ps {
				if p.plan == plan && p.size == s.name {
					if p.fits {
						b.WriteString(" **fits** |")
					} else {
						fmt.Fprintf(&b, " %s |", shortReason(p.why))
					}
				}
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// shortReason names what the scheduler refused a node for, in a word or
// two (the GPU-count or sharing mismatch is the chart's own affinity).
func shortReason(why string) string {
	var out []string
	for _, r := range []struct{ in, short string }{
		{"didn't match Pod's node affinity/selector", "GPUs or sharing"},
		{"Insufficient cpu", "CPU"},
		{"Insufficient memory", "memory"},
		{"Insufficient nvidia.com/gpu", "GPUs"},
		{"Insufficient ephemeral-storage", "disk"},
		{"untolerated taint", "taint"},
	} {
		if strings.Contains(why, r.in) {
			out = append(out, r.short)
		}
	}
	if len(out) == 0 {
		return why
	}
	return strings.Join(out, ", ")
}

// checkPlacementsDoc holds docs/kubernetes.md's table of placements to the
// one the scheduler just made (rewritten with -update).
func checkPlacementsDoc(t *testing.T, table string) {
	t.Helper()
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "kubernetes.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- BEGIN placements: TestAgainstControlPlane writes this table -->\n", "<!-- END placements -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q section", path, begin, end)
	}
	want := string(doc[:i+len(begin)]) + table + string(doc[j:])
	golden.Check(t, path, []byte(want), *update, "FLEETSCRIBE_REQUIRE_KUBE=1 go test ./deploy/helm -run TestAgainstControlPlane -update")
}
