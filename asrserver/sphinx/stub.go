//go:build !pocketsphinx

package sphinx

import (
	"context"

	"github.com/fleetscribe/fleetscribe/triton"
)

// Recognizer is unavailable in this build.
type Recognizer struct{}

// New returns ErrNotBuilt.
func New(Config) (*Recognizer, error) { return nil, ErrNotBuilt }

// Recognize returns ErrNotBuilt.
func (*Recognizer) Recognize(context.Context, []float32, bool) (triton.Result, error) {
	return triton.Result{}, ErrNotBuilt
}

// Close does nothing.
func (*Recognizer) Close() {}
