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

import test_model  # noqa: F401 - installs the stand-in triton_python_backend_utils

model = test_model.model

try:
    import pocketsphinx  # noqa: F401
    HAVE_SPHINX = True
except ImportError:  # pragma: no cover
    HAVE_SPHINX = False

SENTENCES = ["please schedule a follow up appointment in two weeks", "she has no known allergies to any medication"]


def flite(text, voice="rms"):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.wav")
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", f"flite=text='{text}':voice={voice}",
                        "-ar", "16000", "-ac", "1", path], check=True)
        with wave.open(path) as w:
            return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768


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
        cuts = model.pause_cuts(np.concatenate(parts))
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
        self.assertEqual(model.pause_cuts(np.concatenate(parts)), [])
        self.assertEqual(model.pause_cuts(np.zeros(16000 * 5, dtype=np.float32)), [])


@unittest.skipUnless(HAVE_SPHINX and shutil.which("ffmpeg"), "needs pocketsphinx (make deps) and ffmpeg")
class SphinxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.clips = [flite(s) for s in SENTENCES]
        cls.sphinx = model.SphinxModel({})

    def test_recognises_and_times_words(self):
        for text, x in zip(SENTENCES, self.clips):
            h = self.sphinx.recognize(x, True)
            self.assertEqual(h.text, text)
            words = h.timestamp["word"]
            self.assertEqual([w["word"] for w in words], text.split())
            dur = x.size / 16000
            for prev, w in zip([None] + words, words):
                self.assertTrue(0 <= w["start"] <= w["end"] <= dur + 0.01, w)
                if prev:
                    self.assertGreaterEqual(w["start"], prev["end"] - 1e-6)

    def test_requests_are_independent_and_utterances_timed_from_the_request(self):
        """The same two sentences with a long pause between, sent again with
        other clips in between, get identical words and times; the second
        sentence's words are timed from the request's start, not from their
        utterance's."""
        pause = np.zeros(16000, dtype=np.float32)
        x = np.concatenate([self.clips[0], pause, self.clips[1]])
        self.assertEqual(len(model.pause_cuts(x)), 1)
        first = self.sphinx.recognize(x, True)
        self.assertEqual(first.text, " ".join(SENTENCES))
        second_start = (self.clips[0].size + pause.size) / 16000
        alone = self.sphinx.recognize(self.clips[1], True).timestamp["word"]
        later = first.timestamp["word"][len(SENTENCES[0].split()):]
        for a, b in zip(alone, later):
            self.assertAlmostEqual(b["start"], a["start"] + second_start, delta=0.6)
        for other in self.clips:
            self.sphinx.recognize(other, True)
            again = self.sphinx.recognize(x, True)
            self.assertEqual(again.text, first.text)
            self.assertEqual(again.timestamp["word"], first.timestamp["word"])

    def test_initial_cepstral_mean(self):
        """The model's own initial cepstral mean is the default: the wheel's
        feat.params lacks it, and 40,3,-1 mishears short clips."""
        self.assertTrue(self.sphinx.cmn_init.startswith("41"), self.sphinx.cmn_init)

    def test_batch_through_the_contract(self):
        m = model.TritonPythonModel()
        m.initialize({"model_config": '{"max_batch_size": 8, "parameters": {"engine": {"string_value": "pocketsphinx"}}}',
                      "model_instance_kind": "CPU"})
        pb = test_model.pb
        out = m.execute([pb.Request(audio=c.reshape(1, -1)) for c in self.clips])
        self.assertEqual([r.outputs["text"][0, 0].decode() for r in out], SENTENCES)
        self.assertEqual([int(r.outputs["num_words"][0, 0]) for r in out], [len(s.split()) for s in SENTENCES])


if __name__ == "__main__":
    unittest.main()
