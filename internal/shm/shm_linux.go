package shm

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
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
	// The descriptor stays open with the object's flock while the mapping
	// lives: the kernel lets go of it when this process ends, however it
	// ends, and that is how Sweep tells an object left by a killed process
	// from a live one (across containers sharing /dev/shm too).
	fail := func(err error) (*Mapping, error) {
		_ = os.Remove(p)
		_ = f.Close()
		return nil, err
	}
	if err := flock(f, syscall.LOCK_EX); err != nil {
		return fail(fmt.Errorf("lock shared memory %s: %w", key, err))
	}
	if err := f.Truncate(int64(size)); err != nil {
		return fail(fmt.Errorf("size shared memory %s: %w", key, err))
	}
	if err := reserve(f, size); err != nil {
		return fail(fmt.Errorf("reserve %d MiB of shared memory for %s: %w", size>>20, key, err))
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("map shared memory %s: %w", key, err))
	}
	return &Mapping{Key: key, Data: data, path: p, own: true, lock: f}, nil
}

func flock(f *os.File, how int) error {
	err := syscall.Flock(int(f.Fd()), how)
	for err == syscall.EINTR {
		err = syscall.Flock(int(f.Fd()), how)
	}
	return err
}

// Sweep removes the objects of Dir whose names begin with prefix, older
// than minAge, that no live process created: one whose creator (Create)
// still runs holds its flock; one left by a process that was killed holds
// none. A server that mapped a removed object keeps its pages until it
// unmaps it. It returns the names removed. minAge spares an object being
// created this moment, before its creator has locked it.
func Sweep(prefix string, minAge time.Duration) ([]string, error) {
	entries, err := os.ReadDir(Dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < minAge {
			continue
		}
		p := Dir + "/" + name
		f, err := os.Open(p)
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		if flock(f, syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			// No live creator: removed while locked, so that a creator
			// cannot take it meanwhile (names are never reused).
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			} else {
				removed = append(removed, name)
			}
		}
		_ = f.Close()
	}
	return removed, errors.Join(errs...)
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
	if m.lock != nil {
		_ = m.lock.Close()
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
