package tritonproc_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/internal/tritonproc"
	"github.com/fleetscribe/fleetscribe/triton"
)

func TestSmoke(t *testing.T) {
	s := tritonproc.StartT(t, map[string]tritonproc.ModelConfig{"asr": {}})
	c, err := triton.Dial(s.Addr, triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Infer(ctx, triton.Request{Samples: make([]float32, 1600), Timestamps: true})
	t.Logf("%+v %v", res, err)
}
