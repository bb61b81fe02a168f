"""Word confidence of the parakeet engine (fleetscribe_asr/parakeet.py,
model parameter word_confidence): NeMo's confidence estimation on NeMo's
own TDT model, built tiny with random weights (nemo_anchor.build): every
word of a transcript gets a confidence in 0-1 with it on, none with it off,
and an unknown method refuses to load. Needs NeMo, so it runs where NeMo
is (run.sh's sftest step, or any host with NeMo installed; on CPU in a few
seconds); make test does not run it.

    cd lab/bench/gpu && python3 -m unittest -v test_confidence
"""
import os
import sys
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "deploy", "triton", "models", "asr", "1"))

import nemo_anchor  # noqa: E402
from fleetscribe_asr.compiled import EncoderOptions  # noqa: E402
from fleetscribe_asr.parakeet import NemoEngine  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class ConfidenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = nemo_anchor.build(DEVICE, size="tiny")
        g = np.random.default_rng(3)
        cls.audio = [g.standard_normal(n).astype(np.float32) * 0.3 for n in (48000, 64000, 32000)]

    def words(self, confidence):
        eng = NemoEngine(self.model, DEVICE, "fp32", EncoderOptions(), confidence=confidence)
        hyps = eng.transcribe(self.audio, len(self.audio), True, False)
        return [w for h in hyps for w in h.timestamp["word"]]

    def test_every_word_has_a_confidence_with_it_on(self):
        for method in ("max_prob", "entropy"):
            with self.subTest(method):
                words = self.words(method)
                self.assertGreater(len(words), 0, "the tiny model emitted no words: the test would prove nothing")
                for w in words:
                    self.assertIn("confidence", w, w)
                    self.assertTrue(0.0 <= w["confidence"] <= 1.0, w)

    def test_none_with_it_off_and_unknown_methods_refused(self):
        self.assertTrue(all("confidence" not in w for w in self.words("off")))
        with self.assertRaisesRegex(ValueError, "word_confidence='maxprob'"):
            NemoEngine(self.model, DEVICE, "fp32", EncoderOptions(), confidence="maxprob")


if __name__ == "__main__":
    unittest.main()
