package main

import (
	"testing"

	"github.com/fleetscribe/fleetscribe/lab/kit/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
