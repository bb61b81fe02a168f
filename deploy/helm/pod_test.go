package helm_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/syncbuf"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/mps"
)

// The rendered pod, rehearsed on this host where no cluster is: the Triton
// containers of a time-sliced plan run their rendered commands as real
// Triton servers (the CPU model in place of /models), the worker runs with
// the rendered container's environment against a local SQS and S3 and
// transcribes an upload, and the rendered preStop hook drains it: it exits
// 0 with nothing left in the queue.
func TestRenderedPodRuns(t *testing.T) {
	tritonproc.Require(t)
	helmBin(t)
	ctx := t.Context()
	root, err := tritonproc.Root()
	if err != nil {
		t.Fatal(err)
	}
	launcher, err := tritonproc.Launcher()
	if err != nil {
		t.Fatal(err)
	}
	bin := builtWorker

	emu, err := localaws.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Stop)
	q, err := emu.Provision(ctx, "pod-live", 3, "uploads", "transcripts")
	if err != nil {
		t.Fatal(err)
	}
	sqsc, s3c := emu.Clients()
	wav := audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: make([]float32, 32000)})
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("uploads"), Key: aws.String("calls/a.wav"), Body: bytes.NewReader(wav)}); err != nil {
		t.Fatal(err)
	}
	body, _ := contract.Job{Bucket: "uploads", Key: "calls/a.wav"}.Encode()
	if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(string(body))}); err != nil {
		t.Fatal(err)
	}

	// The plan and the chart, on ports free here.
	base, err := tritonproc.FreePortRange(3 * 2)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := mps.PlanKube(mps.KubeDevicePluginTimeSlicing, 1, 2, 0, base)
	if err != nil {
		t.Fatal(err)
	}
	planPath := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(planPath, kp.Values("test"), 0o644); err != nil {
		t.Fatal(err)
	}
	metrics, err := tritonproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	out, err := helmTemplate(t, planPath, "queues.live.url="+q.URL, "queues.bulk.url=", "aws.endpoint="+emu.Endpoint,
		"worker.metricsPort="+strconv.Itoa(metrics), "worker.env.FLEETSCRIBE_WAIT_TIME=1s")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	r := rendering{kp, objs}
	spec := r.deployment().Spec.Template.Spec

	// The Triton containers, in their order.
	repo := filepath.Join(root, "deploy", "triton", "cpu")
	for _, c := range tritons(&spec) {
		argv := slicesReplace(c.Command, map[string]string{"tritonserver": launcher, "--model-repository=/models": "--model-repository=" + repo})
		// A CPU host: loopback only, no GPU metrics.
		argv = append(argv, "--grpc-address=127.0.0.1", "--http-address=127.0.0.1", "--allow-gpu-metrics=false")
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 20 * time.Second
		var logs syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-exited })
		addr := "127.0.0.1:" + strings.TrimPrefix(argAt(argv, "--grpc-port="), "--grpc-port=")
		if err := tritonproc.WaitReady(ctx, addr, []string{"asr"}, 120*time.Second, exited); err != nil {
			t.Fatalf("%s: %v\n%s", c.Name, err, logs.String())
		}
	}

	// The worker, with the rendered environment.
	w := container(&spec, "worker")
	wcmd := exec.CommandContext(ctx, bin)
	wcmd.Env = os.Environ()
	for _, e := range w.Env {
		wcmd.Env = append(wcmd.Env, e.Name+"="+e.Value)
	}
	var wlogs syncbuf.Buffer
	wcmd.Stdout, wcmd.Stderr = &wlogs, &wlogs
	wcmd.Cancel = func() error { return wcmd.Process.Signal(syscall.SIGKILL) }
	if err := wcmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wcmd.Wait() }()

	var transcript string
	if !testwait.Within(t, 90*time.Second, func() bool {
		list, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("transcripts"), Prefix: aws.String("transcripts/")})
		if err != nil {
			return false
		}
		for _, o := range list.Contents {
			if k := aws.ToString(o.Key); strings.HasSuffix(k, ".json") && !strings.HasSuffix(k, ".error.json") {
				transcript = k
			}
		}
		return transcript != ""
	}) {
		t.Fatalf("no transcript in 90 s\n%s", wlogs.String())
	}

	// The preStop hook, as the kubelet runs it in the worker's container.
	hook := slicesReplace(w.Lifecycle.PreStop.Exec.Command, map[string]string{"/usr/local/bin/worker": bin})
	if out, err := exec.CommandContext(ctx, hook[0], hook[1:]...).CombinedOutput(); err != nil || string(out) != "draining\n" {
		t.Fatalf("preStop %q: %v %q", hook, err, out)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker after the preStop drain: %v\n%s", err, wlogs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("worker still running 60 s after the preStop drain\n%s", wlogs.String())
	}
	v, f, err := localaws.Depth(context.Background(), sqsc, q.URL)
	if err != nil || v != 0 || f != 0 {
		t.Errorf("queue %d visible, %d in flight (%v) after the drain", v, f, err)
	}
	t.Logf("transcript %s; worker drained and exited 0", transcript)
}

func slicesReplace(argv []string, with map[string]string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if r, ok := with[a]; ok {
			a = r
		}
		out[i] = a
	}
	return out
}

func argAt(argv []string, prefix string) string {
	for _, a := range argv {
		if strings.HasPrefix(a, prefix) {
			return a
		}
	}
	return ""
}
