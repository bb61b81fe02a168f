package helm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	schedhelper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/fleetscribe/fleetscribe/mps"
)

const nodeGroupTagsModule = "../../terraform/modules/gpu-node-group-tags/main.tf"

// nodeGroupTags evaluates the Terraform module's tags for one node group.
func nodeGroupTags(t *testing.T, gpus int, sharing string, replicasPerGPU int) map[string]string {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(nodeGroupTagsModule)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	attrs := map[string]hclsyntax.Expression{}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "locals" {
			for name, a := range b.Body.Attributes {
				attrs[name] = a.Expr
			}
		}
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{
			"gpus": cty.NumberIntVal(int64(gpus)), "sharing": cty.StringVal(sharing),
			"replicas_per_gpu": cty.NumberIntVal(int64(replicasPerGPU)), "gpu_taint": cty.True,
			"cluster_name": cty.StringVal("prod"),
		})},
		Functions: map[string]function.Function{"merge": stdlib.MergeFunc, "coalesce": stdlib.CoalesceFunc, "tostring": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType}},
			Type:   function.StaticReturnType(cty.String),
			Impl:   func(args []cty.Value, _ cty.Type) (cty.Value, error) { return convert.Convert(args[0], cty.String) },
		})},
	}
	locals := map[string]cty.Value{}
	for len(locals) < len(attrs) {
		progress := false
		for name, e := range attrs {
			if _, done := locals[name]; done {
				continue
			}
			ctx.Variables["local"] = cty.ObjectVal(locals)
			if v, diags := e.Value(ctx); !diags.HasErrors() {
				locals[name], progress = v, true
			}
		}
		if !progress {
			t.Fatalf("%s: locals that never evaluate", nodeGroupTagsModule)
		}
	}
	out := map[string]string{}
	for k, v := range locals["tags"].AsValueMap() {
		if v.Type() != cty.String {
			t.Fatalf("tag %s: %#v", k, v)
		}
		out[k] = v.AsString()
	}
	return out
}

// templateNode is the node cluster-autoscaler imagines for a group at
// zero: the instance type's own labels and resources (physical GPUs), and
// what the group's node-template tags add or replace.
func templateNode(t *testing.T, size g6eSize, tags map[string]string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "template-" + size.name, Labels: map[string]string{
		"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": size.name,
	}}}
	alloc := size.allocatable(mps.KubeMPS) // physical GPUs: what the instance type table knows
	const prefix = "k8s.io/cluster-autoscaler/node-template/"
	for k, v := range tags {
		switch rest := strings.TrimPrefix(k, prefix); {
		case !strings.HasPrefix(k, prefix):
		case strings.HasPrefix(rest, "label/"):
			n.Labels[strings.TrimPrefix(rest, "label/")] = v
		case strings.HasPrefix(rest, "resources/"):
			q, err := resource.ParseQuantity(v)
			if err != nil {
				t.Fatalf("tag %s=%s: %v", k, v, err)
			}
			alloc[corev1.ResourceName(strings.TrimPrefix(rest, "resources/"))] = q
		case strings.HasPrefix(rest, "taint/"):
			value, effect, ok := strings.Cut(v, ":")
			if !ok {
				t.Fatalf("tag %s=%s: a taint is value:effect", k, v)
			}
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: strings.TrimPrefix(rest, "taint/"), Value: value, Effect: corev1.TaintEffect(effect)})
		default:
			t.Fatalf("tag %s: not a node-template tag cluster-autoscaler reads", k)
		}
	}
	n.Status.Capacity, n.Status.Allocatable = alloc, alloc
	return n
}

// fitsTemplate says why pod would not go on node, as the scheduler's
// filters see it (node affinity, taints, resources), or "" if it would.
func fitsTemplate(pod *corev1.Pod, node *corev1.Node) string {
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return fmt.Sprintf("node affinity (%v)", err)
	}
	if taint, bad := schedhelper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, nil, false); bad {
		return "untolerated taint " + taint.ToString()
	}
	// A request left out is its limit (the API server's defaulting); the
	// pod's needs count its native sidecars (the device-plugin plans'
	// Triton servers) as the scheduler does.
	pod = pod.DeepCopy()
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			r := &cs[i].Resources
			for name, q := range r.Limits {
				if _, ok := r.Requests[name]; !ok {
					if r.Requests == nil {
						r.Requests = corev1.ResourceList{}
					}
					r.Requests[name] = q
				}
			}
		}
	}
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for name, q := range want {
		if have := node.Status.Allocatable[name]; have.Cmp(q) < 0 {
			return fmt.Sprintf("%s: wants %s, has %s", name, q.String(), have.String())
		}
	}
	return ""
}

// Scale from zero: cluster-autoscaler launches a node for a pending pod
// only if the node it imagines from the group's instance type and tags
// takes the pod. For every plan, the node built from the gpu-node-group-tags
// module's tags (the device plugin's replicas as the cluster tests give
// them) takes the plan's rendered pod on the smallest size of its GPU
// count; built from the instance type alone (no tags), it takes none.
func TestNodeGroupTagsScaleFromZero(t *testing.T) {
	plans, fit := 0, 0
	defer func() { fmt.Printf("NODEGROUPS scale_from_zero=%d/%d\n", fit, plans) }()
	for _, sharing := range mps.KubeSharings {
		for _, gpus := range []int{1, 4, 8} {
			name := fmt.Sprintf("gpus%d-%s", gpus, sharing)
			t.Run(name, func(t *testing.T) {
				r := render(t, gpus, sharing)
				pod := podOf(r, name)
				var size g6eSize
				for _, s := range g6eSizes {
					if s.gpus == gpus {
						size = s
						break
					}
				}
				tags := nodeGroupTags(t, gpus, sharing, replicas(sharing))
				plans++
				if why := fitsTemplate(pod, templateNode(t, size, tags)); why != "" {
					t.Errorf("the template node of %s with the module's tags does not take the pod: %s (tags %v)", size.name, why, tags)
				} else {
					fit++
				}
				if why := fitsTemplate(pod, templateNode(t, size, nil)); why == "" {
					t.Errorf("the template node of %s without tags takes the pod: the tags would not be needed", size.name)
				}
				// The node group's taint, known to cluster-autoscaler: a
				// pending pod of any other workload does not launch a GPU
				// node.
				other := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}}}
				if why := fitsTemplate(other, templateNode(t, size, tags)); why == "" {
					t.Errorf("the template node of %s takes a pod that tolerates no GPU taint", size.name)
				}
			})
		}
	}
}
