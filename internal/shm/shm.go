// Package shm maps POSIX shared memory objects, the files of /dev/shm that
// shm_open names, for Triton's system shared memory protocol: the worker
// creates an object and writes audio into it, the server (Triton, or the
// in-process fake, lab/servers/tritontest/kserve) maps the same object and reads the audio there instead
// of from the request.
package shm

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Dir is where Linux keeps POSIX shared memory objects.
const Dir = "/dev/shm"

// ErrUnsupported: this system has no POSIX shared memory that the package
// can map.
var ErrUnsupported = errors.New("shared memory is not supported on this system")

// Mapping is a mapped shared memory object.
type Mapping struct {
	Key  string // the object's name, as shm_open takes it ("/name")
	Data []byte // the mapped bytes
	path string
	own  bool     // created here: unlinked on Close
	lock *os.File // created here: holds the object's flock while it lives
}

// path returns the file of the object named key ("/name" or "name").
func path(key string) (string, error) {
	name := strings.TrimPrefix(key, "/")
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return "", fmt.Errorf("shared memory key %q: want one name", key)
	}
	return Dir + "/" + name, nil
}

// Gone reports whether the object named key is known to be absent from
// Dir (a key that names no object of Dir is not).
func Gone(key string) bool {
	p, err := path(key)
	if err != nil {
		return false
	}
	_, err = os.Stat(p)
	return os.IsNotExist(err)
}
