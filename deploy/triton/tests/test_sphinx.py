"""Tests of model.py's pocketsphinx engine (deploy/triton/cpu), with the
pocketsphinx wheel of the Triton environment (.triton/venv; make test runs
them with its Python). Speech comes from ffmpeg's flite voices."""

import os
import shutil
import subprocess
import tempfile
import unittest
import wave

import numpy as np

from backend_stub import flite, model, pb  # installs the stand-in triton_python_backend_utils, loads model.py

from fleetscribe_asr import sphinx  # noqa: E402 - beside model.py, on the path backend_stub set

try:
    import pocketsphinx  # noqa: F401
    HAVE_SPHINX = True
except ImportError:  # pragma: no cover
    HAVE_SPHINX = False

SENTENCES = ["please schedule a follow up appointment in two weeks", "she has no known allergies to any medication"]


class PauseCutsTest(unittest.TestCase):
    """Pauses of 0.5 s or more between sounds divide a recording at their
    middles; shorter ones, and quiet at either end, do not."""

    def test_cuts(self):
        rng = np.random.default_rng(7)
        parts = []

        def tone(s):
            parts.append((0.3 * np.sin(np.arange(int(s * 16000)) * 0.2)).astype(np.float32))

        def quiet(s, level):
            parts.append((rng.standard_normal(int(s * 16000)) * level).astype(np.float32))

        quiet(1, 0.0005)  # leading quiet: no cut
        tone(2)
        quiet(0.3, 0.0005)  # too short
        tone(2)
        quiet(1.0, 0.0005)  # cut at its middle
        tone(1)
        quiet(0.8, 0)  # digital silence: cut
        tone(1)
        quiet(2, 0.0005)  # trailing quiet: no cut
        cuts = sphinx.pause_cuts(np.concatenate(parts))
        want = [1 + 2 + 0.3 + 2 + 0.5, 1 + 2 + 0.3 + 2 + 1 + 1 + 0.4]
        self.assertEqual(len(cuts), len(want), f"cuts at {cuts}")
        for got, w in zip(cuts, want):
            self.assertAlmostEqual(got / 16000, w, delta=0.02)

    def test_short_dips_and_silence(self):
        rng = np.random.default_rng(8)
        parts = []
        for _ in range(20):
            parts.append((0.3 * np.sin(np.arange(6400) * 0.2)).astype(np.float32))
            parts.append((rng.standard_normal(4800) * 0.0005).astype(np.float32))
        self.assertEqual(sphinx.pause_cuts(np.concatenate(parts)), [])
        self.assertEqual(sphinx.pause_cuts(np.zeros(16000 * 5, dtype=np.float32)), [])


class NarrowbandTest(unittest.TestCase):
    def test_detects_an_empty_upper_band(self):
        rng = np.random.default_rng(3)
        wide = rng.standard_normal(16000).astype(np.float32) * 0.1
        spectrum = np.fft.rfft(wide)
        spectrum[np.fft.rfftfreq(16000, 1 / 16000) > 3900] = 0
        narrow = np.fft.irfft(spectrum, 16000).astype(np.float32)
        self.assertFalse(sphinx.narrowband(wide))
        self.assertTrue(sphinx.narrowband(narrow))
        self.assertFalse(sphinx.narrowband(np.zeros(16000, dtype=np.float32)), "silence is not narrowband speech")

    def test_fill_band_is_deterministic_and_above_4k(self):
        rng = np.random.default_rng(4)
        x = rng.standard_normal(16000).astype(np.float32) * 0.1
        a, b = sphinx.fill_band(x, 0.03), sphinx.fill_band(x, 0.03)
        np.testing.assert_array_equal(a, b)
        added = np.fft.rfft((a - x).astype(np.float64))
        freqs = np.fft.rfftfreq(16000, 1 / 16000)
        power = np.abs(added) ** 2
        self.assertLess(power[freqs < 3900].sum(), 1e-6 * power.sum())
        self.assertAlmostEqual(np.sqrt(np.mean((a - x) ** 2)) / np.sqrt(np.mean(x**2)), 0.03, delta=0.005)

    def test_speech_span(self):
        rng = np.random.default_rng(5)
        quiet = (rng.standard_normal(16000) * 1e-4).astype(np.float32)
        tone = (0.3 * np.sin(np.arange(16000) * 0.2)).astype(np.float32)
        x = np.concatenate([quiet, tone, quiet])
        lo, hi = sphinx.speech_span(x, 0, len(x), 4000)
        self.assertAlmostEqual(lo, 16000 - 4000, delta=160)
        self.assertAlmostEqual(hi, 32000 + 4000, delta=160)
        self.assertEqual(sphinx.speech_span(x, 100, 2000, 0), (100, 2000), "too short to tell: all of it")


@unittest.skipUnless(HAVE_SPHINX and shutil.which("ffmpeg"), "needs pocketsphinx (make deps) and ffmpeg")
class SphinxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.clips = [flite(s) for s in SENTENCES]
        cls.sphinx = sphinx.SphinxModel()

    def test_recognises_and_times_words(self):
        for text, x in zip(SENTENCES, self.clips):
            h = self.sphinx.recognize(x, True)
            self.assertEqual(h.text, text)
            words = h.words
            self.assertEqual([w.word for w in words], text.split())
            dur = x.size / 16000
            for prev, w in zip([None, *words], words):
                self.assertTrue(0 <= w.start <= w.end <= dur + 0.01, w)
                if prev:
                    self.assertGreaterEqual(w.start, prev.end - 1e-6)

    def test_requests_are_independent_and_utterances_timed_from_the_request(self):
        """The same two sentences with a long pause between, sent again with
        other clips in between, get identical words and times; the second
        sentence's words are timed from the request's start, not from their
        utterance's."""
        pause = np.zeros(16000, dtype=np.float32)
        x = np.concatenate([self.clips[0], pause, self.clips[1]])
        self.assertEqual(len(sphinx.pause_cuts(x)), 1)
        first = self.sphinx.recognize(x, True)
        self.assertEqual(first.text, " ".join(SENTENCES))
        second_start = (self.clips[0].size + pause.size) / 16000
        alone = self.sphinx.recognize(self.clips[1], True).words
        later = first.words[len(SENTENCES[0].split()):]
        for a, b in zip(alone, later):
            self.assertAlmostEqual(b.start, a.start + second_start, delta=0.6)
        for other in self.clips:
            self.sphinx.recognize(other, True)
            again = self.sphinx.recognize(x, True)
            self.assertEqual(again.text, first.text)
            self.assertEqual(again.words, first.words)

    def test_no_word_over_room_tone_and_times_kept(self):
        """A second of faint room tone before speech: no word is invented in
        it, and the words keep the times they have in the request."""
        rng = np.random.default_rng(6)
        x = self.clips[0]
        tone = (rng.standard_normal(16000) * 10 ** (-50 / 20)).astype(np.float32)
        lead = np.concatenate([tone, x + (rng.standard_normal(len(x)) * 10 ** (-50 / 20)).astype(np.float32)])
        h = self.sphinx.recognize(lead, True)
        words = h.words
        self.assertEqual(h.text, SENTENCES[0])
        self.assertGreaterEqual(words[0].start, 0.9, words[0])
        alone = self.sphinx.recognize(x, True).words
        for a, b in zip(alone, words):
            self.assertAlmostEqual(b.start, a.start + 1, delta=0.25)

    def test_telephone_band(self):
        """The sentences at 8 kHz, band-limited to 300-3,400 Hz and G.711
        mu-law (ffmpeg), back at 16 kHz: recognised with at most one word
        wrong each (all but the first were lost without the band fill)."""
        with tempfile.TemporaryDirectory() as d:
            for i, text in enumerate(SENTENCES):
                src, enc, dec = (os.path.join(d, f"{i}{k}.wav") for k in ("s", "e", "d"))
                with wave.open(src, "wb") as w:
                    w.setnchannels(1)
                    w.setsampwidth(2)
                    w.setframerate(16000)
                    w.writeframes((self.clips[i] * 32767).astype(np.int16).tobytes())
                subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", src, "-af", "highpass=f=300,lowpass=f=3400",
                                "-ar", "8000", "-c:a", "pcm_mulaw", enc], check=True)
                subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", enc, "-ar", "16000", "-c:a", "pcm_s16le", dec], check=True)
                with wave.open(dec) as w:
                    y = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
                self.assertTrue(sphinx.narrowband(y))
                y *= 0.1 / np.sqrt(np.mean(y.astype(np.float64) ** 2))
                got = self.sphinx.recognize(y, False).text.split()
                ref = text.split()
                wrong = sum(a != b for a, b in zip(got, ref)) + abs(len(got) - len(ref))
                self.assertLessEqual(wrong, 1, f"{text!r} heard as {' '.join(got)!r}")

    def test_initial_cepstral_mean(self):
        """The model's own initial cepstral mean is the default: the wheel's
        feat.params lacks it, and 40,3,-1 mishears short clips."""
        self.assertTrue(self.sphinx.cmn_init.startswith("41"), self.sphinx.cmn_init)

    def test_batch_through_the_contract(self):
        m = model.TritonPythonModel()
        m.initialize({"model_config": '{"max_batch_size": 8, "parameters": {"engine": {"string_value": "pocketsphinx"}}}',
                      "model_instance_kind": "CPU"})
        out = m.execute([pb.Request(audio=c.reshape(1, -1)) for c in self.clips])
        self.assertEqual([r.outputs["text"][0, 0].decode() for r in out], SENTENCES)
        self.assertEqual([int(r.outputs["num_words"][0, 0]) for r in out], [len(s.split()) for s in SENTENCES])


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(HAVE_SPHINX, "needs pocketsphinx (make deps)")
class NothingToHearTest(unittest.TestCase):
    """Inputs in which the decoder finds nothing (pocketsphinx then gives
    no hypothesis and no segments, as None) transcribe as empty text with
    no words: never an error, which the worker would take for a fault."""

    def test_nothing_to_hear(self):
        m = sphinx.SphinxModel()
        rng = np.random.default_rng(3)
        cases = {
            "one sample": np.zeros(1, np.float32),
            "1000 samples": np.zeros(1000, np.float32),
            "1000 samples of noise": (0.1 * rng.standard_normal(1000)).astype(np.float32),
            "5 s of silence": np.zeros(5 * 16000, np.float32),
        }
        for name, x in cases.items():
            with self.subTest(name):
                h = m.recognize(x, True)
                self.assertEqual(h.text, "")
                self.assertEqual(h.words, ())

    def test_loud_noise_does_not_fail(self):
        m = sphinx.SphinxModel()
        x = (0.3 * np.random.default_rng(1).standard_normal(7 * 16000)).astype(np.float32)
        h = m.recognize(x, True)
        for w in h.words:
            self.assertTrue(0 <= w.start <= w.end <= 7.0 + 1e-6, w)
