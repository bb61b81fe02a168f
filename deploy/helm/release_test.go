package helm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestScalingLeavesReplicasUnrendered: with KEDA scaling, no revision
// renders spec.replicas, which is what keeps helm upgrade, helm rollback
// and Argo CD (which renders with helm template, without the cluster) off
// KEDA's count. Without scaling the values' replicas are rendered.
func TestScalingLeavesReplicasUnrendered(t *testing.T) {
	for _, scaling := range []bool{true, false} {
		out, err := helmTemplate(t, "", fmt.Sprintf("scaling.enabled=%v", scaling), "replicas=3")
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decode(out)
		if err != nil {
			t.Fatal(err)
		}
		d, err := rendering{Objects: objs}.one("Deployment")
		if err != nil {
			t.Fatal(err)
		}
		got := d.(*appsv1.Deployment).Spec.Replicas
		switch {
		case scaling && got != nil:
			t.Errorf("scaling on: the Deployment renders replicas %d; KEDA's count would be overwritten", *got)
		case !scaling && (got == nil || *got != 3):
			t.Errorf("scaling off: replicas %v, want the values' 3", got)
		}
	}
}

// releaseLifecycle runs the chart through a release's life with the real
// helm against the real API server: install, KEDA scaling the Deployment
// (through its scale subresource, as KEDA's HPA does), a no-op upgrade, an
// upgrade that changes the pod, and rollbacks to the first and second
// revisions. It returns each step's replicas.
func releaseLifecycle(t *testing.T, cp *controlPlane, c *cluster) []string {
	t.Helper()
	ctx := context.Background()
	const ns, release, keda = "release-lifecycle", "fs", 4
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: check
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: check
  user: {token: %q}
contexts:
- name: check
  context: {cluster: check, user: check, namespace: %s}
current-context: check
`, cp.cfg.Host, checkToken, ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		args = append(args, "--kubeconfig", kubeconfig, "--namespace", ns)
		if _, err := helmWith(t, []string{"HELM_CONFIG_HOME=" + dir, "HELM_CACHE_HOME=" + dir, "HELM_DATA_HOME=" + dir}, args...); err != nil {
			t.Fatal(err)
		}
	}
	var name string
	replicas := func() int32 {
		t.Helper()
		s, err := c.cs.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Spec.Replicas
	}
	var steps []string
	record := func(step string, want int32) {
		t.Helper()
		got := replicas()
		steps = append(steps, fmt.Sprintf("%s %d", step, got))
		if got != want {
			t.Errorf("%s: replicas %d, want %d", step, got, want)
		}
	}
	chartArgs := []string{chart, "-f", "testdata/values.yaml"}
	run(append([]string{"install", release}, chartArgs...)...)
	d, err := c.cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(d.Items) != 1 {
		t.Fatalf("the release's Deployments: %v, %v", d, err)
	}
	name = d.Items[0].Name
	record("install", 1)
	if _, err := c.cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       autoscalingv1.ScaleSpec{Replicas: keda}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	record("keda", keda)
	run(append([]string{"upgrade", release}, chartArgs...)...)
	record("upgrade", keda)
	run(append([]string{"upgrade", release, "--set", "worker.jobTimeoutSeconds=1200"}, chartArgs...)...)
	record("upgrade_changed", keda)
	run("rollback", release, "1")
	record("rollback_1", keda)
	run("rollback", release, "2")
	record("rollback_2", keda)
	return steps
}
