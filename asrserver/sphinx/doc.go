// Package sphinx is a CPU speech recognizer for asrserver backed by the
// CMU pocketsphinx library, so the whole pipeline runs on a laptop with no
// GPU and no Triton. It needs cgo and Debian's libpocketsphinx-dev and
// pocketsphinx-en-us, and is compiled only with the build tag
// "pocketsphinx"; without it, New returns ErrNotBuilt.
package sphinx

import "errors"

// ErrNotBuilt is returned by New in binaries built without the pocketsphinx tag.
var ErrNotBuilt = errors.New("built without pocketsphinx support: rebuild with -tags pocketsphinx (needs libpocketsphinx-dev)")

// Config locates the acoustic model, language model and dictionary.
type Config struct {
	HMM      string // acoustic model directory
	LM       string // language model (.lm.bin)
	Dict     string // pronunciation dictionary
	Decoders int    // decoders in the pool: requests recognised at once
}

// DefaultConfig points at Debian's pocketsphinx-en-us package.
func DefaultConfig() Config {
	const base = "/usr/share/pocketsphinx/model/en-us"
	return Config{
		HMM:      base + "/en-us",
		LM:       base + "/en-us.lm.bin",
		Dict:     base + "/cmudict-en-us.dict",
		Decoders: 2,
	}
}
