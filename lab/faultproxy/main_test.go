package faultproxy

import (
	"testing"

	"github.com/fleetscribe/fleetscribe/lab/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
