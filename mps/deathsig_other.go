//go:build !linux

package mps

import "syscall"

// dieWithParent: no parent-death signal here; a killed supervisor's
// partitions outlive it.
func dieWithParent(*syscall.SysProcAttr) {}
