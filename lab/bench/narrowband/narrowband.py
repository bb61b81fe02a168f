"""make bench-narrowband: word error rate of the CPU recognisers on
telephone audio, side by side in one run: model.py's pocketsphinx engine
(as deploy/triton/cpu serves it) with its narrowband measures off
("before": the whole utterance decoded, no band fill) and on ("after": the
defaults), and its whisper engine (deploy/triton/cpu-whisper).

Six sentences in two flite voices, each with 0.7 s of lead-in, are made by
ffmpeg in these conditions: wideband 16 kHz; the same with faint room tone
(white noise at -50 dBFS) under it; 8 kHz; band-limited to 300-3,400 Hz at
8 kHz; and that as G.711 mu-law and A-law. Each is decoded by ffmpeg to
16 kHz mono (the worker's decoding and resampling match ffmpeg's) and
levelled as the worker levels a chunk. "Invented" counts clips with a word
timed in the silent lead-in. Last line:

RESULT wer_wide=X ... wer_8k_before=X ... wer_wide_whisper=X ... invented_before=N invented_after=N invented_whisper=N

(text compared lower-cased, without punctuation, hyphens as spaces: Whisper
writes "Follow-up appointment.").
"""

import os
import subprocess
import sys
import tempfile
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "deploy", "triton", "tests"))
import backend_stub  # noqa: E402, F401 - the stand-in triton_python_backend_utils, and model.py's folder on the path
from fleetscribe_asr.common import SAMPLE_RATE  # noqa: E402 - model.py put its folder on the path
from fleetscribe_asr.options import SphinxOptions  # noqa: E402
from fleetscribe_asr.sphinx import SphinxModel  # noqa: E402
from fleetscribe_asr.whisper import WhisperModel  # noqa: E402


SENTENCES = [
    "the patient was admitted to the hospital on monday morning",
    "please schedule a follow up appointment in two weeks",
    "she has no known allergies to any medication",
    "the doctor will call you back this afternoon",
    "we will review the test results at the next visit",
    "the heart rate is normal and the lungs are clear",
]
VOICES = ["rms", "slt"]
LEAD = 0.7  # seconds of silence before speech
CONDITIONS = {
    "wide": [],
    "room": ["-af", "volume=1"],  # noise added after decoding
    "8k": ["-ar", "8000"],
    "band": ["-af", "highpass=f=300,lowpass=f=3400", "-ar", "8000"],
    "mulaw": ["-af", "highpass=f=300,lowpass=f=3400", "-ar", "8000", "-c:a", "pcm_mulaw"],
    "alaw": ["-af", "highpass=f=300,lowpass=f=3400", "-ar", "8000", "-c:a", "pcm_alaw"],
}


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


def read16(path):
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768


def level(x):
    """The worker's levelling (audio.Normalize): the louder half of 30 ms
    frames to -20 dBFS, at most +60 dB, never past 0.99."""
    n = len(x) // 480
    frames = np.sort((x[: n * 480].astype(np.float64).reshape(n, 480) ** 2).mean(axis=1))
    rms, peak = np.sqrt(frames[n // 2:].mean()), np.abs(x).max()
    if rms < 1e-7 or peak == 0:
        return x
    return (x * min(0.1 / rms, 1000, 0.99 / peak)).astype(np.float32)


def words(text):
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split()


def errors(ref, hyp):
    r, h = words(ref), words(hyp)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[:], i
        for j in range(1, len(h) + 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (r[i - 1] != h[j - 1]))
    return d[len(h)]


def clips(work):
    rng = np.random.default_rng(7)
    out = {c: [] for c in CONDITIONS}
    for i, text in enumerate(SENTENCES):
        for voice in VOICES:
            src = os.path.join(work, f"{i}{voice}.wav")
            ffmpeg("-f", "lavfi", "-i", f"flite=text='{text}':voice={voice}", "-af",
                   f"adelay={int(LEAD * 1000)}|{int(LEAD * 1000)},apad=pad_dur=0.5", "-ar", str(SAMPLE_RATE), "-ac", "1", src)
            for cond, args in CONDITIONS.items():
                enc = os.path.join(work, f"{i}{voice}-{cond}.wav")
                dec = os.path.join(work, f"{i}{voice}-{cond}-16k.wav")
                ffmpeg("-i", src, *args, "-ac", "1", enc)
                ffmpeg("-i", enc, "-ar", str(SAMPLE_RATE), "-ac", "1", "-c:a", "pcm_s16le", dec)
                x = read16(dec)
                if cond == "room":
                    x = x + (rng.standard_normal(len(x)) * 10 ** (-50 / 20)).astype(np.float32)
                out[cond].append((text, level(x)))
    return out


def measure(recogniser, data):
    wer, invented = {}, 0
    for cond, items in data.items():
        e = n = 0
        for text, x in items:
            h = recogniser.recognize(x, True)
            e, n = e + errors(text, h.text), n + len(text.split())
            words = h.timestamp["word"]
            if words and words[0]["start"] < LEAD - 0.1:
                invented += 1
        wer[cond] = e / n
    return wer, invented


def main():
    with tempfile.TemporaryDirectory() as work:
        data = clips(work)
    before = SphinxModel(SphinxOptions(sphinx_band_fill=-1, sphinx_speech_pad_ms=-1))
    after = SphinxModel()
    wb, ib = measure(before, data)
    wa, ia = measure(after, data)
    ww, iw = measure(WhisperModel(), data)
    print(f"{'condition':<10} {'pocketsphinx before':>20} {'pocketsphinx after':>19} {'whisper':>8}")
    for cond in CONDITIONS:
        print(f"{cond:<10} {wb[cond]:>20.3f} {wa[cond]:>19.3f} {ww[cond]:>8.3f}")
    print(f"clips with a word invented in the {LEAD} s lead-in: pocketsphinx {ib} before, {ia} after; whisper {iw} "
          f"(of {len(SENTENCES) * len(VOICES) * len(CONDITIONS)})")
    fields = ([f"wer_{c}={wa[c]:.3f}" for c in CONDITIONS] + [f"wer_{c}_before={wb[c]:.3f}" for c in CONDITIONS] +
              [f"wer_{c}_whisper={ww[c]:.3f}" for c in CONDITIONS])
    print("RESULT " + " ".join(fields) + f" invented_before={ib} invented_after={ia} invented_whisper={iw}")


if __name__ == "__main__":
    main()
