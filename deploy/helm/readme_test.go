package helm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/fleetscribe/fleetscribe/lab/kit/golden"
)

// valueRow is one value of values.yaml for the chart's README: its path,
// its default as values.yaml writes it, and the comment above it (or
// above the nearest enclosing key that has one).
type valueRow struct{ path, def, doc string }

// valueRows walks values.yaml's mapping nodes down to the leaves, and to
// the open values (openValues), which are listed whole.
func valueRows(n *yaml.Node, prefix, inherited string, out *[]valueRow) {
	group, groupEnd := "", -1 // a comment over the keys that follow it with no blank line
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		doc := commentText(k.HeadComment)
		switch {
		case doc != "":
			group = doc
		case k.Line == groupEnd+1 && group != "":
			doc = group
		case prefix != "" && i == 0:
			doc, group = inherited, inherited
		default:
			group = ""
		}
		groupEnd = lastLine(v)
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 && !slices.Contains(openValues, path) {
			valueRows(v, path, doc, out)
			continue
		}
		def := v.Value
		if v.Kind != yaml.ScalarNode {
			b, err := yaml.Marshal(v)
			if err != nil {
				panic(err)
			}
			def = strings.Join(strings.Fields(strings.TrimSpace(string(b))), " ")
			if len(def) > 60 {
				def = "(see values.yaml)"
			}
		}
		*out = append(*out, valueRow{path, def, doc})
	}
}

// lastLine is the last line a node's value takes.
func lastLine(n *yaml.Node) int {
	l := n.Line
	for _, c := range n.Content {
		l = max(l, lastLine(c))
	}
	return l
}

// commentText is a head comment as one line of prose.
func commentText(c string) string {
	var words []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line == "" || strings.HasPrefix(line, "END ") {
			continue
		}
		line = strings.TrimPrefix(line, "BEGIN ") // the generated plan
		words = append(words, line)
	}
	return strings.Join(words, " ")
}

// The chart's README holds a table of every value, generated from
// values.yaml and its comments, and checked current.
func TestChartReadmeIsCurrent(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var rows []valueRow
	valueRows(doc.Content[0], "", "", &rows)
	var sb strings.Builder
	sb.WriteString("# fleetscribe Helm chart\n\n")
	sb.WriteString("One pod per GPU node: the worker and the Triton partitions of the plan as native sidecars, KEDA on the backlog per GPU, a PDB, a ServiceMonitor, alert rules and the dashboard. How to install it, what it needs on the cluster and what the tests check: docs/kubernetes.md.\n\n")
	sb.WriteString("## Values\n\n")
	sb.WriteString("Generated from values.yaml and its comments (deploy/helm's TestChartReadmeIsCurrent; make docs). values.schema.json refuses any other key of the chart's own objects.\n\n")
	sb.WriteString("| value | default | what it is |\n|---|---|---|\n")
	prev := ""
	for _, r := range rows {
		doc := strings.ReplaceAll(r.doc, "|", `\|`)
		if r.doc != "" && r.doc == prev {
			doc = "as above" // one comment over a group of values
		}
		prev = r.doc
		fmt.Fprintf(&sb, "| `%s` | %s | %s |\n", r.path, cell(r.def), doc)
	}
	golden.Check(t, filepath.Join(chart, "README.md"), []byte(sb.String()), *update, "make docs")
}

// cell is a default as a table cell.
func cell(v string) string {
	if v == "" {
		return `""`
	}
	return "`" + strings.ReplaceAll(v, "|", `\|`) + "`"
}
