package helm_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/fleetscribe/fleetscribe/lab/kit/freeport"
	"github.com/fleetscribe/fleetscribe/lab/kit/modroot"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
)

// A real Kubernetes control plane for the chart's checks: kube-apiserver
// (with an embedded etcd) and kube-scheduler from the k8s.io/kubernetes
// module, built by tools/kube, listening on the loopback interface only.

// clusterWanted says whether this run checks the chart against the real
// control plane: make k8s-validate asks for it (FLEETSCRIBE_REQUIRE_KUBE=1:
// a failure to build or start it fails the test); a plain go test skips it,
// since the first build takes minutes.
func clusterWanted(t *testing.T) {
	t.Helper()
	if os.Getenv("FLEETSCRIBE_REQUIRE_KUBE") != "1" && os.Getenv("FLEETSCRIBE_KUBE") == "" {
		t.Skip("the real control plane runs in make k8s-validate (FLEETSCRIBE_REQUIRE_KUBE=1)")
	}
}

// kubeBinary is tools/kube, built once for each version of its sources in
// the user's cache folder, or FLEETSCRIBE_KUBE (a binary built before).
func kubeBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLEETSCRIBE_KUBE"); p != "" {
		return p
	}
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "tools", "kube")
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "fleetscribe", "kube-"+hex.EncodeToString(h.Sum(nil))[:16], "kube")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	mod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	v := kubeVersionRE.FindSubmatch(mod)
	if v == nil {
		t.Fatal("tools/kube/go.mod requires no k8s.io/kubernetes version")
	}
	// The version it reports, as a release build sets it.
	pkg := "k8s.io/component-base/version"
	ldflags := fmt.Sprintf("-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s", pkg, v[1], pkg, v[2], pkg, v[3])
	start := time.Now()
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build tools/kube (kube-apiserver and kube-scheduler from k8s.io/kubernetes): %v\n%s", err, out)
	}
	fmt.Printf("KUBE_BUILD seconds=%.0f\n", time.Since(start).Seconds())
	return bin
}

var kubeVersionRE = regexp.MustCompile(`k8s\.io/kubernetes (v(\d+)\.(\d+)\.\d+)`)

// checkToken is the bearer token the checks and kube-scheduler present:
// a member of system:masters, on a server that listens on loopback only.
const checkToken = "fleetscribe-check"

// controlPlane is a running kube-apiserver (and, once started, a
// kube-scheduler) and how to reach it.
type controlPlane struct {
	bin, dir string
	cfg      *rest.Config
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		p, err := freeport.Get()
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	return ports
}

// startProcess runs bin with args until the test ends, its output in the
// file log; exited is closed when it stops.
func startProcess(t *testing.T, log, bin string, args ...string) (exited chan struct{}) {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}

// tail is the end of a log file, for a failure message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// startControlPlane starts kube-apiserver with an embedded etcd and waits
// until it is ready. The check's token may do anything: the checks are of
// the chart, not of access control.
func startControlPlane(t *testing.T, bin string) *controlPlane {
	t.Helper()
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(checkToken+",fleetscribe-check,1000,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		t.Fatal(err)
	}
	p := freePorts(t, 3)
	log := filepath.Join(dir, "apiserver.log")
	exited := startProcess(t, log, bin, "apiserver", "-etcd-dir", filepath.Join(dir, "etcd"),
		"-etcd-port", strconv.Itoa(p[0]), "-etcd-peer-port", strconv.Itoa(p[1]), "--",
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(p[2]),
		"--cert-dir="+filepath.Join(dir, "certs"), "--authorization-mode=AlwaysAllow", "--token-auth-file="+tokens,
		// The kubernetes Service's endpoints would be 127.0.0.1, which the
		// reconciler refuses; nothing here reaches the API through it.
		"--endpoint-reconciler-type=none",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+pubFile,
		"--service-account-signing-key-file="+keyFile, "--service-cluster-ip-range=10.96.0.0/16",
		"--enable-priority-and-fairness=false")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-apiserver's log:\n%s", tail(log))
		}
	})
	host := fmt.Sprintf("https://127.0.0.1:%d", p[2])
	// A loopback server's self-signed certificate.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	ready := false
	testwait.Within(t, 3*time.Minute, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+checkToken)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		ready = resp.StatusCode == http.StatusOK
		return ready
	})
	if !ready {
		t.Fatalf("kube-apiserver did not get ready (exited or 3 minutes)")
	}
	return &controlPlane{bin: bin, dir: dir, cfg: &rest.Config{Host: host, BearerToken: checkToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}}
}

// version is the API server's own version.
func (c *controlPlane) version(t *testing.T) string {
	t.Helper()
	d, err := discovery.NewDiscoveryClientForConfig(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v.GitVersion
}

// startScheduler runs kube-scheduler against the control plane, with the
// default scheduling profile.
func (c *controlPlane) startScheduler(t *testing.T) {
	t.Helper()
	kubeconfig := filepath.Join(c.dir, "kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: check, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: check}}]
current-context: test
`, c.cfg.Host, checkToken)
	if err := os.WriteFile(kubeconfig, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(c.dir, "scheduler.log")
	startProcess(t, log, c.bin, "scheduler", "--kubeconfig="+kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(freePorts(t, 1)[0]),
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-scheduler's log:\n%s", tail(log))
		}
	})
}
