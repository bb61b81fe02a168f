package worker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every error class the contract publishes is one the worker (or enqueue's
// redrive) writes: redrive and alerting select on them, so a class nothing
// writes is a promise nobody keeps.
func TestEveryPublishedErrorClassIsWritten(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../contract/classes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok {
			for _, name := range v.Names {
				if strings.HasPrefix(name.Name, "Class") {
					classes = append(classes, name.Name)
				}
			}
		}
		return true
	})
	if len(classes) < 5 {
		t.Fatalf("found %d classes in contract/classes.go", len(classes))
	}
	var src strings.Builder
	for _, dir := range []string{".", "../enqueue"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	for _, c := range classes {
		if !strings.Contains(src.String(), "contract."+c) {
			t.Errorf("contract.%s is published but nothing writes it", c)
		}
	}
}
