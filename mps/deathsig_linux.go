package mps

import "syscall"

// dieWithParent has the child killed when the process that started it
// exits (Linux's parent-death signal).
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
