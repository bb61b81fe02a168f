package audio

import (
	"bytes"
	"context"
	"errors"
)

// Decode sniffs the container format and decodes it to mono (see
// DecodeContext), with ffmpeg from PATH (PathFFmpeg, looked up at each
// call) for formats without a Go decoder.
func Decode(b []byte) (Clip, error) { return DecodeInto(b, nil) }

// DecodeInto is Decode writing the samples into buf when its capacity
// suffices (a buffer reused across recordings), else into a new slice.
func DecodeInto(b []byte, buf []float32) (Clip, error) {
	return DecodeContext(context.Background(), b, buf, PathFFmpeg())
}

// DecodeContext decodes by content, not name: WAV (PCM, float, G.711) in
// Go, and WAV of compressed samples as OpenStream does (through ff); FLAC
// and MP3 through ff where there is one, else in pure Go; everything else
// ffmpeg knows through ff (nil: refused as unsupported), cancelled with
// ctx.
func DecodeContext(ctx context.Context, b []byte, buf []float32, ff *FFmpeg) (Clip, error) {
	switch {
	case isWAV(b):
		c, err := decodeWAV(b, buf)
		if forFFmpeg(err) {
			s, err := compressedWAVStream(ctx, bytes.NewReader(b), int64(len(b)), ff, err, 0)
			if err != nil {
				return Clip{}, err
			}
			return readAll(s, buf)
		}
		return c, err
	case len(b) == 0:
		return Clip{}, corrupt("unknown", "empty object")
	}
	switch name := sniff(b); name {
	case "flac", "mp3":
		// ffmpeg first where there is one: measured (make bench-audio), it
		// decodes MP3 about eight times and FLAC about three times faster
		// than the pure Go decoders, which serve where ffmpeg is missing or
		// fails.
		if ff != nil && ff.Bin != "" {
			if c, err := ff.decodeInto(ctx, b, buf, name); err == nil {
				return c, nil
			} else if errors.Is(err, ErrTooLong) || ctx.Err() != nil {
				return Clip{}, err
			}
		}
		if name == "mp3" {
			return decodeMP3(b, buf)
		}
		return decodeFLAC(b, buf)
	case "":
		return Clip{}, corrupt("unknown", "unrecognised audio container")
	default:
		return ff.decodeInto(ctx, b, buf, name)
	}
}

// Magic numbers of containers recognised by name.
var (
	wave64GUID = []byte{'r', 'i', 'f', 'f', 0x2E, 0x91, 0xCF, 0x11, 0xA5, 0xD6, 0x28, 0xDB, 0x04, 0xC1, 0x00, 0x00}
	asfGUID    = []byte{0x30, 0x26, 0xB2, 0x75, 0x8E, 0x66, 0xCF, 0x11, 0xA6, 0xD9, 0x00, 0xAA, 0x00, 0x62, 0xCE, 0x6C}
	ebmlMagic  = []byte{0x1A, 0x45, 0xDF, 0xA3}
)

// sniff names a container from its first bytes ("" when unknown), so that
// an error says what the recording is rather than calling it corrupt.
func sniff(b []byte) string {
	has := func(p string) bool { return bytes.HasPrefix(b, []byte(p)) }
	switch {
	case (has("RF64") || has("BW64")) && len(b) >= 12 && string(b[8:12]) == "WAVE":
		return "rf64" // WAV past 4 GB
	case bytes.HasPrefix(b, wave64GUID):
		return "wave64"
	case has("caff"):
		return "caf"
	case bytes.HasPrefix(b, asfGUID):
		return "asf (wma)"
	case has("fLaC"):
		return "flac"
	case has("OggS"):
		return "ogg"
	case has("#!AMR"):
		return "amr"
	case len(b) > 1 && b[0] == 0xFF && b[1]&0xF6 == 0xF0:
		return "aac (adts)" // sync word, MPEG layer 0
	case has("ID3"), len(b) > 1 && b[0] == 0xFF && b[1]&0xE0 == 0xE0 && b[1]&0x06 != 0:
		return "mp3"
	case len(b) > 8 && string(b[4:8]) == "ftyp":
		return "mp4"
	case bytes.HasPrefix(b, ebmlMagic):
		// The EBML header names its document type early on.
		if bytes.Contains(b[:min(len(b), 64)], []byte("webm")) {
			return "webm"
		}
		return "matroska"
	case has("FORM") && len(b) >= 12 && (string(b[8:12]) == "AIFF" || string(b[8:12]) == "AIFC"):
		return "aiff"
	}
	return ""
}
