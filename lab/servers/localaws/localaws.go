// Package localaws runs the pinned local SQS+S3 emulator (fauxqs, under
// tools/fauxqs) for tests and the demo, and provisions a bucket and queues
// shaped like production: each queue with a dead-letter queue and a
// redrive policy.
//
// fauxqs is fast but does not implement three behaviours some of the
// project's correctness rests on: S3's conditional writes (If-None-Match,
// which claims use), listings in byte order (which resumable enqueue
// watermarks use) and SQS message move tasks (which redrive uses). The
// tests of those paths also run against moto's server (StartMoto, the pinned
// build in .moto/venv), which implements the first two, and ElasticMQ
// (StartElasticMQ, the pinned SQS server in .elasticmq/lib), which
// implements the third; TestFidelity measures all three servers on exactly
// these.
package localaws

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/lab/kit/freeport"
	"github.com/fleetscribe/fleetscribe/lab/kit/modroot"
)

// Server is a running emulator.
type Server struct {
	Endpoint string
	Name     string // "fauxqs", "moto" or "elasticmq"
	cmd      *exec.Cmd
	stdin    io.WriteCloser // fauxqs: closing it stops the server
	tmp      string         // removed at Stop
	done     chan error
	stop     sync.Once
}

// ToolsDir finds tools/fauxqs in the module root.
func ToolsDir() (string, error) {
	root, err := modroot.Find()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "tools", "fauxqs"), nil
}

// Start launches the emulator on a free loopback port and waits until
// GET /health answers. Call Stop when done.
func Start(ctx context.Context) (*Server, error) {
	dir, err := ToolsDir()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "fauxqs")); err != nil {
		return nil, fmt.Errorf("fauxqs is not installed in %s: run `make deps` (npm ci): %w", dir, err)
	}
	// The emulator outlives ctx, which bounds only the start; Stop ends it.
	cmd := exec.Command("node", "serve.mjs", "0") //nolint:noctx // see above
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdin, err := cmd.StdinPipe() // closing it (or our death) stops the server
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fauxqs: %w", err)
	}
	s := &Server{Name: "fauxqs", cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { s.done <- cmd.Wait() }()

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case line, ok := <-lines:
		if !ok {
			s.Stop()
			return nil, errors.New("fauxqs exited before listening")
		}
		var hello struct {
			Port int `json:"port"`
		}
		if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Port == 0 {
			s.Stop()
			return nil, fmt.Errorf("fauxqs: unexpected first line %q", line)
		}
		s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(hello.Port)
	case <-ctx.Done():
		s.Stop()
		return nil, fmt.Errorf("fauxqs did not start: %w", ctx.Err())
	}
	if err := s.waitHealthy(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) waitHealthy(ctx context.Context) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fauxqs health check: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RequireMotoEnv, set to 1 (make test sets it), turns a missing moto or
// ElasticMQ server from a skip into a failure in the tests that need them.
const RequireMotoEnv = "FLEETSCRIBE_REQUIRE_MOTO"

// MotoBin returns the pinned moto server that `make deps` installs.
func MotoBin() (string, error) {
	root, err := modroot.Find()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".moto", "venv", "bin", "moto_server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("moto is not installed in %s: run `make deps`: %w", filepath.Dir(bin), err)
	}
	return bin, nil
}

// StartMoto launches moto's server (S3 and SQS, in memory) on a free
// loopback port and waits until it answers. Call Stop when done.
func StartMoto(ctx context.Context) (*Server, error) {
	bin, err := MotoBin()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port)) //nolint:noctx // outlives ctx; Stop ends it
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start moto: %w", err)
	}
	s := &Server{Name: "moto", Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	return s, s.waitAnswering(ctx, "/moto-api/data.json")
}

// ElasticMQLib returns the folder of the pinned ElasticMQ server's jars
// that `make deps` copies.
func ElasticMQLib() (string, error) {
	root, err := modroot.Find()
	if err != nil {
		return "", err
	}
	lib := filepath.Join(root, ".elasticmq", "lib")
	if m, _ := filepath.Glob(filepath.Join(lib, "elasticmq-server_*.jar")); len(m) == 0 {
		return "", fmt.Errorf("ElasticMQ is not installed in %s: run `make deps`", lib)
	}
	return lib, nil
}

// StartElasticMQ launches ElasticMQ (SQS only, in memory) on a free loopback
// port and waits until it answers. Its S3 client reaches nothing: pair it
// with another server's. Call Stop when done.
func StartElasticMQ(ctx context.Context) (*Server, error) {
	lib, err := ElasticMQLib()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "elasticmq-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "elasticmq.conf")
	body := fmt.Sprintf(`include classpath("application.conf")
node-address { protocol = http, host = 127.0.0.1, port = %d, context-path = "" }
rest-sqs { enabled = true, bind-port = %d, bind-hostname = "127.0.0.1", sqs-limits = strict }
rest-stats { enabled = false }
`, port, port)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("java", "-Dconfig.file="+conf, "-cp", filepath.Join(lib, "*"), "org.elasticmq.server.Main") //nolint:noctx // outlives ctx; Stop ends it
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start elasticmq: %w", err)
	}
	s := &Server{Name: "elasticmq", Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan error, 1), tmp: dir}
	go func() { s.done <- cmd.Wait() }()
	return s, s.waitAnswering(ctx, "/?Action=ListQueues")
}

// freePort reserves the emulator's port (freeport: held against other
// packages' servers starting at the same time).
func freePort() (int, error) { return freeport.Get() }

// waitAnswering waits until GET path answers 200, the server exits, or 60 s
// pass; on failure it stops the server.
func (s *Server) waitAnswering(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+path, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			s.Stop()
			return fmt.Errorf("%s did not start: %w", s.Name, ctx.Err())
		case err := <-s.done:
			s.done <- err
			s.Stop()
			return fmt.Errorf("%s exited before answering: %v", s.Name, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the emulator and waits for it to exit. Later calls do nothing.
func (s *Server) Stop() {
	s.stop.Do(func() {
		if s.stdin != nil {
			_ = s.stdin.Close()
		}
		if s.tmp != "" {
			defer os.RemoveAll(s.tmp)
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

// Clients returns SDK clients pointed at the emulator.
func (s *Server) Clients() (*sqs.Client, *s3.Client) {
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
	sqsc, s3c, _ := awsconf.Local(cfg, s.Endpoint)
	return sqsc, s3c
}

// Queue describes a provisioned queue and its dead-letter queue.
type Queue struct {
	URL, DLQURL string
}

// CreateQueue creates name and name-dlq with a redrive policy of
// maxReceives, as the Terraform module does.
func CreateQueue(ctx context.Context, c *sqs.Client, name string, maxReceives int, visibility time.Duration) (Queue, error) {
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
	if err != nil {
		return Queue{}, fmt.Errorf("create dlq: %w", err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: dlq.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return Queue{}, fmt.Errorf("dlq arn: %w", err)
	}
	redrive, _ := json.Marshal(map[string]any{
		"deadLetterTargetArn": attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)],
		"maxReceiveCount":     strconv.Itoa(maxReceives),
	})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			string(sqstypes.QueueAttributeNameRedrivePolicy):     string(redrive),
			string(sqstypes.QueueAttributeNameVisibilityTimeout): strconv.Itoa(int(visibility / time.Second)),
		},
	})
	if err != nil {
		return Queue{}, fmt.Errorf("create queue: %w", err)
	}
	return Queue{URL: aws.ToString(q.QueueUrl), DLQURL: aws.ToString(dlq.QueueUrl)}, nil
}

// Provision creates a queue with its DLQ (see CreateQueue) and buckets:
// what a test or the demo needs before sending work.
func (s *Server) Provision(ctx context.Context, queue string, maxReceives int, buckets ...string) (Queue, error) {
	sqsc, s3c := s.Clients()
	for _, b := range buckets {
		if err := CreateBucket(ctx, s3c, b); err != nil {
			return Queue{}, err
		}
	}
	return CreateQueue(ctx, sqsc, queue, maxReceives, 30*time.Second)
}

// CreateBucket creates a bucket.
func CreateBucket(ctx context.Context, c *s3.Client, name string) error {
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}

// Depth returns the visible and in-flight message counts of a queue.
func Depth(ctx context.Context, c *sqs.Client, url string) (visible, inflight int, err error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("queue attributes: %w", err)
	}
	visible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	inflight, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inflight, nil
}
