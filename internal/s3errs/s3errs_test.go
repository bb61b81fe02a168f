package s3errs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/aws/smithy-go"
)

func TestNotFoundAndObjectNotFound(t *testing.T) {
	for _, c := range []struct {
		code             string
		notFound, object bool
	}{
		{"NoSuchKey", true, true},
		{"NotFound", true, true}, // a HEAD's 404
		{"NoSuchVersion", true, true},
		{"404", true, true},
		{"NoSuchBucket", true, false},
		{"AccessDenied", false, false},
		{"PreconditionFailed", false, false},
	} {
		// As the worker's adapters see them: wrapped.
		err := fmt.Errorf("get: %w", &smithy.GenericAPIError{Code: c.code})
		if got := NotFound(err); got != c.notFound {
			t.Errorf("NotFound(%s) = %v, want %v", c.code, got, c.notFound)
		}
		if got := ObjectNotFound(err); got != c.object {
			t.Errorf("ObjectNotFound(%s) = %v, want %v", c.code, got, c.object)
		}
	}
	if NotFound(errors.New("NoSuchKey")) || ObjectNotFound(nil) {
		t.Error("an error that is not S3's answer counted as not found")
	}
}
