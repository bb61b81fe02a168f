"""Word confidence and phrase boosting of the parakeet engine
(fleetscribe_asr/parakeet.py, model parameters word_confidence and
phrase_boosting) on NeMo's own TDT model, built tiny with random weights
(nemo_anchor.build): every word of a transcript gets a confidence in 0-1
with it on, none with it off, and an unknown method refuses to load; a
row's vocabulary changes that row's decoding and no other's, each
vocabulary's boosting tree is built once, and phrases the tokenizer cannot
spell are refused. Needs NeMo, so it runs where NeMo
is (run.sh's sftest step, or any host with NeMo installed; on CPU in a few
seconds); make test does not run it.

    cd lab/bench/gpu && python3 -m unittest -v test_parakeet_options
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
        return [w for h in hyps for w in h.words]

    def test_every_word_has_a_confidence_with_it_on(self):
        for method in ("max_prob", "entropy"):
            with self.subTest(method):
                words = self.words(method)
                self.assertGreater(len(words), 0, "the tiny model emitted no words: the test would prove nothing")
                for w in words:
                    self.assertIsNotNone(w.confidence, w)
                    self.assertTrue(0.0 <= w.confidence <= 1.0, w)

    def test_each_row_boosted_by_its_own_vocabulary(self):
        eng = NemoEngine(self.model, DEVICE, "fp32", EncoderOptions(), boosting=True)
        plain = [h.text for h in eng.transcribe(self.audio, 3, True, False)]
        vocab = ("qux", "zzyzx wob")
        eng.check_vocabulary(vocab)
        boosted = [h.text for h in eng.transcribe(self.audio, 3, True, False, vocabularies=[vocab, None, vocab])]
        self.assertNotEqual(boosted[0], plain[0], "the vocabulary changed nothing: the test would prove nothing")
        self.assertEqual(boosted[1], plain[1], "a row without a vocabulary decoded differently")
        again = [h.text for h in eng.transcribe(self.audio, 3, True, False, vocabularies=[vocab, None, None])]
        self.assertEqual(again[:2], boosted[:2])
        self.assertEqual(again[2], plain[2])
        self.assertEqual(len(eng.trees), 1, "a vocabulary's tree is built once")
        # At most MAX_TREES kept: the least recently used goes, and a row of
        # it later gets its tree again.
        eng.MAX_TREES = 2
        eng.transcribe(self.audio[:1], 1, True, False, vocabularies=[("wob",)])
        eng.transcribe(self.audio[:1], 1, True, False, vocabularies=[("zzyzx",)])
        self.assertEqual(len(eng.trees), 2)
        back = [h.text for h in eng.transcribe(self.audio, 3, True, False, vocabularies=[vocab, None, vocab])]
        self.assertEqual(back, boosted, "a vocabulary whose tree was evicted decodes as before once rebuilt")
        with self.assertRaisesRegex(ValueError, "cannot spell"):
            eng.check_vocabulary(("fine", "caf\u00e9 \u2603"))
        off = NemoEngine(self.model, DEVICE, "fp32", EncoderOptions())
        with self.assertRaisesRegex(ValueError, "phrase boosting is off"):
            off.check_vocabulary(vocab)

    def test_none_with_it_off_and_unknown_methods_refused(self):
        self.assertTrue(all(w.confidence is None for w in self.words("off")))
        with self.assertRaisesRegex(ValueError, "word_confidence='maxprob'"):
            NemoEngine(self.model, DEVICE, "fp32", EncoderOptions(), confidence="maxprob")


if __name__ == "__main__":
    unittest.main()
