package worker

import (
	"errors"
	"fmt"
)

// PermanentError is a failure that retrying cannot fix: the worker writes
// an error record and deletes the message.
type PermanentError struct {
	Class string
	Err   error
}

func (e *PermanentError) Error() string { return e.Class + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent with a class.
func Permanent(class string, err error) error {
	return &PermanentError{Class: class, Err: err}
}

// Permanentf is Permanent with a formatted cause.
func Permanentf(class, format string, args ...any) error {
	return &PermanentError{Class: class, Err: fmt.Errorf(format, args...)}
}

// ErrorClass returns the class of a permanent error, or "" for a retryable one.
func ErrorClass(err error) string {
	if pe, ok := errors.AsType[*PermanentError](err); ok {
		return pe.Class
	}
	return ""
}
