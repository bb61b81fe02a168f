//go:build !linux

package shm

// Create is not supported here.
func Create(key string, size int) (*Mapping, error) { return nil, ErrUnsupported }

// Open is not supported here.
func Open(key string, offset, size int64) (*Mapping, error) { return nil, ErrUnsupported }

// Close does nothing.
func (m *Mapping) Close() error { return nil }
