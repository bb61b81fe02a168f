//go:build pocketsphinx

package sphinx

/*
#cgo pkg-config: pocketsphinx
#include <stdlib.h>
#include <pocketsphinx.h>
#include <feat.h>
#include <cmn.h>

// cmd_ln_init is variadic, which cgo cannot call.
static ps_decoder_t *fs_decoder_new(const char *hmm, const char *lm, const char *dict) {
	cmd_ln_t *cfg = cmd_ln_init(NULL, ps_args(), TRUE,
		"-hmm", hmm, "-lm", lm, "-dict", dict, "-logfn", "/dev/null",
		"-remove_silence", "no", NULL);
	if (cfg == NULL) return NULL;
	ps_decoder_t *ps = ps_init(cfg);
	cmd_ln_free_r(cfg);
	return ps;
}

static double fs_seg_conf(ps_decoder_t *ps, ps_seg_t *seg) {
	return logmath_exp(ps_get_logmath(ps), ps_seg_prob(seg, NULL, NULL, NULL));
}

// The live cepstral mean carries over from one utterance to the next;
// these save and restore it so every request starts from the same state.
static mfcc_t *fs_cmn_save(ps_decoder_t *ps) {
	cmn_t *c = ps_get_feat(ps)->cmn_struct;
	if (c == NULL) return NULL;
	mfcc_t *v = malloc(sizeof(mfcc_t) * c->veclen);
	if (v != NULL) cmn_live_get(c, v);
	return v;
}

static void fs_cmn_restore(ps_decoder_t *ps, mfcc_t const *v) {
	cmn_t *c = ps_get_feat(ps)->cmn_struct;
	if (c != NULL && v != NULL) cmn_live_set(c, v);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/fleetscribe/fleetscribe/triton"
)

// frameRate is pocketsphinx's default frames per second (-frate).
const frameRate = 100.0

// blockSamples is how much audio each ps_process_raw call gets.
const blockSamples = 2048

// Recognizer is a pool of pocketsphinx decoders. It is safe for concurrent use.
type Recognizer struct {
	free chan *decoder
	all  []*decoder
}

// decoder is one pocketsphinx decoder. A decoder keeps state between
// utterances (stream-wide frame numbers, the live cepstral mean, noise
// estimates); every request resets it to the state it had when created, so
// a request's words and times never depend on the requests before it.
type decoder struct {
	ps      *C.ps_decoder_t
	cmnInit *C.mfcc_t // live CMN mean at creation
}

// reset returns the decoder to its initial state: a new stream (frame
// numbers from 0, noise statistics reset) and the initial CMN mean.
func (d *decoder) reset() error {
	if C.ps_start_stream(d.ps) < 0 {
		return errors.New("pocketsphinx: start stream failed")
	}
	C.fs_cmn_restore(d.ps, d.cmnInit)
	return nil
}

// New loads cfg.Decoders decoders. Each holds its own copy of the models.
func New(cfg Config) (*Recognizer, error) {
	for _, p := range []string{cfg.HMM, cfg.LM, cfg.Dict} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("pocketsphinx model: %w (install pocketsphinx-en-us)", err)
		}
	}
	if cfg.Decoders < 1 {
		cfg.Decoders = 1
	}
	hmm, lm, dict := C.CString(cfg.HMM), C.CString(cfg.LM), C.CString(cfg.Dict)
	defer C.free(unsafe.Pointer(hmm))
	defer C.free(unsafe.Pointer(lm))
	defer C.free(unsafe.Pointer(dict))
	r := &Recognizer{free: make(chan *decoder, cfg.Decoders)}
	for i := 0; i < cfg.Decoders; i++ {
		ps := C.fs_decoder_new(hmm, lm, dict)
		if ps == nil {
			r.Close()
			return nil, errors.New("pocketsphinx: decoder initialisation failed")
		}
		d := &decoder{ps: ps, cmnInit: C.fs_cmn_save(ps)}
		r.all = append(r.all, d)
		r.free <- d
	}
	return r, nil
}

// Close frees every decoder. No Recognize may be running.
func (r *Recognizer) Close() {
	for _, d := range r.all {
		C.ps_free(d.ps)
		C.free(unsafe.Pointer(d.cmnInit))
	}
	r.all = nil
}

// Recognize decodes samples, divided at long pauses into utterances.
func (r *Recognizer) Recognize(ctx context.Context, samples []float32, timestamps bool) (triton.Result, error) {
	var d *decoder
	select {
	case d = <-r.free:
	case <-ctx.Done():
		return triton.Result{}, ctx.Err()
	}
	defer func() { r.free <- d }()

	if len(samples) == 0 {
		return triton.Result{}, nil
	}
	pcm := make([]C.int16, len(samples))
	for i, s := range samples {
		switch {
		case s >= 1:
			pcm[i] = 32767
		case s <= -1:
			pcm[i] = -32768
		default:
			pcm[i] = C.int16(s * 32767)
		}
	}
	if err := d.reset(); err != nil {
		return triton.Result{}, err
	}
	// One utterance per stretch of speech, divided at long pauses, as
	// pocketsphinx's own continuous recogniser divides its input: decoded
	// as one, sentences on either side of a pause run together through
	// the language model and come out worse than each alone. The stream
	// (frame numbers) runs on across them; each starts from the initial
	// cepstral mean, as a request does (the next voice may not be the
	// last one's).
	var res triton.Result
	if timestamps {
		res.Words = []triton.Word{}
	}
	var texts []string
	cuts := append(pauseCuts(samples), len(pcm))
	for i, end := range cuts {
		start := 0
		if i > 0 {
			start = cuts[i-1]
		}
		text, words, err := d.utterance(ctx, pcm[start:end], timestamps)
		if err != nil {
			return triton.Result{}, err
		}
		if text != "" {
			texts = append(texts, text)
		}
		res.Words = append(res.Words, words...)
	}
	res.Text = strings.Join(texts, " ")
	return res, nil
}

// utterance decodes pcm as one utterance of the decoder's stream.
func (d *decoder) utterance(ctx context.Context, pcm []C.int16, timestamps bool) (string, []triton.Word, error) {
	ps := d.ps
	C.fs_cmn_restore(ps, d.cmnInit)
	if C.ps_start_utt(ps) < 0 {
		return "", nil, errors.New("pocketsphinx: start utterance failed")
	}
	// Fed in blocks, as pocketsphinx's own tools do: its live cepstral
	// mean normalisation recognises short clips far better than the
	// whole-utterance mode.
	for off := 0; off < len(pcm); off += blockSamples {
		if ctx.Err() != nil {
			// The client has given up: stop working for nobody.
			C.ps_end_utt(ps)
			return "", nil, ctx.Err()
		}
		end := min(off+blockSamples, len(pcm))
		if C.ps_process_raw(ps, &pcm[off], C.size_t(end-off), 0, 0) < 0 {
			C.ps_end_utt(ps)
			return "", nil, errors.New("pocketsphinx: process failed")
		}
	}
	if C.ps_end_utt(ps) < 0 {
		return "", nil, errors.New("pocketsphinx: end utterance failed")
	}
	var text string
	if hyp := C.ps_get_hyp(ps, nil); hyp != nil {
		text = C.GoString(hyp)
	}
	var words []triton.Word
	if timestamps {
		for seg := C.ps_seg_iter(ps); seg != nil; seg = C.ps_seg_next(seg) {
			word, ok := cleanWord(C.GoString(C.ps_seg_word(seg)))
			if !ok {
				continue
			}
			var sf, ef C.int
			C.ps_seg_frames(seg, &sf, &ef) // counted from the stream's start
			words = append(words, triton.Word{
				Word:       word,
				Start:      float64(sf) / frameRate,
				End:        float64(ef+1) / frameRate,
				Confidence: float64(C.fs_seg_conf(ps, seg)),
			})
		}
	}
	return text, words, nil
}

// cleanWord drops fillers (<s>, <sil>, [NOISE]) and the "(2)" suffix of
// alternate pronunciations.
func cleanWord(w string) (string, bool) {
	if w == "" || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "[") {
		return "", false
	}
	if i := strings.IndexByte(w, '('); i > 0 {
		w = w[:i]
	}
	return w, true
}
