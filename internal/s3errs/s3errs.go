// Package s3errs classifies S3's error answers.
package s3errs

import (
	"errors"

	"github.com/aws/smithy-go"
)

// NotFound reports an S3 error saying that the object, its version or its
// bucket does not exist.
func NotFound(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NotFound", "NoSuchKey", "NoSuchBucket", "NoSuchVersion", "404":
			return true
		}
	}
	return false
}

// ObjectNotFound reports an S3 error saying that the object or its version
// does not exist in a bucket that does: NotFound less NoSuchBucket. A
// bucket that does not exist is an outage, not an absent object.
func ObjectNotFound(err error) bool {
	if ae, ok := errors.AsType[smithy.APIError](err); ok && ae.ErrorCode() == "NoSuchBucket" {
		return false
	}
	return NotFound(err)
}

// PreconditionFailed reports a conditional request S3 refused (If-Match,
// If-None-Match): 412.
func PreconditionFailed(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "412")
}
