// Package flagext has flag.Value types for list-valued flags.
package flagext

import (
	"fmt"
	"strconv"
	"strings"
)

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

// Uint64SliceCSV is a comma-separated list of unsigned integers. Blank
// items are dropped.
type Uint64SliceCSV []uint64

// String implements flag.Value.
func (s Uint64SliceCSV) String() string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value: the whole list is replaced.
func (s *Uint64SliceCSV) Set(v string) error {
	var l StringSliceCSV
	_ = l.Set(v)
	out := make([]uint64, 0, len(l))
	for _, p := range l {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an unsigned integer", p)
		}
		out = append(out, n)
	}
	*s = out
	return nil
}
