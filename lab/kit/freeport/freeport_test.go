package freeport_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/lab/kit/freeport"
)

// A port one process holds is never handed to another, though nothing
// listens on it; ports come from below the ephemeral range.
func TestReservedAcrossProcesses(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") == "1" {
		// The child: reserve many and print them.
		var out []string
		for range 200 {
			p, err := freeport.Get()
			if err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			out = append(out, strconv.Itoa(p))
		}
		fmt.Println(strings.Join(out, " "))
		return
	}
	mine := map[int]bool{}
	for range 200 {
		p, err := freeport.Get()
		if err != nil {
			t.Fatal(err)
		}
		if mine[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		mine[p] = true
		if p < 15000 {
			t.Errorf("port %d below the floor", p)
		}
	}
	base, err := freeport.Range(50)
	if err != nil {
		t.Fatal(err)
	}
	for p := base; p < base+50; p++ {
		if mine[p] {
			t.Fatalf("range port %d handed out before", p)
		}
		mine[p] = true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestReservedAcrossProcesses$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v: %s", err, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	n := 0
	for f := range strings.FieldsSeq(lines[0]) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("child said %q", lines[0])
		}
		n++
		if mine[p] {
			t.Errorf("port %d, held here, handed to another process", p)
		}
	}
	if n != 200 {
		t.Errorf("the child reserved %d ports, want 200", n)
	}
}
