// Command tffmt formats Terraform files in place with hclwrite.Format, the
// formatter behind `terraform fmt`, for machines without terraform
// (make tf-fmt). terraform/format_test.go fails on any file it would change.
package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2/hclwrite"
)

func main() {
	root := "terraform"
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".tf") || strings.HasSuffix(p, ".hcl")) {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if out := hclwrite.Format(src); !bytes.Equal(out, src) {
			fmt.Println("formatted", p)
			return os.WriteFile(p, out, 0o644)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "tffmt:", err)
		os.Exit(1)
	}
}
