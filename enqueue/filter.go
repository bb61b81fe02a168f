package enqueue

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Filter selects items. Zero values select everything. Keys that end in
// '/' (folder markers) are never selected.
type Filter struct {
	Suffixes []string // any of these endings
	// Include and Exclude are glob patterns (path.Match): a pattern with a
	// '/' is matched against the whole key, one without against the last
	// path segment. An item must match an Include (when any are given) and
	// no Exclude.
	Include, Exclude []string
	MinSize, MaxSize int64     // bytes; MaxSize 0: no bound
	After, Before    time.Time // last-modified window: After <= t < Before
}

// Validate reports malformed patterns and empty windows.
func (f Filter) Validate() error {
	for _, p := range append(append([]string(nil), f.Include...), f.Exclude...) {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("pattern %q: %w", p, err)
		}
	}
	if f.MaxSize > 0 && f.MinSize > f.MaxSize {
		return fmt.Errorf("min size %d is above max size %d", f.MinSize, f.MaxSize)
	}
	if !f.After.IsZero() && !f.Before.IsZero() && !f.After.Before(f.Before) {
		return fmt.Errorf("modified-after %s is not before modified-before %s", f.After.Format(time.RFC3339), f.Before.Format(time.RFC3339))
	}
	return nil
}

// needsMeta reports whether the filter looks at size or modification time.
func (f Filter) needsMeta() bool {
	return f.MinSize > 0 || f.MaxSize > 0 || !f.After.IsZero() || !f.Before.IsZero()
}

// matchKey applies the key-only parts of the filter.
func (f Filter) matchKey(key string) bool {
	if key == "" || strings.HasSuffix(key, "/") {
		return false
	}
	if len(f.Suffixes) > 0 && !hasAnySuffix(key, f.Suffixes) {
		return false
	}
	if len(f.Include) > 0 && !matchAny(f.Include, key) {
		return false
	}
	return !matchAny(f.Exclude, key)
}

// matchMeta applies size and time bounds to an item whose metadata is known.
func (f Filter) matchMeta(it Item) bool {
	if f.MinSize > 0 && it.Size < f.MinSize || f.MaxSize > 0 && it.Size > f.MaxSize {
		return false
	}
	if !f.After.IsZero() && it.LastModified.Before(f.After) {
		return false
	}
	return f.Before.IsZero() || it.LastModified.Before(f.Before)
}

// hasMeta reports whether it carries what matchMeta needs.
func (f Filter) hasMeta(it Item) bool {
	if (f.MinSize > 0 || f.MaxSize > 0) && it.Size < 0 {
		return false
	}
	return f.After.IsZero() && f.Before.IsZero() || !it.LastModified.IsZero()
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

func matchAny(patterns []string, key string) bool {
	base := key[strings.LastIndexByte(key, '/')+1:]
	for _, p := range patterns {
		subject := base
		if strings.Contains(p, "/") {
			subject = key
		}
		if ok, _ := path.Match(p, subject); ok {
			return true
		}
	}
	return false
}

// ParseSize reads a byte count with an optional unit: 512, 10KiB, 5MB, 2GiB.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative number with an optional unit (KiB, MB, ...)", s)
	}
	return n * mult, nil
}

// ParseTime reads an RFC 3339 time or a date (YYYY-MM-DD, midnight UTC).
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2025-01-31T12:00:00Z) or a date (2025-01-31)", s)
	}
	return t, nil
}
