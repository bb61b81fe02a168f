package contract

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestKeysFor(t *testing.T) {
	cases := []struct {
		in   InputRef
		want string
	}{
		{InputRef{Bucket: "in", Key: "a/b.wav", ETag: `"abc"`}, "t/in/a/b.wav/asr/e-abc.json"},
		{InputRef{Bucket: "in", Key: "a/b.wav", ETag: "abc", VersionID: "3/x.y"}, "t/in/a/b.wav/asr/v-3%2Fx%2Ey.json"},
		{InputRef{Bucket: "in", Key: "a/b.wav", VersionID: "null", ETag: "abc-2"}, "t/in/a/b.wav/asr/e-abc-2.json"},
		{InputRef{Bucket: "in", Key: "visit notes/Ünïcode.wav"}, "t/in/visit notes/Ünïcode.wav/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: "/../x.wav"}, "t/in/%2F%2E%2E/x.wav/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: "a//x.wav"}, "t/in/a/%2Fx.wav/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: "a/./x.wav"}, "t/in/a/%2E/x.wav/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: "a/"}, "t/in/a%2F/asr/unversioned.json"},
		// A segment ending like an output file keeps its last dot escaped,
		// so no output key lies under another's as under a folder.
		{InputRef{Bucket: "in", Key: "x/asr/unversioned.json/y"}, "t/in/x/asr/unversioned%2Ejson/y/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: "notes.txt"}, "t/in/notes%2Etxt/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: "a.error.json/b.wav"}, "t/in/a.error%2Ejson/b.wav/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: ".json/x.wav"}, "t/in/.json/x.wav/asr/unversioned.json"},
		{InputRef{Bucket: "in", Key: "100%\n"}, "t/in/100%25%0A/asr/unversioned.json"},
	}
	for _, c := range cases {
		if got := KeysFor("t/", c.in, "asr").JSON; got != c.want {
			t.Errorf("KeysFor(%+v) = %q, want %q", c.in, got, c.want)
		}
	}
	k := KeysFor("t/", InputRef{Bucket: "b", Key: "k", ETag: "e"}, "asr")
	if k.Error != "t/b/k/asr/e-e.error.json" || k.Key(FormatSRT) != "t/b/k/asr/e-e.srt" || k.Claim != "t/b/k/asr/e-e.claim" {
		t.Errorf("%+v", k)
	}
}

// Keys that a path-cleaning scheme folds together, and the same key in two
// buckets, must get distinct outputs.
func TestKeysForDistinct(t *testing.T) {
	inputs := []InputRef{
		{Bucket: "in", Key: "a//x.wav"}, {Bucket: "in", Key: "/a/x.wav"}, {Bucket: "in", Key: "a/./x.wav"},
		{Bucket: "in", Key: "a/x.wav"}, {Bucket: "in", Key: "a/x.wav/"}, {Bucket: "in", Key: "a/../a/x.wav"},
		{Bucket: "in", Key: "a%2Fx.wav"}, {Bucket: "in", Key: "a/x.wav", ETag: "e"}, {Bucket: "in", Key: "a/x.wav", VersionID: "e"},
		{Bucket: "in", Key: "c/x.wav"}, {Bucket: "in2", Key: "c/x.wav"}, {Bucket: "in", Key: "2/c/x.wav"},
		{Bucket: "in", Key: strings.Repeat("k", 1024)}, {Bucket: "in", Key: strings.Repeat("k", 1023)},
		{Bucket: "in", Key: strings.Repeat("k", 1023) + "j"},
	}
	seen := map[string]InputRef{}
	for _, in := range inputs {
		for _, model := range []string{"asr", "asr/v2", "asr_v2"} {
			k := KeysFor("t/", in, model)
			for _, key := range []string{k.JSON, k.Error, k.Key("txt"), k.Claim} {
				if prev, dup := seen[key]; dup {
					t.Errorf("%+v and %+v (model %s) share output %q", prev, in, model, key)
				}
				seen[key] = in
			}
		}
	}
}

func TestEscapeKeyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "/", ".", "%", "\n", " ", "é", "2F", "_", "+"}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(12) + 1 {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		key := b.String()
		esc := EscapeKey(key)
		back, err := UnescapeKey(esc)
		if err != nil || back != key {
			t.Fatalf("EscapeKey(%q) = %q → %q, %v", key, esc, back, err)
		}
		for _, seg := range strings.Split(esc, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("EscapeKey(%q) = %q has an empty or dot segment", key, esc)
			}
		}
	}
}

// Every output key fits S3's limit, for any legal input key (up to 1,024
// bytes of UTF-8), the longest prefix, any bucket name and long versions.
func TestKeysForLength(t *testing.T) {
	prefix := strings.Repeat("p/", MaxPrefixBytes/2)
	bucket := strings.Repeat("b", 63)
	for _, key := range []string{
		strings.Repeat("a", 970), strings.Repeat("a", 1024), strings.Repeat("\x01", 1024),
		strings.Repeat("é", 512), strings.Repeat("/", 1024), strings.Repeat("%", 1024),
	} {
		for _, in := range []InputRef{
			{Bucket: bucket, Key: key, ETag: strings.Repeat("f", 32) + "-10000"},
			{Bucket: bucket, Key: key, VersionID: strings.Repeat(".", 1024)},
		} {
			for _, p := range []string{"", "transcripts/", prefix} {
				k := KeysFor(p, in, strings.Repeat("m", 300))
				for _, out := range []string{k.JSON, k.Error, k.Claim, k.Key(FormatVTT)} {
					if len(out) > MaxKeyBytes || !utf8.ValidString(out) {
						t.Fatalf("key of %d bytes for a %d-byte input key", len(out), len(key))
					}
				}
			}
		}
	}
	// The 970-byte key of the report keeps its readable form under a short
	// prefix only while it fits.
	k := KeysFor("transcripts/", InputRef{Bucket: "in", Key: strings.Repeat("a", 970), ETag: strings.Repeat("f", 32)}, "asr")
	if !strings.Contains(k.JSON, "/"+hashedMarker+"/") {
		t.Errorf("long key not hashed: %q", k.JSON)
	}
}

func TestCheckOutputPrefix(t *testing.T) {
	for _, p := range []string{"", "transcripts/", "tenant-a/2026/"} {
		if err := CheckOutputPrefix(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"../../", "a/../", "/abs/", "a//b/", "no-slash", "a/./", "x%2F/", "a\n/", strings.Repeat("a", MaxPrefixBytes) + "/"} {
		if err := CheckOutputPrefix(p); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
}
