package localaws

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// TestRedriveToDLQ checks the emulator honours what the worker relies on:
// a message received maxReceives times without delete moves to the DLQ.
func TestRedriveToDLQ(t *testing.T) {
	ctx := context.Background()
	srv, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	sqsc, s3c := srv.Clients()
	q, err := CreateQueue(ctx, sqsc, "redrive", 2, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := CreateBucket(ctx, s3c, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String("m")}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 1})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receive %d: %v %d", i, err, len(out.Messages))
		}
		if _, err := sqsc.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(q.URL), ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 0,
		}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("third receive should find the message redriven: %v %d", err, len(out.Messages))
	}
	v, _, err := Depth(ctx, sqsc, q.DLQURL)
	if err != nil || v != 1 {
		t.Fatalf("dlq depth = %d, %v; want 1", v, err)
	}
}
