package shm

import (
	"fmt"
	"os"
	"syscall"
)

// Create makes a new object of size bytes, readable and writable by this
// user only (it holds audio), and maps it. It fails if the key exists, and
// if the object's memory cannot be reserved now: a truncated object is
// sparse, so one bigger than what /dev/shm (a tmpfs) has left would be
// created and mapped, and the first write past the room left would be a
// SIGBUS, which kills a Go program. The reserved pages are charged to the
// process's memory cgroup from here on.
func Create(key string, size int) (*Mapping, error) {
	p, err := path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create shared memory: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	if err := f.Truncate(int64(size)); err != nil {
		_ = os.Remove(p)
		return nil, fmt.Errorf("size shared memory %s: %w", key, err)
	}
	if err := reserve(f, size); err != nil {
		_ = os.Remove(p)
		return nil, fmt.Errorf("reserve %d MiB of shared memory for %s: %w", size>>20, key, err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		_ = os.Remove(p)
		return nil, fmt.Errorf("map shared memory %s: %w", key, err)
	}
	return &Mapping{Key: key, Data: data, path: p, own: true}, nil
}

// Open maps size bytes from offset of an existing object, read-only. The
// object must hold them all (reading past its end would fault).
func Open(key string, offset, size int64) (*Mapping, error) {
	p, err := path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open shared memory: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case offset < 0 || size <= 0:
		return nil, fmt.Errorf("shared memory %s: offset %d and size %d", key, offset, size)
	case offset%int64(os.Getpagesize()) != 0:
		return nil, fmt.Errorf("shared memory %s: offset %d is not a multiple of the page size", key, offset)
	case offset+size > st.Size():
		return nil, fmt.Errorf("shared memory %s: %d bytes from %d run past its %d bytes", key, size, offset, st.Size())
	}
	data, err := syscall.Mmap(int(f.Fd()), offset, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map shared memory %s: %w", key, err)
	}
	return &Mapping{Key: key, Data: data, path: p}, nil
}

// Close unmaps the object, and removes it when it was created here (a
// server that mapped it keeps its mapping until it unmaps it). Data must
// not be used afterwards.
func (m *Mapping) Close() error {
	err := syscall.Munmap(m.Data)
	m.Data = nil
	if m.own {
		if rerr := os.Remove(m.path); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// reserve allocates the file's size bytes (fallocate), saying how much the
// file system has left when it has too little.
func reserve(f *os.File, size int) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(size))
	for err == syscall.EINTR {
		err = syscall.Fallocate(int(f.Fd()), 0, 0, int64(size))
	}
	if err == syscall.ENOSPC {
		var st syscall.Statfs_t
		if syscall.Fstatfs(int(f.Fd()), &st) == nil {
			return fmt.Errorf("%s has %d MiB of %d MiB free: %w", Dir, int64(st.Bavail)*st.Bsize>>20, int64(st.Blocks)*st.Bsize>>20, err)
		}
	}
	return err
}
