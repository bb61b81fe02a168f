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
