// Package audio turns uploaded recordings into what the speech model takes:
// 16 kHz mono float32 samples, split at quiet points into chunks no longer
// than the model should see at once.
//
// Decoding errors are *FormatError values that wrap ErrCorrupt (the bytes
// are not a valid file) or ErrUnsupported (valid, but an encoding this
// package does not read), so callers can tell a bad upload from a bug.
// The package knows nothing of queues or object stores.
package audio
