package worker

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// deadlineS3 records whether each DeleteObject had a deadline.
type deadlineS3 struct {
	S3API // the other calls are not made here
	had   []bool
}

func (s *deadlineS3) DeleteObject(ctx context.Context, _ *s3.DeleteObjectInput, _ ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	_, ok := ctx.Deadline()
	s.had = append(s.had, ok)
	return &s3.DeleteObjectOutput{}, nil
}

// A delete keeps its caller's deadline: the claim's release gives its
// delete 10 s, and the output adapter once dropped that (it detached every
// delete from its context, deadline included).
func TestRemoveKeepsTheCallersDeadline(t *testing.T) {
	api := &deadlineS3{}
	o := outputs{s3: api, bucket: "out"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := o.remove(ctx, "k.claim"); err != nil {
		t.Fatal(err)
	}
	if len(api.had) != 1 || !api.had[0] {
		t.Fatalf("delete deadlines %v, want the caller's", api.had)
	}
}
