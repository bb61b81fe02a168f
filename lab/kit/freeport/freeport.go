// Package freeport hands out loopback ports for the servers the tests and
// the lab start (Triton, the local AWS servers, kube-apiserver), held for
// them across processes.
//
// A port found free by listening on it and closing it is not held: go test
// runs packages in parallel, and another package's server could bind it
// before this one's does (seen as a Triton partition that "exited before it
// was ready", and a moto server that never answered). So ports come from
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where
// no listener on port 0 and no outgoing connection lands, and each is
// reserved by an exclusive lock on a file of its own in a folder every
// process shares. A reservation lasts as long as the process that made it
// (the kernel drops the lock when it exits, however it exits).
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// floor is the lowest port handed out: above the well-known and the
// commonly configured ports.
const floor = 15000

var held struct {
	mu    sync.Mutex
	files []*os.File // kept open: their locks are the reservations
}

// Dir is the folder of the lock files.
func Dir() string { return filepath.Join(os.TempDir(), "fleetscribe-ports") }

// ephemeralLow is the first port the kernel gives to port-0 listeners and
// outgoing connections.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > floor {
				return n
			}
		}
	}
	return 32768 // Linux's default
}

// Get reserves one free port.
func Get() (int, error) { return Range(1) }

// Range reserves n consecutive free ports and returns the first.
func Range(n int) (int, error) {
	if n < 1 {
		return 0, errors.New("freeport: at least one port")
	}
	if err := os.MkdirAll(Dir(), 0o777); err != nil {
		return 0, err
	}
	span := ephemeralLow() - floor - n
	if span <= 0 {
		return 0, fmt.Errorf("freeport: no room for %d ports below the ephemeral range", n)
	}
	for range 500 {
		base := floor + rand.IntN(span)
		var got []*os.File
		for p := base; p < base+n; p++ {
			f := take(p)
			if f == nil {
				break
			}
			got = append(got, f)
		}
		if len(got) == n {
			held.mu.Lock()
			held.files = append(held.files, got...)
			held.mu.Unlock()
			return base, nil
		}
		for _, f := range got {
			_ = f.Close() // releases its lock
		}
	}
	return 0, fmt.Errorf("freeport: no %d consecutive free ports below %d", n, ephemeralLow())
}

// take locks port's file and checks the port is free now; nil: taken.
func take(port int) *os.File {
	f, err := os.OpenFile(filepath.Join(Dir(), strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil
	}
	// Something that does not ask here (another program) may hold it.
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		_ = f.Close()
		return nil
	}
	_ = l.Close()
	return f
}
