// Package terraform holds no Go code of its own: its tests check the
// Terraform modules beside them (formatting, and the invariants in
// terraform/README.md) on machines where terraform cannot run.
package terraform
