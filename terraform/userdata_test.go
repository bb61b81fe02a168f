package terraform

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// renderOpts are the template values a test may change.
type renderOpts struct {
	bootSeconds, heartbeat, unhealthyAfter int64
}

// renderUserData renders the fleet's user data template as Terraform's
// templatefile does, with test values.
func renderUserData(t *testing.T, env map[string]string, o renderOpts) string {
	t.Helper()
	if o.bootSeconds == 0 {
		o.bootSeconds = 2700
	}
	if o.heartbeat == 0 {
		o.heartbeat = 60
	}
	if o.unhealthyAfter == 0 {
		o.unhealthyAfter = 10
	}
	src, err := os.ReadFile("modules/fleet/user_data.sh.tftpl")
	if err != nil {
		t.Fatal(err)
	}
	tpl, diags := hclsyntax.ParseTemplate(src, "user_data.sh.tftpl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	vals := map[string]cty.Value{}
	for k, v := range env {
		vals[k] = cty.StringVal(v)
	}
	v, diags := tpl.Value(&hcl.EvalContext{Variables: map[string]cty.Value{
		"compose_gz_b64":  cty.StringVal("H4sIAAAAAAAAA0tMSgYAK8vU1AMAAAA="),
		"env":             cty.MapVal(vals),
		"asg_name":        cty.StringVal("fleet"),
		"per_gpu":         cty.NumberIntVal(8),
		"jobs_per_gpu":    cty.NumberIntVal(16),
		"lifecycle_hook":  cty.StringVal("fleet-drain"),
		"launch_hook":     cty.StringVal("fleet-launch"),
		"drain_seconds":   cty.NumberIntVal(300),
		"stop_seconds":    cty.NumberIntVal(360),
		"boot_seconds":    cty.NumberIntVal(o.bootSeconds),
		"heartbeat_every": cty.NumberIntVal(o.heartbeat),
		"unhealthy_after": cty.NumberIntVal(o.unhealthyAfter),
		"metric_ns":       cty.StringVal("fleetscribe"),
	}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return v.AsString()
}

// heredoc returns the body of the file a script writes with
// cat >PATH <<'TAG' ... TAG.
func heredoc(t *testing.T, script, path, tag string) string {
	t.Helper()
	start := "cat >" + path + " <<'" + tag + "'\n"
	i := strings.Index(script, start)
	if i < 0 {
		t.Fatalf("the script writes no %s", path)
	}
	body := script[i+len(start):]
	j := strings.Index(body, "\n"+tag+"\n")
	if j < 0 {
		t.Fatalf("%s: heredoc %s not closed", path, tag)
	}
	return body[:j+1]
}

var testEnv = map[string]string{
	"FLEETSCRIBE_QUEUE_URL": "https://sqs.example/q", "FLEETSCRIBE_OUTPUT_BUCKET": "out", "FLEETSCRIBE_INPUT_BUCKETS": "in",
	"WORKER_IMAGE": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/fleetscribe/worker:1",
	"TRITON_IMAGE": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/tritonserver:24.10-py3",
	"CUDA_IMAGE":   "210987654321.dkr.ecr.us-east-2.amazonaws.com/cuda:12.4.1-base-ubuntu22.04",
	"MODEL_S3_URI": "s3://models/asr/", "MODEL_REPOSITORY": "/opt/fleetscribe/models", "LOG_GROUP": "/fleetscribe/fleet", "FLEETSCRIBE_ASG_NAME": "fleet",
}

// TestUserDataRendersToValidShell renders the user data template as
// templatefile does and checks every script in it with bash -n.
func TestUserDataRendersToValidShell(t *testing.T) {
	script := renderUserData(t, testEnv, renderOpts{})
	for _, want := range []string{"\nFLEETSCRIBE_INPUT_BUCKETS=in\nFLEETSCRIBE_OUTPUT_BUCKET=out\nFLEETSCRIBE_QUEUE_URL=https://sqs.example/q\nLOG_GROUP=",
		"docker compose stop -t 360", "--lifecycle-hook-name 'fleet-drain'", "--lifecycle-hook-name 'fleet-launch'",
		"systemctl enable fleetscribe-drain.service fleetscribe.service",
		"plan=(-gpus auto -per-gpu 8 -jobs-per-gpu 16 ", "mps status -gpus auto -per-gpu 8 -recover"} {
		if !strings.Contains(script, want) {
			t.Errorf("rendered user data lacks %q", want)
		}
	}
	// EC2 takes 16 KB, gzipped as the launch template carries it; the
	// compose file adds about 2.4 KB, and the module's precondition
	// measures the real one (its example's tests, realistic names).
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(script))
	_ = zw.Close()
	if gz.Len() > 9000 {
		t.Errorf("rendered user data is %d bytes gzipped without its compose file; EC2 takes 16 KB in all", gz.Len())
	}
	dir := t.TempDir()
	files := map[string]string{"user_data.sh": script}
	for path, tag := range map[string]string{"fleetscribe-stack": "STACK", "fleetscribe-start": "START", "fleetscribe-health": "HEALTH", "fleetscribe-drain": "DRAIN", "fleetscribe-imds": "IMDS", "fleetscribe-group": "GROUP"} {
		files[path] = heredoc(t, script, "/usr/local/bin/"+path, tag)
	}
	for name, body := range files {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(t.Context(), "bash", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", name, err, out)
		}
	}
}

// instance is a folder holding the boot's scripts, pointed into it, and
// stand-ins for what they call (nvidia-smi, aws, docker, curl, systemctl,
// the worker, instance metadata), each recording its calls.
type instance struct {
	t                    *testing.T
	dir, bin, opt, calls string
	env                  []string
}

func newInstance(t *testing.T, script string) *instance {
	t.Helper()
	dir := t.TempDir()
	in := &instance{t: t, dir: dir, bin: filepath.Join(dir, "bin"), opt: filepath.Join(dir, "opt"), calls: filepath.Join(dir, "calls")}
	for _, d := range []string{in.bin, in.opt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(in.opt, ".env"), []byte(heredoc(t, script, "/opt/fleetscribe/.env", "ENV")), 0o600); err != nil {
		t.Fatal(err)
	}
	// The script's own paths, pointed into the test's folder.
	paths := strings.NewReplacer("/opt/fleetscribe", in.opt, "/usr/local/bin/fleetscribe-worker", filepath.Join(in.bin, "fleetscribe-worker"),
		"/run/fleetscribe-health.failures", filepath.Join(dir, "health.failures"), "install -d -m 0755", "mkdir -p")
	for path, tag := range map[string]string{"fleetscribe-stack": "STACK", "fleetscribe-start": "START", "fleetscribe-health": "HEALTH", "fleetscribe-group": "GROUP", "fleetscribe-drain": "DRAIN"} {
		in.write(path, paths.Replace(heredoc(t, script, "/usr/local/bin/"+path, tag)))
	}
	fails := func(what string) string { return `if [ "$FAIL" = "` + what + `" ]; then exit 1; fi` }
	in.standIn("fleetscribe-imds", `case "$1" in
  instance-id) echo i-0abc;; placement/region) echo eu-west-1;;
  autoscaling/target-lifecycle-state) [ "$TARGET" != unreadable ] || exit 22; echo "$TARGET";;
esac`)
	in.standIn("nvidia-smi", fails("nvidia-smi"))
	// The first $COMPLETE_FAILS lifecycle completions fail.
	// Auto Scaling names the instance's group: $GROUP (the fleet's, fleet,
	// unless a test says otherwise; unreadable: the call fails), after
	// $GROUP_FAILS failed calls.
	in.standIn("aws", `case "$1 $2" in
  "autoscaling describe-auto-scaling-instances") n=$(($(cat "$STATE.group" 2>/dev/null || echo 0) + 1)); echo $n >"$STATE.group"
    [ "$GROUP" != unreadable ] && [ "$n" -gt "${GROUP_FAILS:-0}" ] || exit 255; echo "${GROUP:-fleet}";;
  "ecr get-login-password") `+fails("aws-ecr")+`; echo token;;
  "s3 sync") `+fails("aws-s3")+`;;
  "autoscaling complete-lifecycle-action") n=$(($(cat "$STATE.complete" 2>/dev/null || echo 0) + 1)); echo $n >"$STATE.complete"
    [ "$n" -gt "${COMPLETE_FAILS:-0}" ] || exit 255;;
esac
exit 0`)
	in.standIn("docker", `case "$1 $2" in
  "login "*) cat >/dev/null;; # reads the password, as docker login --password-stdin does
  "pull "*) `+fails("docker-pull")+`; [ -z "$PULL_SECONDS" ] || /bin/sleep "$PULL_SECONDS";;
  "create "*) echo c0ffee;;
  "compose pull") `+fails("compose-pull")+`;;
  "compose stop") /bin/sleep "${STOP_SECONDS:-0}";; # the workers draining
esac
exit 0`)
	in.standIn("fleetscribe-worker", `if [ "$2" = up ]; then `+fails("worker")+`; fi`)
	// Not ready for the first $NOT_READY probes (all of them with "never").
	in.standIn("curl", `n=$(($(cat "$STATE.curl" 2>/dev/null || echo 0) + 1)); echo $n >"$STATE.curl"
[ "$NOT_READY" = never ] && exit 7
[ "$n" -gt "${NOT_READY:-0}" ] || exit 7`)
	in.standIn("systemctl", "exit 0")
	in.standIn("sleep", `exec /bin/sleep 0.2`) // the scripts' polls, quickened
	in.env = []string{"PATH=" + in.bin + ":" + os.Getenv("PATH"), "STATE=" + filepath.Join(dir, "state"), "TARGET=InService"}
	return in
}

func (in *instance) write(name, body string) {
	in.t.Helper()
	if err := os.WriteFile(filepath.Join(in.bin, name), []byte(body), 0o755); err != nil {
		in.t.Fatal(err)
	}
}

func (in *instance) standIn(name, body string) {
	in.write(name, "#!/bin/bash\necho \""+name+" $*\" >>"+in.calls+"\n"+body+"\n")
}

// run runs one of the scripts with extra environment; it returns the
// output and whether it exited 0.
func (in *instance) run(script string, env ...string) (string, bool) {
	in.t.Helper()
	cmd := exec.CommandContext(in.t.Context(), "bash", filepath.Join(in.bin, script))
	cmd.Env = append(append(os.Environ(), in.env...), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

func (in *instance) called() []string {
	b, _ := os.ReadFile(in.calls)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (in *instance) count(prefix string) int {
	n := 0
	for _, c := range in.called() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// result is the launch lifecycle action's result, "" if none.
func (in *instance) result() string {
	var r string
	for _, c := range in.called() {
		if strings.HasPrefix(c, "aws autoscaling complete-lifecycle-action") {
			r = c[strings.Index(c, "--lifecycle-action-result ")+len("--lifecycle-action-result "):]
		}
	}
	return r
}

// The boot, run against the stand-ins. Every failing step, and a boot
// that outlasts its timeout, abandons the launch and publishes a boot
// failure; a boot that succeeds continues it, once the worker is ready.
// Headed for the warm pool, the instance prepares and does not start its
// stack. bash -n cannot see any of this (run as an if condition, a
// function ignores set -e: the bug this began with).
func TestBootAbandonsOnEveryFailure(t *testing.T) {
	for _, c := range []struct {
		name   string
		env    []string
		opts   renderOpts
		want   string // the lifecycle action's result
		check  func(t *testing.T, in *instance)
		within time.Duration
	}{
		{name: "boots", want: "CONTINUE", env: []string{"NOT_READY=2"}, check: func(t *testing.T, in *instance) {
			for _, want := range []string{"fleetscribe-worker mps compose -gpus auto -per-gpu 8 -jobs-per-gpu 16 -project-dir " + in.opt +
				" -log-driver awslogs -log-opt awslogs-group=/fleetscribe/fleet -log-opt awslogs-region=eu-west-1 -log-opt tag=i-0abc/{{.Name}} -log-opt mode=non-blocking -log-opt max-buffer-size=8m -o docker-compose.override.yml",
				"docker compose pull --quiet", "fleetscribe-worker mps up -gpus auto", "systemctl start fleetscribe-mps.timer fleetscribe-health.timer"} {
				if in.count(want) != 1 {
					t.Errorf("not run once: %q", want)
				}
			}
			// In service only once ready: two probes failed, the third answered.
			if n := in.count("curl -fsS -m 5 -o /dev/null http://127.0.0.1:9100/readyz?local=1"); n != 3 {
				t.Errorf("%d readiness probes, want 3", n)
			}
			// Every ECR registry the images come from, once each.
			if n := in.count("aws ecr get-login-password"); n != 2 {
				t.Errorf("%d registry logins, want 2 (two registries)", n)
			}
		}},
		{name: "warm pool", env: []string{"TARGET=Warmed:Stopped"}, want: "CONTINUE", check: func(t *testing.T, in *instance) {
			if in.count("docker compose pull") != 1 || in.count("aws s3 sync") != 1 {
				t.Error("an instance headed for the warm pool is not prepared")
			}
			if in.count("fleetscribe-worker mps up") != 0 || in.count("systemctl start") != 0 {
				t.Error("an instance headed for the warm pool started its stack: it would take jobs and be stopped")
			}
		}},
		{name: "fail=nvidia-smi", env: []string{"FAIL=nvidia-smi"}, want: "ABANDON"},
		{name: "fail=aws-ecr", env: []string{"FAIL=aws-ecr"}, want: "ABANDON"},
		{name: "fail=aws-s3", env: []string{"FAIL=aws-s3"}, want: "ABANDON"},
		{name: "fail=docker-pull", env: []string{"FAIL=docker-pull"}, want: "ABANDON"},
		{name: "fail=compose-pull", env: []string{"FAIL=compose-pull"}, want: "ABANDON"},
		{name: "fail=worker", env: []string{"FAIL=worker"}, want: "ABANDON"},
		{name: "slow pull heartbeats", env: []string{"PULL_SECONDS=2"}, opts: renderOpts{heartbeat: 1}, want: "CONTINUE", check: func(t *testing.T, in *instance) {
			if n := in.count("aws autoscaling record-lifecycle-action-heartbeat"); n < 2 {
				t.Errorf("%d heartbeats in a 2 s pull at one every 0.2 s", n)
			}
		}},
		{name: "boot timeout", env: []string{"PULL_SECONDS=60"}, opts: renderOpts{bootSeconds: 2}, want: "ABANDON", within: 20 * time.Second},
		{name: "never ready", env: []string{"NOT_READY=never"}, opts: renderOpts{bootSeconds: 2}, want: "ABANDON", within: 20 * time.Second, check: func(t *testing.T, in *instance) {
			// The worker is stopped before the launch is abandoned: it
			// would take jobs until EC2 terminated the instance.
			calls := in.called()
			stop := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "docker compose stop -t 60") })
			abandon := slices.IndexFunc(calls, func(c string) bool { return strings.HasSuffix(c, "--lifecycle-action-result ABANDON") })
			if stop < 0 || abandon < stop {
				t.Errorf("worker stopped at call %d, launch abandoned at %d: want the stop first", stop, abandon)
			}
		}},
		// A failed CONTINUE is tried again, not left for the hook's
		// timeout to abandon a healthy instance.
		{name: "continue retried", env: []string{"COMPLETE_FAILS=2"}, want: "CONTINUE", check: func(t *testing.T, in *instance) {
			if n := in.count("aws autoscaling complete-lifecycle-action"); n != 3 {
				t.Errorf("%d completions, want 3 (two failed)", n)
			}
			if in.count("docker compose stop") != 0 {
				t.Error("a boot whose CONTINUE went through on a retry was stopped")
			}
		}},
		// A canary's instance (the same template on the canary's group)
		// reports to its own group: hooks, boot failures, the worker's
		// group name.
		{name: "canary", env: []string{"GROUP=fleet-canary"}, want: "CONTINUE", check: func(t *testing.T, in *instance) {
			if in.count("aws autoscaling complete-lifecycle-action --region eu-west-1 --auto-scaling-group-name fleet-canary --lifecycle-hook-name fleet-launch") != 1 {
				t.Errorf("the canary's launch not completed on its own group:\n%s", strings.Join(in.called(), "\n"))
			}
			env, _ := os.ReadFile(filepath.Join(in.opt, ".env"))
			if !strings.Contains(string(env), "\nFLEETSCRIBE_ASG_NAME=fleet-canary\n") {
				t.Errorf("the worker's group is not the canary's:\n%s", env)
			}
		}},
		// Auto Scaling failing a while (throttled, 15 s and more): the
		// canary is asked again, and still reports to its own group.
		{name: "group read late", env: []string{"GROUP=fleet-canary", "GROUP_FAILS=8"}, want: "CONTINUE", check: func(t *testing.T, in *instance) {
			if in.count("aws autoscaling complete-lifecycle-action --region eu-west-1 --auto-scaling-group-name fleet-canary --lifecycle-hook-name fleet-launch") != 1 {
				t.Errorf("a canary whose group was read late is taken for another group:\n%s", strings.Join(in.called(), "\n"))
			}
		}},
		// Auto Scaling never answering: the instance is no group's, so it
		// starts nothing and charges no group a boot failure; the launch
		// hook's timeout abandons it.
		{name: "group unreadable", env: []string{"GROUP=unreadable"}, want: "", check: func(t *testing.T, in *instance) {
			if in.count("aws autoscaling describe-auto-scaling-instances") < 20 {
				t.Errorf("the group asked %d times before giving up", in.count("aws autoscaling describe-auto-scaling-instances"))
			}
			if in.count("docker") != 0 || in.count("aws cloudwatch put-metric-data") != 0 || in.count("aws autoscaling record-lifecycle-action-heartbeat") != 0 {
				t.Errorf("an instance of no known group started or reported:\n%s", strings.Join(in.called(), "\n"))
			}
		}},
		// Where the launch is headed cannot be read: asked again, then
		// abandoned, never started (it may be headed for the warm pool).
		{name: "target state unreadable", env: []string{"TARGET=unreadable"}, want: "ABANDON", check: func(t *testing.T, in *instance) {
			if n := in.count("fleetscribe-imds autoscaling/target-lifecycle-state"); n != 10 {
				t.Errorf("target state read %d times, want 10", n)
			}
			if in.count("fleetscribe-worker mps up") != 0 || in.count("docker compose pull") != 0 {
				t.Error("a launch of unknown destination started its stack")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := newInstance(t, renderUserData(t, testEnv, c.opts))
			start := time.Now()
			out, ok := in.run("fleetscribe-start", c.env...)
			if got := in.result(); got != c.want {
				t.Fatalf("lifecycle action %q, want %q\ncalls:\n%s\noutput:\n%s", got, c.want, strings.Join(in.called(), "\n"), out)
			}
			if ok != (c.want == "CONTINUE") {
				t.Errorf("exit ok=%v with %s", ok, c.want)
			}
			failures := in.count("aws cloudwatch put-metric-data --region eu-west-1 --namespace fleetscribe --metric-name BootFailures --dimensions AutoScalingGroupName=fleet --value 1")
			if failures != map[bool]int{true: 1, false: 0}[c.want == "ABANDON"] {
				t.Errorf("%d boot failures published with %s", failures, c.want)
			}
			if c.within > 0 && time.Since(start) > c.within {
				t.Errorf("took %s", time.Since(start))
			}
			if c.check != nil {
				c.check(t, in)
			}
		})
	}
}

// The instance health check: only after unhealthy_after failed checks in
// a row, only in service, and a success resets the count.
func TestHealthCheckMarksUnhealthy(t *testing.T) {
	in := newInstance(t, renderUserData(t, testEnv, renderOpts{unhealthyAfter: 3}))
	check := func(env ...string) {
		t.Helper()
		if out, ok := in.run("fleetscribe-health", env...); !ok {
			t.Fatalf("health check failed: %s", out)
		}
	}
	marked := func() int { return in.count("aws autoscaling set-instance-health") }
	check("NOT_READY=never")
	check("NOT_READY=never")
	if marked() != 0 {
		t.Fatal("marked unhealthy after two failed checks of three")
	}
	_ = os.Remove(filepath.Join(in.dir, "state.curl"))
	check() // ready: the count starts again
	check("NOT_READY=never")
	check("NOT_READY=never")
	if marked() != 0 {
		t.Fatal("a success did not reset the count")
	}
	check("NOT_READY=never")
	if marked() != 1 || in.count("aws autoscaling set-instance-health --region eu-west-1 --instance-id i-0abc --health-status Unhealthy") != 1 {
		t.Fatalf("not marked unhealthy after three failed checks in a row:\n%s", strings.Join(in.called(), "\n"))
	}
	// Draining (or any state but in service): never marked, never counted.
	for range 5 {
		check("NOT_READY=never", "TARGET=Terminated")
	}
	if marked() != 1 {
		t.Error("marked unhealthy while not in service")
	}
}

// The drain keeps the termination's lifecycle action alive while the
// workers drain: it heartbeats the hook at least every quarter of the
// hook's heartbeat timeout (the rendered 300-s drain's hook: 480 s) for as
// long as compose takes to stop them, then continues the termination once.
func TestDrainHeartbeatsWhileTheWorkersStop(t *testing.T) {
	in := newInstance(t, renderUserData(t, testEnv, renderOpts{}))
	out, ok := in.run("fleetscribe-drain", "TARGET=Terminated", "STOP_SECONDS=1.5")
	if !ok {
		t.Fatalf("drain failed:\n%s", out)
	}
	const hookTimeout = min(300+180, 7200) // main.tf's drain_hook_timeout at the rendered drain
	stopping, heartbeats, completed := false, 0, 0
	for _, c := range in.called() {
		switch {
		case strings.HasPrefix(c, "docker compose stop"):
			stopping = true
		case strings.HasPrefix(c, "aws autoscaling record-lifecycle-action-heartbeat") && strings.Contains(c, "--lifecycle-hook-name fleet-drain"):
			heartbeats++
		case strings.HasPrefix(c, "aws autoscaling complete-lifecycle-action"):
			completed++
			if !strings.HasSuffix(c, "--lifecycle-action-result CONTINUE") {
				t.Errorf("the drain ends the termination with %q", c)
			}
		case stopping && strings.HasPrefix(c, "sleep "):
			var every int
			if _, err := fmt.Sscanf(c, "sleep %d", &every); err != nil || every > hookTimeout/4 {
				t.Errorf("%q between heartbeats: the hook (%d s) may time out mid-drain", c, hookTimeout)
			}
		}
	}
	if !stopping || heartbeats < 2 || completed != 1 {
		t.Errorf("stopped %v, %d heartbeats, %d completions: want the stop, heartbeats while it lasts, one completion\n%v", stopping, heartbeats, completed, in.called())
	}
}
