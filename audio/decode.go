package audio

import "bytes"

// Decode sniffs the container format and decodes it to mono. WAV (PCM and
// float) is decoded here; other recognised formats are reported as
// unsupported by name, unknown bytes as corrupt.
func Decode(b []byte) (Clip, error) {
	switch {
	case len(b) >= 12 && string(b[0:4]) == "RIFF" && string(b[8:12]) == "WAVE":
		return DecodeWAV(b)
	case len(b) == 0:
		return Clip{}, corrupt("unknown", "empty object")
	}
	if name := sniff(b); name != "" {
		return Clip{}, unsupported(name, "this build decodes WAV only")
	}
	return Clip{}, corrupt("unknown", "unrecognised audio container")
}

func sniff(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("fLaC")):
		return "flac"
	case bytes.HasPrefix(b, []byte("OggS")):
		return "ogg"
	case bytes.HasPrefix(b, []byte("ID3")), len(b) > 1 && b[0] == 0xFF && b[1]&0xE0 == 0xE0:
		return "mp3"
	case len(b) > 8 && string(b[4:8]) == "ftyp":
		return "mp4"
	case bytes.HasPrefix(b, []byte{0x1A, 0x45, 0xDF, 0xA3}):
		return "webm"
	case bytes.HasPrefix(b, []byte("FORM")):
		return "aiff"
	}
	return ""
}
