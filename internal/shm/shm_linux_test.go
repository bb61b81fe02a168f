package shm_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/internal/shm"
	"github.com/fleetscribe/fleetscribe/lab/kit/shmtest"
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

// A process that created an object and was killed (SIGKILL: no Close, no
// unlink) leaves it in /dev/shm, holding memory until the host reboots
// where /dev/shm is the host's; Sweep removes it, and never an object
// whose creator still runs, nor one younger than minAge.
func TestSweepRemovesWhatKilledProcessesLeft(t *testing.T) {
	if key := os.Getenv("SHM_SWEEP_CHILD"); key != "" {
		if _, err := shm.Create(key, 1<<16); err != nil {
			fmt.Println("create:", err)
			os.Exit(1)
		}
		fmt.Println("created")
		select {} // until killed
	}
	prefix := fmt.Sprintf("shmsweep-%d-", os.Getpid())
	t.Cleanup(func() {
		left, _ := filepath.Glob(shm.Dir + "/" + prefix + "*")
		for _, f := range left {
			_ = os.Remove(f)
		}
	})
	old := time.Now().Add(-time.Hour)
	age := func(name string) {
		t.Helper()
		if err := os.Chtimes(shm.Dir+"/"+name, old, old); err != nil {
			t.Fatal(err)
		}
	}
	// Killed: a child creates an object and is killed.
	shmtest.Killed(t, "SHM_SWEEP_CHILD=/"+prefix+"killed", "created")
	age(prefix + "killed")
	// Live: created here, and still mapped.
	live, err := shm.Create("/"+prefix+"live", 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	age(prefix + "live")
	// Young: no creator holds it, but it was made a moment ago.
	if err := os.WriteFile(shm.Dir+"/"+prefix+"young", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := shm.Sweep(prefix, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{prefix + "killed"}; !slices.Equal(removed, want) {
		t.Errorf("swept %v, want %v", removed, want)
	}
	for name, kept := range map[string]bool{"killed": false, "live": true, "young": true} {
		if _, err := os.Stat(shm.Dir + "/" + prefix + name); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", name, err == nil, kept)
		}
	}
	fill(live.Data) // still usable
}
