package flagext

import (
	"flag"
	"slices"
	"testing"
)

func TestStringSliceCSV(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	v := StringSliceCSV{"default"}
	fs.Var(&v, "list", "")
	if err := fs.Parse([]string{"-list", " a, ,b/c ,"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v, []string{"a", "b/c"}) || v.String() != "a,b/c" {
		t.Errorf("got %q", v)
	}
}

func TestUint64SliceCSV(t *testing.T) {
	var s Uint64SliceCSV
	if err := s.Set(" 1, 2 ,,30"); err != nil || s.String() != "1,2,30" {
		t.Fatalf("%v %v", s, err)
	}
	if err := s.Set("1,-2"); err == nil {
		t.Fatal("a negative priority accepted")
	}
	if err := s.Set(""); err != nil || len(s) != 0 {
		t.Fatalf("empty: %v %v", s, err)
	}
}
