package awsconf_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"

	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/lab/kit/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (r *recordingLogger) Logf(c logging.Classification, format string, v ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, string(c)+" "+format)
}

// An S3 endpoint that sends objects without a checksum header (as S3 does
// for objects uploaded without one, and many S3-compatible stores always)
// must not make the SDK log a warning per GetObject.
func TestGetObjectWithoutChecksumLogsNothing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "audio/wav")
		_, _ = w.Write([]byte("RIFF"))
	}))
	defer srv.Close()
	rec := &recordingLogger{}
	cfg := aws.Config{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), Logger: rec,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported, // as config.LoadDefaultConfig sets it
	}
	_, s3c, err := awsconf.Local(cfg, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s3c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(out.Body)
	_ = out.Body.Close()
	srv.CloseClientConnections()
	if len(rec.lines) != 0 {
		t.Errorf("SDK logged %q", rec.lines)
	}
}

// The binaries' clients give up on a request that gets no answer (a
// service or path that swallows it) after ResponseHeaderTimeout, so that
// the worker's outage handling sees a hang as it sees a refusal.
func TestClientsGiveUpOnNoAnswer(t *testing.T) {
	cfg, err := awsconf.Config{Region: "us-east-1", Endpoint: "http://127.0.0.1:1"}.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		t.Fatalf("HTTP client %T", cfg.HTTPClient)
	}
	if got := bc.GetTransport().ResponseHeaderTimeout; got != awsconf.ResponseHeaderTimeout || got < 30*time.Second {
		t.Errorf("response header timeout %v, want %v (past SQS's 20-s poll)", got, awsconf.ResponseHeaderTimeout)
	}
}
