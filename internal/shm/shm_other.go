//go:build !linux

package shm

import "time"

// Create is not supported here.
func Create(key string, size int) (*Mapping, error) { return nil, ErrUnsupported }

// Open is not supported here.
func Open(key string, offset, size int64) (*Mapping, error) { return nil, ErrUnsupported }

// Sweep finds nothing here.
func Sweep(prefix string, minAge time.Duration) ([]string, error) { return nil, nil }

// Close does nothing.
func (m *Mapping) Close() error { return nil }
