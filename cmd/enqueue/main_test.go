package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/creack/pty"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
)

// setup starts the emulator with a bucket of n keys and a queue.
func setup(t *testing.T, n int) (emu *localaws.Server, q localaws.Queue) {
	t.Helper()
	ctx := context.Background()
	emu, err := localaws.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Stop)
	q, err = emu.Provision(ctx, "jobs", 3, "archive", "out")
	if err != nil {
		t.Fatal(err)
	}
	_, s3c := emu.Clients()
	for i := range n {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("archive"), Key: aws.String(fmt.Sprintf("2025/%02d/%04d.wav", i%4, i)), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	return emu, q
}

func receiveAll(t *testing.T, c *sqs.Client, url string) []contract.Job {
	t.Helper()
	var jobs []contract.Job
	for empty := 0; empty < 2; {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 60})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
		}
		for _, m := range out.Messages {
			js, err := contract.ParseMessage([]byte(aws.ToString(m.Body)))
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, js...)
		}
	}
	return jobs
}

// The flags of the first version still work: a prefix with a suffix, job
// options, summary on stdout; without a terminal, progress is JSON lines.
func TestSendWithJobOptionsAndLogProgress(t *testing.T) {
	emu, q := setup(t, 25)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-aws-endpoint", emu.Endpoint, "-queue-url", "jobs", "-bucket", "archive",
		"-prefix", "2025/", "-suffix", ".wav", "-job-formats", "srt,vtt", "-job-model", "asr", "-progress-interval", "1ms"}, nil, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "listed 25, filtered 0, skipped as done 0, sent earlier 0, sent 25, failed 0") {
		t.Errorf("summary: %q", stdout.String())
	}
	sqsc, _ := emu.Clients()
	jobs := receiveAll(t, sqsc, q.URL)
	if len(jobs) != 25 {
		t.Fatalf("%d jobs", len(jobs))
	}
	for _, j := range jobs {
		if j.Bucket != "archive" || j.Model != "asr" || strings.Join(j.Formats, ",") != "srt,vtt" {
			b, _ := json.Marshal(j)
			t.Fatalf("unexpected job %s", b)
		}
	}
	var finished bool
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON log line: %q", sc.Text())
		}
		if l["message"] == "finished" {
			finished = l["sent"] == float64(25) && l["listing_done"] == true
		}
	}
	if !finished {
		t.Errorf("no final progress line with the counts:\n%s", stderr.String())
	}
}

// On a terminal, a progress bar with the count, the rate and an ETA.
func TestProgressBarOnTerminal(t *testing.T) {
	emu, _ := setup(t, 120)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	var (
		screen bytes.Buffer
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(&screen, ptmx)
	}()
	var stdout bytes.Buffer
	err = run(context.Background(), []string{"-aws-endpoint", emu.Endpoint, "-queue-url", "jobs", "-bucket", "archive",
		"-prefix", "2025/", "-rate", "400", "-progress-interval", "20ms"}, nil, &stdout, tty)
	_ = tty.Close()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	s := screen.String()
	for _, want := range []string{"sending", "120/120", "keys/s", "100%", "█"} {
		if !strings.Contains(s, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, s)
		}
	}
	// While sending: a partial bar with elapsed time and ETA ([1s:2s]).
	if !regexp.MustCompile(`sending +[1-9][0-9]?% .*\[[0-9]+s:[0-9]+s\]`).MatchString(s) {
		t.Errorf("no partial bar with an ETA:\n%q", s)
	}
	if strings.Contains(s, `"level"`) {
		t.Errorf("JSON log lines on a terminal:\n%q", s)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-bucket", "b", "k"},
		{"-queue-url", "q", "-bucket", "b"},
		{"-queue-url", "q", "-prefix", "p/"},
		{"-queue-url", "q", "-bucket", "b", "-prefix", "p/", "-skip-done"},
		{"-queue-url", "q", "-bucket", "b", "k", "-min-size", "ten"},
		{"-queue-url", "q", "-bucket", "b", "k", "-modified-after", "yesterday"},
		{"-queue-url", "q", "-bucket", "b", "k", "-include", "[a-"},
		{"-queue-url", "q", "-bucket", "b", "k", "-job-formats", "docx"},
		{"-queue-url", "q", "-bucket", "b", "k", "-progress", "fancy"},
		{"-queue-url", "q", "-bucket", "b", "k", "-job-speakers", "max=0"},
		{"-queue-url", "q", "-bucket", "b", "k", "-job-speakers", "min=3,max=2"},
		{"-queue-url", "q", "-bucket", "b", "k", "-job-speakers", "max=2.5"},
		{"-queue-url", "q", "-bucket", "b", "k", "-job-speakers", "max=31"},
		{"-queue-url", "q", "-bucket", "b", "k", "-job-channels", "stereo"},
		{"-queue-url", "q", "-bucket", "b", "k", "-job-speakers", "on", "-job-channels", "split"},
		{"redrive"},
		{"redrive", "-dlq-url", "d", "-error-match", "("},
		{"status"},
	} {
		if err := run(context.Background(), args, nil, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

// status and redrive through the command line.
func TestStatusAndRedriveCommands(t *testing.T) {
	emu, q := setup(t, 0)
	sqsc, _ := emu.Clients()
	for i := range 3 {
		body, _ := contract.Job{Bucket: "archive", Key: fmt.Sprintf("k%d.wav", i)}.Encode()
		if _, err := sqsc.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL), MessageBody: aws.String(string(body))}); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"status", "-aws-endpoint", emu.Endpoint, "-queue-url", "jobs", "-window", "0"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "dlq jobs-dlq") || !strings.Contains(out.String(), "3") {
		t.Errorf("status:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"redrive", "-aws-endpoint", emu.Endpoint, "-dlq-url", "jobs-dlq", "-to", "jobs"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "moved 3") {
		t.Errorf("redrive: %s", out.String())
	}
	if n := len(receiveAll(t, sqsc, q.URL)); n != 3 {
		t.Errorf("%d jobs back in the queue", n)
	}
}

// Help names every flag of each subcommand with its environment variable.
func TestHelp(t *testing.T) {
	for _, sub := range []string{"", "redrive", "status"} {
		args := []string{"-h"}
		if sub != "" {
			args = []string{sub, "-h"}
		}
		var errb bytes.Buffer
		_ = run(context.Background(), args, nil, io.Discard, &errb)
		if !strings.Contains(errb.String(), "FLEETSCRIBE_AWS_ENDPOINT") {
			t.Errorf("%s help:\n%s", sub, errb.String())
		}
	}
}

// The real binary killed with SIGKILL at a random moment and run again
// with the same checkpoint: no key is missed. A key can be sent twice
// only if the kill fell between the queue's answer to its call and the
// journal line written right after it; the test bounds that by the calls
// in flight and reports it.
func TestKilledRunResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	emu, q := setup(t, 0)
	ctx := context.Background()
	const n = 3000
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("k/%05d.wav", i))
	}
	list := t.TempDir() + "/keys.txt"
	if err := os.WriteFile(list, []byte(strings.Join(keys, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir() + "/enqueue"
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ckpt := t.TempDir() + "/ckpt"
	args := []string{"-aws-endpoint", emu.Endpoint, "-queue-url", q.URL, "-bucket", "archive", "-from-file", list,
		"-checkpoint", ckpt, "-send-concurrency", "4", "-progress", "none"}
	cmd := exec.CommandContext(ctx, bin, append(args, "-rate", "4000")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(150+rand.IntN(500)) * time.Millisecond) // a random moment within the ~0.75 s run
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var out bytes.Buffer
	resume := exec.CommandContext(ctx, bin, args...)
	resume.Stdout, resume.Stderr = &out, &out
	if err := resume.Run(); err != nil {
		t.Fatalf("resume: %v\n%s", err, out.String())
	}
	sqsc, _ := emu.Clients()
	got := map[string]int{}
	for _, j := range receiveAll(t, sqsc, q.URL) {
		got[j.Key]++
	}
	dup := 0
	for _, k := range keys {
		switch got[k] {
		case 0:
			t.Errorf("%s never sent", k)
		case 1:
		default:
			dup += got[k] - 1
		}
	}
	t.Logf("resumed run: %s; keys sent twice: %d", strings.TrimSpace(out.String()), dup)
	if dup > 4*10 {
		t.Errorf("%d keys sent twice; at most the calls in flight (40 entries) may be", dup)
	}
}

// A dry run prints each job and sends nothing.
func TestDryRun(t *testing.T) {
	emu, q := setup(t, 6)
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"-aws-endpoint", emu.Endpoint, "-bucket", "archive", "-prefix", "2025/", "-dry-run", "-progress", "none"}, nil, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	jobs := 0
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if _, err := contract.ParseMessage([]byte(l)); err == nil {
			jobs++
		}
	}
	if jobs != 6 {
		t.Errorf("%d jobs printed:\n%s", jobs, stdout.String())
	}
	// Speakers and channels are written into every job.
	stdout.Reset()
	if err := run(context.Background(), []string{"-aws-endpoint", emu.Endpoint, "-bucket", "archive", "-prefix", "2025/", "-dry-run", "-progress", "none",
		"-job-speakers", "min=2,max=3"}, nil, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(stdout.String(), "\n"); !strings.Contains(first, `"speakers":{"min":2,"max":3}`) {
		t.Errorf("job without its speakers: %s", first)
	}
	sqsc, _ := emu.Clients()
	if n := len(receiveAll(t, sqsc, q.URL)); n != 0 {
		t.Errorf("a dry run sent %d messages", n)
	}
}

// A name S3 cannot have is refused with the rule it breaks, and never with
// the advice to retry: as -bucket before anything is sent, and per item
// from a file, where the valid items are still sent.
func TestRefusedNamesSayWhy(t *testing.T) {
	emu, q := setup(t, 0)
	for _, bucket := range []string{"in", "In", "my_bucket"} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"-aws-endpoint", emu.Endpoint, "-queue-url", "jobs", "-bucket", bucket, "x.wav"}, nil, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "is not an S3 bucket name") || strings.Contains(err.Error()+stdout.String(), "checkpoint") {
			t.Errorf("-bucket %s: %v (stdout %q), want the S3 rule it breaks and no retry advice", bucket, err, stdout.String())
		}
	}
	list := t.TempDir() + "/keys.txt"
	if err := os.WriteFile(list, []byte("s3://my_bucket/a.wav\ns3://archive/b.wav\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-aws-endpoint", emu.Endpoint, "-queue-url", "jobs", "-from-file", list}, nil, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "1 refused") || !strings.Contains(err.Error(), "only lower-case letters") || strings.Contains(err.Error(), "checkpoint") {
		t.Errorf("from a file: %v, want 1 refused with the rule and no retry advice", err)
	}
	if !strings.Contains(stdout.String(), "sent 1, failed 0, refused 1") {
		t.Errorf("summary %q", stdout.String())
	}
	sqsc, _ := emu.Clients()
	if jobs := receiveAll(t, sqsc, q.URL); len(jobs) != 1 || jobs[0].Bucket != "archive" {
		t.Errorf("sent %+v, want the one valid item", jobs)
	}
}
