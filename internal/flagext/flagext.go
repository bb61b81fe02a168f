// Package flagext has flag.Value types for list-valued flags.
package flagext

import "strings"

// StringSliceCSV is a comma-separated list flag. Blank items are dropped.
type StringSliceCSV []string

// String implements flag.Value.
func (s StringSliceCSV) String() string { return strings.Join(s, ",") }

// Set implements flag.Value: the whole list is replaced.
func (s *StringSliceCSV) Set(v string) error {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	*s = out
	return nil
}
