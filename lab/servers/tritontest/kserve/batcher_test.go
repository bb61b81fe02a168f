package kserve

import (
	"reflect"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/modelspec"
)

// The fake batches by the shipped configuration as Triton reads it.
func TestBatchConfigOfTheShippedModel(t *testing.T) {
	got := BatchConfigOf(modelspec.GPU())
	want := BatchConfig{MaxBatchSize: 32, PreferredSizes: []int{8, 16}, MaxQueueDelay: 5 * time.Millisecond, MaxQueueSize: 256,
		PriorityLevels: 2, DefaultPriority: 2, Ragged: true, Instances: 1, DefaultQueueTimeout: 10 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BatchConfigOf(GPU()) = %+v, want %+v", got, want)
	}
	if BatchConfigOf(modelspec.GPUBuckets()).Ragged {
		t.Error("the bucket variant batches ragged")
	}
}
