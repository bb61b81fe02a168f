package kserve_test

import (
	"testing"

	"github.com/fleetscribe/fleetscribe/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
