package enqueue

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
)

// The checkpoint is a journal of JSON lines, appended as a run goes and
// read back by the next run with the same options:
//
//	{"t":"h","v":1,"fp":"..."}                       header: the run's fingerprint
//	{"t":"s","e":[{"s":stream,"p":pos,...}, ...]}    entries sent by one SendMessageBatch call
//	{"t":"f","e":[...],"err":"..."}                  entries that could not be sent or checked
//	{"t":"m","s":stream,"p":pos,"c":true}            watermark: every item of stream up to pos is finished; c: the whole stream is
//
// A "s" line is written right after its call returns, before anything
// else happens, so a run stopped at any point (Ctrl-C, a crash, a lost
// network) knows every entry the queue accepted. A resumed run lists each
// stream after its watermark, skips entries the journal says were sent
// beyond it, and retries failed entries first. The journal is rewritten
// as a snapshot of that state when it grows past compactBytes.
const (
	journalVersion = 1
	compactBytes   = 16 << 20
)

type journalLine struct {
	T   string   `json:"t"`
	V   int      `json:"v,omitempty"`
	FP  string   `json:"fp,omitempty"`
	S   string   `json:"s,omitempty"`
	P   string   `json:"p,omitempty"`
	C   bool     `json:"c,omitempty"`
	E   []jentry `json:"e,omitempty"`
	Err string   `json:"err,omitempty"`
}

// jentry identifies one item: its stream and position, and what is needed
// to send it again.
type jentry struct {
	S string `json:"s"`
	P string `json:"p"`
	B string `json:"b,omitempty"`
	K string `json:"k,omitempty"`
	V string `json:"v,omitempty"`
}

func (e jentry) id() string { return e.S + "\x00" + e.P }

// streamState is a stream's progress: items are numbered in the order the
// stream yields them; every number below wm is finished.
type streamState struct {
	next, wm int64
	pos      map[int64]string // positions of numbered items not yet passed by wm
	finished map[int64]bool   // finished items above wm
	sentKeys map[int64]jentry // sent items above wm (for snapshots)
	wmPos    string           // position of the last item passed by wm
	listed   bool             // the stream yielded its last item
	complete bool
	dirty    bool // wmPos or complete changed since the last mark line
	// From earlier runs: entries sent beyond wmPos.
	priorSent map[string]jentry // position → entry
}

// tracker keeps every stream's progress and the failed entries, and
// writes the journal.
type tracker struct {
	mu      sync.Mutex
	streams map[string]*streamState
	failed  map[string]jentry // id → entry, from earlier runs and this one
	retry   []jentry          // failed in earlier runs, to send first
	path    string
	fp      string
	f       *os.File
	w       *bufio.Writer
	size    int64
	werr    error // first write error; the run stops on it
}

// openTracker reads the journal at path (if any) for fingerprint fp and
// opens it for appending. An empty path keeps progress in memory only.
func openTracker(path, fp string) (*tracker, error) {
	t := &tracker{streams: map[string]*streamState{}, failed: map[string]jentry{}, path: path, fp: fp}
	if path == "" {
		return t, nil
	}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("open checkpoint: %w", err)
	default:
		err = t.replay(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", path, err)
		}
	}
	for id, e := range t.failed {
		stream, _, _ := strings.Cut(id, "\x00")
		st := t.streams[stream]
		if st != nil && e.P <= st.wmPos {
			t.retry = append(t.retry, e)
		} else {
			// Past the watermark: the stream lists it again.
			delete(t.failed, id)
		}
	}
	sort.Slice(t.retry, func(i, j int) bool { return t.retry[i].id() < t.retry[j].id() })
	if err := t.snapshot(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *tracker) state(id string) *streamState {
	st := t.streams[id]
	if st == nil {
		st = &streamState{pos: map[int64]string{}, finished: map[int64]bool{}, sentKeys: map[int64]jentry{}, priorSent: map[string]jentry{}}
		t.streams[id] = st
	}
	return st
}

func (t *tracker) replay(r io.Reader) error {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	first := true
	sent := map[string]jentry{}
	for {
		var l journalLine
		err := dec.Decode(&l)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// A line cut short by a crash ends the journal.
			if errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			return err
		}
		if first {
			if l.T != "h" || l.V != journalVersion {
				return errors.New("not a checkpoint journal")
			}
			if l.FP != t.fp {
				return errors.New("written by a run with other sources, filters, queue or job options; give a new -checkpoint file (or delete this one) to start over")
			}
			first = false
			continue
		}
		switch l.T {
		case "m":
			st := t.state(l.S)
			st.wmPos, st.complete = l.P, l.C
		case "s":
			for _, e := range l.E {
				sent[e.id()] = e
				delete(t.failed, e.id())
			}
		case "f":
			for _, e := range l.E {
				t.failed[e.id()] = e
			}
		}
	}
	for _, e := range sent {
		st := t.state(e.S)
		if e.P > st.wmPos {
			st.priorSent[e.P] = e
		}
	}
	return nil
}

// begin returns where stream id resumes: after the position after, with
// complete set when an earlier run finished it.
func (t *tracker) begin(id string) (after string, complete bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(id)
	return st.wmPos, st.complete
}

// add numbers the next item of a stream. sentBefore reports that an
// earlier run sent it already.
func (t *tracker) add(id, pos string) (seq int64, sentBefore bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(id)
	seq = st.next
	st.next++
	st.pos[seq] = pos
	_, sentBefore = st.priorSent[pos]
	return seq, sentBefore
}

// listed records that stream id yielded its last item.
func (t *tracker) listed(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(id)
	st.listed = true
	t.advance(st)
}

// finish records items as finished (sent, skipped or filtered).
func (t *tracker) finish(refs ...itemRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range refs {
		t.finishLocked(r)
	}
}

func (t *tracker) finishLocked(r itemRef) {
	if r.stream == "" {
		return // a retried entry: its own stream's watermark passed it long ago
	}
	st := t.state(r.stream)
	st.finished[r.seq] = true
	t.advance(st)
}

func (t *tracker) advance(st *streamState) {
	for st.finished[st.wm] {
		delete(st.finished, st.wm)
		delete(st.sentKeys, st.wm)
		st.wmPos = st.pos[st.wm]
		delete(st.pos, st.wm)
		st.wm++
		st.dirty = true
	}
	if st.listed && st.wm == st.next && !st.complete {
		st.complete, st.dirty = true, true
		// Maps never shrink: a finished stream lets go of its own, so
		// memory follows the streams in progress, not those done.
		st.pos, st.finished, st.sentKeys, st.priorSent = nil, nil, nil, nil
	}
}

// itemRef names a numbered item, and what the journal needs of it.
type itemRef struct {
	stream string
	seq    int64
	entry  jentry
}

// sent journals entries the queue accepted, then finishes them.
func (t *tracker) sent(refs []itemRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := journalLine{T: "s"}
	for _, r := range refs {
		l.E = append(l.E, r.entry)
		delete(t.failed, r.entry.id())
		if r.stream != "" {
			t.state(r.stream).sentKeys[r.seq] = r.entry
		}
	}
	t.write(l)
	for _, r := range refs {
		t.finishLocked(r)
	}
}

// failedItems journals entries that could not be sent or checked, then
// finishes them: the next run retries them first.
func (t *tracker) failedItems(refs []itemRef, cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := journalLine{T: "f", Err: cause.Error()}
	for _, r := range refs {
		l.E = append(l.E, r.entry)
		t.failed[r.entry.id()] = r.entry
	}
	t.write(l)
	for _, r := range refs {
		t.finishLocked(r)
	}
}

// flush writes the watermarks that moved, syncs the journal to disk, and
// compacts it when it has grown large. It returns the first write error.
func (t *tracker) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writeMarksLocked(true, nil)
	if t.f != nil && t.werr == nil {
		if err := t.w.Flush(); err != nil {
			t.werr = err
		} else if err := t.f.Sync(); err != nil {
			t.werr = err
		}
	}
	if t.werr == nil && t.size > compactBytes {
		t.werr = t.snapshotLocked()
	}
	return t.werr
}

// writeMarksLocked writes the watermark of every stream (or only of those
// that moved), in order, each followed by what also calls.
func (t *tracker) writeMarksLocked(onlyDirty bool, also func(*streamState)) {
	ids := make([]string, 0, len(t.streams))
	for id, st := range t.streams {
		if st.dirty || !onlyDirty {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		st := t.streams[id]
		st.dirty = false
		t.write(journalLine{T: "m", S: id, P: st.wmPos, C: st.complete})
		if also != nil {
			also(st)
		}
	}
}

func (t *tracker) write(l journalLine) {
	if t.w == nil || t.werr != nil {
		return
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.werr = err
		return
	}
	b = append(b, '\n')
	if _, err := t.w.Write(b); err != nil {
		t.werr = err
		return
	}
	// One write per line: what the queue accepted is on disk (in the page
	// cache, which outlives a killed process) before anything else.
	if err := t.w.Flush(); err != nil {
		t.werr = err
	}
	t.size += int64(len(b))
}

// snapshot replaces the journal with the current state.
func (t *tracker) snapshot() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.snapshotLocked()
}

func (t *tracker) snapshotLocked() error {
	if t.path == "" {
		return nil
	}
	if t.f != nil {
		_ = t.w.Flush()
		_ = t.f.Close()
		t.f, t.w = nil, nil
	}
	tmp := t.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	t.f, t.w, t.size = f, bufio.NewWriterSize(f, 64<<10), 0
	t.write(journalLine{T: "h", V: journalVersion, FP: t.fp})
	t.writeMarksLocked(false, func(st *streamState) {
		var e []jentry
		for p, je := range st.priorSent {
			if p > st.wmPos {
				e = append(e, je)
			}
		}
		for _, je := range st.sentKeys {
			e = append(e, je)
		}
		if len(e) > 0 {
			t.write(journalLine{T: "s", E: e})
		}
	})
	if len(t.failed) > 0 {
		var e []jentry
		for _, je := range t.failed {
			e = append(e, je)
		}
		t.write(journalLine{T: "f", E: e, Err: "failed in an earlier run"})
	}
	if t.werr == nil {
		if err := t.f.Sync(); err != nil {
			t.werr = err
		}
	}
	if t.werr != nil {
		return fmt.Errorf("write checkpoint: %w", t.werr)
	}
	if err := os.Rename(tmp, t.path); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// close flushes and closes the journal.
func (t *tracker) close() error {
	err := t.flush()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f != nil {
		if cerr := t.f.Close(); err == nil && cerr != nil {
			err = cerr
		}
		t.f = nil
	}
	return err
}

// failedCount is the number of entries still failed.
func (t *tracker) failedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.failed)
}
