"""Tests of model.py's whisper engine (deploy/triton/cpu-whisper), with the
faster-whisper and model wheels of the Triton environment (.triton/venv;
make test runs them with its Python). Speech comes from ffmpeg's flite
voices."""

import shutil
import unittest

import numpy as np

from backend_stub import flite  # installs the stand-in triton_python_backend_utils, loads model.py

from fleetscribe_asr import options, whisper  # noqa: E402 - beside model.py, on the path backend_stub set

try:
    import faster_whisper  # noqa: F401
    HAVE_WHISPER = True
except ImportError:  # pragma: no cover
    HAVE_WHISPER = False


def edits(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def words(text):
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower()).split()


@unittest.skipUnless(HAVE_WHISPER and shutil.which("ffmpeg"), "needs faster-whisper (make deps) and ffmpeg")
class WhisperTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = whisper.WhisperModel()

    def test_speech_in_order_inside_the_clip(self):
        ref = "the heart rate is normal and the lungs are clear".split()
        for voice, most in (("rms", 0), ("slt", 1)):  # slt's "heart" is heard as "hard"
            with self.subTest(voice):
                x = flite(" ".join(ref), voice)
                h = self.m.recognize(x, True)
                self.assertLessEqual(edits(ref, words(h.text)), most, h.text)
                self.assertEqual([words(w.word)[0] for w in h.words], words(h.text))
                last = 0.0
                for w in h.words:
                    self.assertTrue(last <= w.start <= w.end <= x.size / 16000 + 1e-6, w)
                    self.assertTrue(0 < w.confidence <= 1, w)
                    last = w.end

    def test_beam_width_from_the_parameters(self):
        self.assertEqual(self.m.beam, 1, "greedy by default")
        x = flite("the heart rate is normal", "rms")
        wide = whisper.WhisperModel(options.WhisperOptions(whisper_beam=5))
        asked = []
        decode = wide.model.transcribe
        wide.model.transcribe = lambda *a, **kw: asked.append(kw["beam_size"]) or decode(*a, **kw)
        self.assertEqual(edits("the heart rate is normal".split(), words(wide.recognize(x, False).text)), 0)
        self.assertEqual(asked, [5], "the beam reaches faster-whisper")
        with self.assertRaises(ValueError):
            whisper.WhisperModel(options.WhisperOptions(whisper_beam=0))

    def test_no_words_over_silence_room_tone_or_noise(self):
        rng = np.random.default_rng(5)
        t = np.arange(20 * 16000) / 16000
        cases = {
            "one sample": np.zeros(1, np.float32),
            "1000 samples": np.zeros(1000, np.float32),
            "10 s of silence": np.zeros(10 * 16000, np.float32),
            "10 s of room tone": (0.003 * rng.standard_normal(10 * 16000)).astype(np.float32),
            "20 s of music-like tones": (0.2 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 0.5 * t))).astype(np.float32),
        }
        for name, x in cases.items():
            with self.subTest(name):
                h = self.m.recognize(x, True)
                self.assertEqual(h.text, "", name)
                self.assertEqual(h.words, ())

    def test_silent_lead_in_invents_nothing(self):
        speech = flite("please schedule a follow up appointment in two weeks")
        x = np.concatenate([(0.002 * np.random.default_rng(2).standard_normal(8 * 16000)).astype(np.float32), speech])
        h = self.m.recognize(x, True)
        self.assertEqual(words(h.text), "please schedule a follow up appointment in two weeks".split())
        self.assertGreaterEqual(h.words[0].start, 7.5, "a word placed in the silent lead-in")

    def test_loops_are_dropped(self):
        self.assertGreater(whisper.compression_ratio("the the the the the the the the the the the the the the"), 2.4)
        self.assertLess(whisper.compression_ratio("the heart rate is normal and the lungs are clear"), 2.4)


class WhisperVocabularyTest(unittest.TestCase):
    def test_hotwords_are_the_phrases_in_order(self):
        self.assertEqual(whisper.WhisperModel.hotwords(("metoprolol", "Dr. Okafor")), "Glossary: metoprolol, Dr. Okafor.")
        self.assertIsNone(whisper.WhisperModel.hotwords(None))

    @unittest.skipUnless(HAVE_WHISPER, "needs faster-whisper (make deps)")
    def test_each_row_is_decoded_with_its_own_vocabulary(self):
        m = whisper.WhisperModel()
        seen = []
        real = m.model.transcribe

        def spy(samples, **kw):
            seen.append(kw.get("hotwords"))
            return real(samples, **kw)

        m.model.transcribe = spy
        x = np.zeros(16000, np.float32)
        m.transcribe([x, x], 2, True, False, vocabularies=[("metoprolol",), None])
        self.assertEqual(seen, ["Glossary: metoprolol.", None])
