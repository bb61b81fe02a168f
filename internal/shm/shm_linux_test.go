package shm_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/fleetscribe/fleetscribe/internal/shm"
	"github.com/fleetscribe/fleetscribe/lab/shmtest"
)

// On a /dev/shm too small for an object, Create fails, saying how much is
// left, instead of handing out a mapping whose writes past the room left
// would be a SIGBUS (which kills the process: the parent sees the child
// die). What fitted stays usable.
func TestCreateOnASmallDevShm(t *testing.T) {
	if !shmtest.Small(t, 8) {
		return
	}
	key := fmt.Sprintf("/shmtest-%d-", os.Getpid())
	a, err := shm.Create(key+"a", 5<<20)
	if err != nil {
		t.Fatalf("5 MiB of 8: %v", err)
	}
	defer a.Close()
	fill(a.Data)
	b, err := shm.Create(key+"b", 5<<20)
	if err == nil {
		fill(b.Data) // where the object is sparse, this is the SIGBUS
		_ = b.Close()
		t.Fatal("a second 5 MiB on an 8 MiB /dev/shm: created, want an error")
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "MiB free") {
		t.Errorf("error %q: want no space left, with what is free", err)
	}
	if _, serr := os.Stat(shm.Dir + "/" + strings.TrimPrefix(key, "/") + "b"); !os.IsNotExist(serr) {
		t.Errorf("the object that did not fit is left in %s (%v)", shm.Dir, serr)
	}
	fill(a.Data)
}

func fill(b []byte) {
	for i := range b {
		b[i] = byte(i)
	}
}
