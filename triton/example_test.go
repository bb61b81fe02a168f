package triton_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/triton"
)

// A pool over two partitions (two Triton servers); chunks go to the one with
// the fewest requests outstanding.
func ExamplePool() {
	a, _ := tritontest.Listen("127.0.0.1:0", triton.DefaultModelIO())
	defer a.Close()
	b, _ := tritontest.Listen("127.0.0.1:0", triton.DefaultModelIO())
	defer b.Close()

	var cfg triton.PoolConfig
	cfg.Addrs = []string{a.Addr, b.Addr}
	cfg.MaxInflight, cfg.Attempts, cfg.EjectAfter = 8, 3, 3
	cfg.RequestTimeout, cfg.HealthInterval = 10e9, 1e9
	pool, err := triton.NewPool(cfg, triton.DefaultModelIO(), prometheus.NewRegistry())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	res, err := pool.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 16000), Timestamps: true})
	fmt.Println(res.Text, len(res.Words), err)
	// Output: samples 16000 2 <nil>
}

// BYTES tensors are 4-byte little-endian length prefixed elements.
func ExampleEncodeBytes() {
	raw := triton.EncodeBytes([]byte("hi"), []byte("there"))
	fmt.Printf("% x\n", raw)
	elems, _ := triton.DecodeBytes(raw)
	fmt.Printf("%q\n", elems)
	// Output:
	// 02 00 00 00 68 69 05 00 00 00 74 68 65 72 65
	// ["hi" "there"]
}
