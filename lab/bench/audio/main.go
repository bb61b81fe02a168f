// Command audio measures decoding and resampling to the model's input (16
// kHz mono float32) side by side with ffmpeg doing the same
// (`ffmpeg -i X -ar 16000 -ac 1 -f f32le`), on the same files in the same
// run: 10-minute recordings as WAV (44.1 kHz stereo), FLAC and MP3. Each
// decoder runs in a child process of its own, five times, alternating;
// ffmpeg's CPU time (user+sys) comes from wait4, ours from the child's
// getrusage (itself and the ffmpeg it runs) around the measured decode,
// after a warm-up; peak RSS from the child's own VmHWM. It also measures
// the resampler (44.1 kHz to 16 kHz: a 1 kHz tone's SNR, a 9 kHz tone's
// alias) and the peak RSS of a 2-hour WAV and MP3, streamed. Last line:
//
//	RESULT wav_ratio=X flac_ratio=X mp3_ratio=X min_audio_s_per_cpu_s=X resample_snr_db=X alias_9k_db=X peak_rss_mib_2h=X
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/lab/kit/procstat"
	"github.com/fleetscribe/fleetscribe/modelspec"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "decode" {
		if err := decodeChild(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	minutes := flag.Float64("minutes", 10, "length of the side-by-side recordings")
	long := flag.Float64("long-hours", 2, "length of the recordings whose peak RSS is measured (0: skip)")
	dir := flag.String("dir", "", "folder for the generated recordings (default: a temporary one)")
	flag.Parse()
	if err := run(*minutes, *long, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench-audio:", err)
		os.Exit(1)
	}
}

// decodeChild streams one file as the worker streams a recording longer
// than its first read: decoded a block at a time, resampled to 16 kHz, cut
// into 30 s chunks at pauses, the last 64 chunks held (the worker's chunks
// in flight). It first decodes a short file of the same format, as a
// worker has before its first long recording (the resampler's filter is
// built once a process for each pair of rates). It prints its sample count, peak RSS, and the CPU
// time (its own and its children's, user+sys) of the measured decode.
func decodeChild(path string) error {
	if warm := os.Getenv("BENCH_WARM"); warm != "" {
		if _, err := stream(warm); err != nil {
			return err
		}
	}
	before, err := cpuTime()
	if err != nil {
		return err
	}
	n, err := stream(path)
	if err != nil {
		return err
	}
	after, err := cpuTime()
	if err != nil {
		return err
	}
	hwm, err := procstat.PeakRSS(0)
	if err != nil {
		return err
	}
	fmt.Println(n, hwm, int64(after-before))
	return nil
}

// cpuTime is the CPU time of this process and of its children waited for.
func cpuTime() (time.Duration, error) {
	var self, children syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		return 0, err
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children); err != nil {
		return 0, err
	}
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano()), nil
}

// repeats is how many times each decoder runs on each file.
const repeats = 5

// inFlight is how many chunks the worker has in flight at most (its
// default -chunk-parallelism).
const inFlight = 64

// stream decodes, resamples and cuts the file at path as the worker does,
// and returns the samples at 16 kHz.
func stream(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	s, err := audio.OpenStream(context.Background(), f, st.Size(), audio.PathFFmpeg())
	if err != nil {
		return 0, err
	}
	defer s.Close()
	rs := audio.NewResampler(s.Rate(), modelspec.SampleRate)
	sp := audio.NewSplitter(audio.ChunkSplit(modelspec.SampleRate, 30, audio.StitchOverlap))
	var held [inFlight][]float32
	block := make([]float32, 1<<15)
	var out []float32
	total, chunks := 0, 0
	for eof := false; !eof; {
		n, err := s.Read(block)
		if errors.Is(err, io.EOF) {
			eof = true
		} else if err != nil {
			return 0, err
		}
		out = rs.Write(out[:0], block[:n])
		if eof {
			out = rs.Flush(out)
		}
		total += len(out)
		sp.Write(out)
		for {
			c, ok := sp.Next(eof)
			if !ok {
				break
			}
			// The chunk in flight: a copy of its own, as the worker sends.
			slot := &held[chunks%inFlight]
			*slot = append((*slot)[:0], c.Samples...)
			chunks++
		}
	}
	return total, nil
}

type measured struct {
	cpu     time.Duration
	hwm     int64
	samples int
}

func ours(path, warm string) (measured, error) {
	self, err := os.Executable()
	if err != nil {
		return measured{}, err
	}
	cmd := exec.Command(self, "decode", path)
	cmd.Env = append(os.Environ(), "BENCH_WARM="+warm)
	b, err := cmd.Output()
	if err != nil {
		return measured{}, fmt.Errorf("%s: %w", path, err)
	}
	out := string(b)
	var m measured
	var cpu int64
	if _, err := fmt.Sscan(out, &m.samples, &m.hwm, &cpu); err != nil {
		return measured{}, fmt.Errorf("child said %q: %w", out, err)
	}
	m.cpu = time.Duration(cpu)
	return m, nil
}

// ffmpegDecode runs the reference decode of path and returns its CPU time
// (user+sys, from wait4).
func ffmpegDecode(path string) (time.Duration, error) {
	cmd := exec.Command("ffmpeg", "-nostdin", "-loglevel", "error", "-threads", "1", "-i", path, "-ar", strconv.Itoa(modelspec.SampleRate), "-ac", "1", "-f", "f32le", "-y", "/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ffmpeg %s: %w: %s", path, err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

func ffmpegMake(args ...string) error {
	cmd := exec.Command("ffmpeg", append([]string{"-nostdin", "-loglevel", "error", "-y"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ffmpeg %v: %w: %s", args, err, out)
	}
	return nil
}

func run(minutes, longHours float64, dir string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "bench-audio-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	secs := minutes * 60
	// Speech-like stereo source: a tone swept through the voice band in
	// bursts with pauses, a little noise, the channels not identical.
	src := filepath.Join(dir, "src.wav")
	fmt.Printf("generating %.0f-minute recordings...\n", minutes)
	if err := ffmpegMake("-f", "lavfi", "-i", fmt.Sprintf("aevalsrc='0.3*sin(2*PI*(300+200*sin(2*PI*0.3*t))*t)*gt(sin(2*PI*0.4*t),-0.3)+0.01*random(0)|0.25*sin(2*PI*(310+180*sin(2*PI*0.3*t))*t)*gt(sin(2*PI*0.4*t),-0.3)+0.01*random(1)':s=44100:d=%g", secs),
		"-c:a", "pcm_s16le", src); err != nil {
		return err
	}
	files := []struct{ name, path string }{{"wav", src}, {"flac", filepath.Join(dir, "src.flac")}, {"mp3", filepath.Join(dir, "src.mp3")}}
	if err := ffmpegMake("-i", src, "-c:a", "flac", files[1].path); err != nil {
		return err
	}
	if err := ffmpegMake("-i", src, "-c:a", "libmp3lame", "-b:a", "128k", files[2].path); err != nil {
		return err
	}
	// 5-second files of each format, to warm the child up with.
	warm := map[string]string{}
	for _, f := range files {
		warm[f.name] = filepath.Join(dir, "warm."+f.name)
		if err := ffmpegMake("-i", f.path, "-t", "5", "-c:a", "copy", "-f", map[string]string{"wav": "wav", "flac": "flac", "mp3": "mp3"}[f.name], warm[f.name]); err != nil {
			return err
		}
	}
	fmt.Printf("\n%-6s %14s %14s %8s %12s\n", "format", "ours aud-s/cpu-s", "ffmpeg", "ratio", "ours peak RSS")
	ratios := map[string]float64{}
	minRate := math.Inf(1)
	for _, f := range files {
		// The machine is noisy: each side five times, alternating, and
		// each side's least CPU.
		var m measured
		fc := time.Duration(math.MaxInt64)
		for range repeats {
			r, err := ours(f.path, warm[f.name])
			if err != nil {
				return err
			}
			if m.cpu == 0 || r.cpu < m.cpu {
				m.cpu = r.cpu
			}
			m.hwm = max(m.hwm, r.hwm)
			c, err := ffmpegDecode(f.path)
			if err != nil {
				return err
			}
			fc = min(fc, c)
		}
		o, ff := secs/m.cpu.Seconds(), secs/fc.Seconds()
		ratios[f.name] = o / ff
		minRate = math.Min(minRate, o)
		fmt.Printf("%-6s %14.0f %14.0f %8.2f %9.0f MiB\n", f.name, o, ff, o/ff, float64(m.hwm)/(1<<20))
	}

	snr, alias := resampleQuality()
	fmt.Printf("\nresampler 44.1 kHz -> 16 kHz: 1 kHz tone SNR %.1f dB; a 9 kHz tone aliases at %.1f dB\n", snr, alias)

	peak := 0.0
	if longHours > 0 {
		fmt.Printf("\npeak RSS of a %.0f-hour recording, streamed:\n", longHours)
		long := filepath.Join(dir, "long.wav")
		if err := ffmpegMake("-stream_loop", "-1", "-i", src, "-t", fmt.Sprint(longHours*3600), "-c:a", "pcm_s16le", long); err != nil {
			return err
		}
		longMP3 := filepath.Join(dir, "long.mp3")
		if err := ffmpegMake("-i", long, "-c:a", "libmp3lame", "-b:a", "64k", longMP3); err != nil {
			return err
		}
		for _, p := range []string{long, longMP3} {
			m, err := ours(p, warm[strings.TrimPrefix(filepath.Ext(p), ".")])
			if err != nil {
				return err
			}
			st, _ := os.Stat(p)
			fmt.Printf("  %s (%.0f MB): %.0f MiB\n", filepath.Ext(p), float64(st.Size())/1e6, float64(m.hwm)/(1<<20))
			peak = math.Max(peak, float64(m.hwm)/(1<<20))
		}
	}
	fmt.Printf("RESULT wav_ratio=%.2f flac_ratio=%.2f mp3_ratio=%.2f min_audio_s_per_cpu_s=%.0f resample_snr_db=%.1f alias_9k_db=%.1f peak_rss_mib_2h=%.0f\n",
		ratios["wav"], ratios["flac"], ratios["mp3"], minRate, snr, alias, peak)
	return nil
}

// resampleQuality takes a 1 kHz tone and a 9 kHz tone at 44.1 kHz through
// the resampler: the first one's SNR (the tone against everything else
// that comes out), the second one's alias at 7 kHz, in dB below the tone.
func resampleQuality() (snr, alias float64) {
	tone := func(f float64) []float32 {
		x := make([]float32, 44100*2)
		for i := range x {
			x[i] = float32(0.5 * math.Sin(2*math.Pi*f*float64(i)/44100))
		}
		return x
	}
	y := audio.Resample(tone(1000), 44100, modelspec.SampleRate)
	y = y[len(y)/4 : 3*len(y)/4]
	// Least-squares fit of a 1 kHz sine; the residual is the noise.
	var ss, sc, cc, ys, yc float64
	for i, v := range y {
		ph := 2 * math.Pi * 1000 * float64(i) / modelspec.SampleRate
		s, c := math.Sin(ph), math.Cos(ph)
		ss, sc, cc = ss+s*s, sc+s*c, cc+c*c
		ys, yc = ys+float64(v)*s, yc+float64(v)*c
	}
	det := ss*cc - sc*sc
	a, b := (ys*cc-yc*sc)/det, (yc*ss-ys*sc)/det
	var sig, noise float64
	for i, v := range y {
		ph := 2 * math.Pi * 1000 * float64(i) / modelspec.SampleRate
		fit := a*math.Sin(ph) + b*math.Cos(ph)
		sig += fit * fit
		noise += (float64(v) - fit) * (float64(v) - fit)
	}
	snr = 10 * math.Log10(sig/noise)
	z := audio.Resample(tone(9000), 44100, modelspec.SampleRate)
	z = z[len(z)/4 : 3*len(z)/4]
	var re, im float64
	for i, v := range z {
		ph := 2 * math.Pi * 7000 * float64(i) / modelspec.SampleRate
		re += float64(v) * math.Cos(ph)
		im += float64(v) * math.Sin(ph)
	}
	amp := 2 * math.Hypot(re, im) / float64(len(z))
	alias = 20 * math.Log10(amp/0.5)
	return snr, alias
}
