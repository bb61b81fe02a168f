package terraform

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/lab/kit/golden"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

var update = flag.Bool("update", false, "rewrite the README's reference section from the .tf files (make tf-docs)")

// referenceDirs are the directories the README's reference documents, in
// its order.
var referenceDirs = []string{
	"modules/queues", "modules/buckets", "modules/notifications", "modules/kms",
	"modules/worker-policy", "modules/iam", "modules/pod-role", "modules/fleet", "modules/alarms", "modules/gpu-node-group-tags", "examples/complete",
}

const referenceHeading = "## Reference\n"

var spaces = regexp.MustCompile(`\s+`)

// source is an expression's text on one line.
func source(m *module, e hclsyntax.Expression) string {
	r := e.Range()
	return strings.TrimSpace(spaces.ReplaceAllString(string(r.SliceBytes(m.src[r.Filename])), " "))
}

// typeName shortens object types to their kind: the fields are the
// description's to explain.
func typeName(s string) string {
	for _, kind := range []string{"object", "list", "map", "set"} {
		inner := strings.TrimPrefix(s, kind+"(")
		if inner == s {
			continue
		}
		if strings.HasPrefix(inner, "object(") {
			return kind + "(object)"
		}
		if kind == "object" {
			return "object"
		}
	}
	return s
}

func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// reference renders the README's reference section from the variables
// and outputs of every documented directory.
func reference(t *testing.T) string {
	var b strings.Builder
	b.WriteString(referenceHeading)
	b.WriteString("\nGenerated from the `.tf` files by `make tf-docs`; `make test` fails when it\nis out of date.\n")
	for _, dir := range referenceDirs {
		fmt.Fprintf(&b, "\n### `%s`\n\n%s", dir, tables(t, load(t, dir)))
	}
	return b.String()
}

// tables are a module's variables and outputs as Markdown tables.
func tables(t *testing.T, m *module) string {
	var b strings.Builder
	b.WriteString("| variable | type | default | description |\n|---|---|---|---|\n")
	for _, v := range m.blocks("variable") {
		def := "required"
		if e := attr(v, "default"); e != nil {
			def = "`" + source(m, e) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", v.Labels[0], cell(typeName(source(m, attr(v, "type")))), cell(def), cell(str(t, attr(v, "description"))))
	}
	b.WriteString("\n| output | description |\n|---|---|\n")
	for _, o := range m.blocks("output") {
		fmt.Fprintf(&b, "| `%s` | %s |\n", o.Labels[0], cell(str(t, attr(o, "description"))))
	}
	return b.String()
}

// purpose is the comment that opens a module's main.tf, as one paragraph.
func purpose(t *testing.T, dir string) string {
	src, err := os.ReadFile(dir + "/main.tf")
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		words = append(words, strings.TrimSpace(strings.TrimPrefix(line, "#")))
	}
	if len(words) == 0 {
		t.Fatalf("%s/main.tf opens with no comment saying what the module is for", dir)
	}
	return strings.Join(words, " ")
}

// Each module's README: what it is for (the comment that opens its
// main.tf), where the whole is explained, and its variables and outputs,
// generated like the reference section (make tf-docs).
func TestModuleReadmesAreCurrent(t *testing.T) {
	for _, dir := range referenceDirs {
		up := strings.Repeat("../", strings.Count(dir, "/")+1)
		body := fmt.Sprintf("# `%s`\n\n%s\n\nPart of fleetscribe's Terraform: [%sREADME.md](%sREADME.md) says how the modules fit together and what their settings do.\nGenerated from the `.tf` files by `make tf-docs`; `make test` fails when it is out of date.\n\n%s",
			dir, purpose(t, dir), up, up, tables(t, load(t, dir)))
		golden.Check(t, dir+"/README.md", []byte(body), *update, "make tf-docs")
	}
}

// The README's variables and outputs are the modules' own: a variable
// added, renamed or redescribed without the README fails here (make
// tf-docs rewrites the section).
func TestReadmeReferenceIsCurrent(t *testing.T) {
	const path = "README.md"
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(readme), referenceHeading)
	if i < 0 {
		t.Fatalf("%s has no %q section", path, strings.TrimSpace(referenceHeading))
	}
	golden.Check(t, path, append(readme[:i:i], reference(t)...), *update, "make tf-docs")
}
