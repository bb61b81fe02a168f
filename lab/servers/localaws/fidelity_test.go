package localaws

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// StartMotoT starts moto for a test, skipping it where moto is not
// installed (or failing it under FLEETSCRIBE_REQUIRE_MOTO=1), and stops it
// at the test's end.
func StartMotoT(t testing.TB) *Server {
	t.Helper()
	if _, err := MotoBin(); err != nil {
		if os.Getenv(RequireMotoEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := StartMoto(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// behaviour is one thing a server does as S3 or SQS documents it, or not.
type behaviour struct {
	name, service, documented string
	check                     func(ctx context.Context, s *Server) error
}

var behaviours = []behaviour{
	{
		name:       "PutObject If-None-Match: * on an existing key",
		service:    "s3",
		documented: "412 PreconditionFailed, object kept",
		check: func(ctx context.Context, s *Server) error {
			_, s3c := s.Clients()
			if err := CreateBucket(ctx, s3c, "fidelity-cond"); err != nil {
				return err
			}
			put := func(body string) error {
				_, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("fidelity-cond"), Key: aws.String("k"),
					Body: strings.NewReader(body), IfNoneMatch: aws.String("*")})
				return err
			}
			if err := put("first"); err != nil {
				return fmt.Errorf("first write: %w", err)
			}
			err := put("second")
			var ae smithy.APIError
			if err == nil {
				return errors.New("second write succeeded")
			}
			if !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
				return fmt.Errorf("second write: %v, want PreconditionFailed", err)
			}
			return nil
		},
	},
	{
		name:       "ListObjectsV2 order",
		service:    "s3",
		documented: "UTF-8 byte order",
		check: func(ctx context.Context, s *Server) error {
			_, s3c := s.Clients()
			if err := CreateBucket(ctx, s3c, "fidelity-order"); err != nil {
				return err
			}
			keys := []string{"a/x", "B/x", "_/x", "é/x", "a-/x", "a/y", "Z", "~"}
			for _, k := range keys {
				if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("fidelity-order"), Key: aws.String(k), Body: strings.NewReader("x")}); err != nil {
					return err
				}
			}
			var got []string
			var token *string
			for { // two pages: continuation tokens keep the order too
				out, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("fidelity-order"), MaxKeys: aws.Int32(3), ContinuationToken: token})
				if err != nil {
					return err
				}
				for _, o := range out.Contents {
					got = append(got, aws.ToString(o.Key))
				}
				if !aws.ToBool(out.IsTruncated) {
					break
				}
				token = out.NextContinuationToken
			}
			want := slices.Clone(keys)
			slices.Sort(want) // Go compares strings bytewise
			if !slices.Equal(got, want) {
				return fmt.Errorf("listed %q, want %q", got, want)
			}
			return nil
		},
	},
	{
		name:       "StartMessageMoveTask from a DLQ to its source",
		service:    "sqs",
		documented: "moves every message back; ListMessageMoveTasks reports it",
		check: func(ctx context.Context, s *Server) error {
			sqsc, _ := s.Clients()
			q, err := CreateQueue(ctx, sqsc, "fidelity-move", 1, 30*time.Second)
			if err != nil {
				return err
			}
			for i := range 3 {
				if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL), MessageBody: aws.String(fmt.Sprint("m", i))}); err != nil {
					return err
				}
			}
			arn := func(url string) (string, error) {
				a, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
				if err != nil {
					return "", err
				}
				return a.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], nil
			}
			src, err := arn(q.DLQURL)
			if err != nil {
				return err
			}
			dst, err := arn(q.URL)
			if err != nil {
				return err
			}
			if _, err := sqsc.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(src), DestinationArn: aws.String(dst)}); err != nil {
				return fmt.Errorf("start: %w", err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				v, _, err := Depth(ctx, sqsc, q.URL)
				if err != nil {
					return err
				}
				if v == 3 {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%d of 3 messages moved", v)
				}
				time.Sleep(50 * time.Millisecond)
			}
			tasks, err := sqsc.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(src)})
			if err != nil {
				return fmt.Errorf("list tasks: %w", err)
			}
			if len(tasks.Results) == 0 {
				return errors.New("no move task listed")
			}
			return nil
		},
	},
}

// StartElasticMQT starts ElasticMQ for a test, skipping it where it is not
// installed (or failing it under FLEETSCRIBE_REQUIRE_MOTO=1, which covers
// every second server), and stops it at the test's end.
func StartElasticMQT(t testing.TB) *Server {
	t.Helper()
	if _, err := ElasticMQLib(); err != nil {
		if os.Getenv(RequireMotoEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := StartElasticMQ(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestFidelity measures the local servers on the three behaviours the
// claim, resume and redrive paths rest on, and prints the table. The server
// each of those tests runs against must do its behaviour as S3 or SQS
// documents it; every other result is stated too, so that a release that
// closes or opens a gap is noticed (update the docs and where the tests run).
func TestFidelity(t *testing.T) {
	ctx := context.Background()
	faux, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer faux.Stop()
	servers := []*Server{faux, StartMotoT(t), StartElasticMQT(t)}
	services := map[string][]string{"fauxqs": {"s3", "sqs"}, "moto": {"s3", "sqs"}, "elasticmq": {"sqs"}}
	// What each server was measured to do (true: as documented).
	want := map[string]map[string]bool{
		"fauxqs":    {behaviours[0].name: false, behaviours[1].name: false, behaviours[2].name: false},
		"moto":      {behaviours[0].name: true, behaviours[1].name: true, behaviours[2].name: false},
		"elasticmq": {behaviours[2].name: true},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-48s %-9s %-9s %-9s %s\n", "behaviour", "fauxqs", "moto", "elasticmq", "S3 / SQS documents")
	for _, b := range behaviours {
		cells := map[string]string{}
		for _, s := range servers {
			if !slices.Contains(services[s.Name], b.service) {
				cells[s.Name] = "-"
				continue
			}
			err := b.check(ctx, s)
			cells[s.Name] = map[bool]string{true: "as " + strings.ToUpper(b.service), false: "differs"}[err == nil]
			if err != nil {
				t.Logf("%s, %s: %v", s.Name, b.name, err)
			}
			if (err == nil) != want[s.Name][b.name] {
				t.Errorf("%s, %s: %v; measured before: as documented = %v", s.Name, b.name, err, want[s.Name][b.name])
			}
		}
		fmt.Fprintf(&table, "%-48s %-9s %-9s %-9s %s\n", b.name, cells["fauxqs"], cells["moto"], cells["elasticmq"], b.documented)
	}
	t.Log("\n" + table.String())
}
