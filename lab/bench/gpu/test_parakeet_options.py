"""Word confidence and phrase boosting of the parakeet engine
(fleetscribe_asr/parakeet.py, model parameters word_confidence and
phrase_boosting) on NeMo's own TDT model, built tiny with random weights
(nemo_anchor.build): every word of a transcript gets a confidence in 0-1
with it on, none with it off, and an unknown method refuses to load; the
engine's batched confidence is NeMo's own, token for token and word for
word; a
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
from fleetscribe_asr.confidence import METHODS, WordConfidence  # noqa: E402
from fleetscribe_asr.parakeet import NemoEngine  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# NeMo steps the prediction network a token at a time inside the decoder,
# the batched pass runs it over whole rows: the same sums, in another order
# on a GPU's kernels (cuDNN's LSTM), exact on a CPU's.
ATOL = 2e-3 if DEVICE == "cuda" else 1e-4


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


class BatchedConfidenceTest(unittest.TestCase):
    """The engine's word confidence (fleetscribe_asr/confidence.py: one
    batched pass after decoding) is NeMo's own (confidence_cfg, computed
    frame by frame inside the decoder, blanks left out, a word its lowest
    token), token for token and word for word, for every method."""

    @classmethod
    def setUpClass(cls):
        from omegaconf import open_dict

        cls.model = nemo_anchor.build(DEVICE, size="tiny", seed=5)
        # Random weights give every label about the same probability, so
        # every token the same confidence; a joint with louder outputs gives
        # tokens of every confidence, which is what the test needs.
        with torch.no_grad():
            out = cls.model.joint.joint_net[-1]
            out.weight.mul_(100.0)
        g = np.random.default_rng(11)
        lengths = (48000, 80000, 16000, 64000)
        batch = torch.zeros(len(lengths), max(lengths))
        for i, n in enumerate(lengths):
            batch[i, :n] = torch.from_numpy(g.standard_normal(n).astype(np.float32) * 0.3)
        with torch.inference_mode():
            cls.enc, cls.enc_len = cls.model.forward(input_signal=batch.to(DEVICE),
                                                     input_signal_length=torch.tensor(lengths, device=DEVICE))
        cls.hyps = {}
        for method, cfg_method in METHODS.items():
            cfg = cls.model.cfg.decoding
            with open_dict(cfg):
                cfg.strategy = "greedy_batch"
                cfg.compute_timestamps = True
                cfg.confidence_cfg = {"preserve_word_confidence": True, "preserve_token_confidence": True,
                                      "exclude_blank": True, "aggregation": "min", "method_cfg": cfg_method}
            cls.model.change_decoding_strategy(cfg, verbose=False)
            with torch.inference_mode():
                cls.hyps[method] = cls.model.decoding.rnnt_decoder_predictions_tensor(cls.enc, cls.enc_len, return_hypotheses=True)

    def test_tokens_and_words_as_nemo_gives_them(self):
        for method in METHODS:
            with self.subTest(method), torch.inference_mode():
                hyps = self.hyps[method]
                conf = WordConfidence(self.model, method)
                tokens = conf.tokens(self.enc, hyps)
                words = conf(self.enc, hyps)
                spread = np.concatenate([np.asarray(h.token_confidence, dtype=np.float64) for h in hyps])
                self.assertGreater(len(spread), 20, "too few tokens: the test would prove little")
                self.assertGreater(spread.std(), 0.01, "every token as sure as the next: the test would prove little")
                self.assertGreater(sum(len(h.word_confidence) for h in hyps), 5)
                for i, (h, t, w) in enumerate(zip(hyps, tokens, words, strict=True)):
                    np.testing.assert_allclose(t, np.asarray(h.token_confidence, dtype=np.float32), atol=ATOL,
                                               err_msg=f"row {i}'s tokens")
                    np.testing.assert_allclose(w, np.asarray(h.word_confidence, dtype=np.float32), atol=ATOL,
                                               err_msg=f"row {i}'s words")
                    self.assertEqual(len(w), len(h.timestamp["word"]), f"row {i}: a confidence for each word of the transcript")

    def test_words_split_as_nemo_splits_them(self):
        """Made-up token sequences heavy in what splits words oddly (the
        bare word marker, unknown pieces, word-initial pieces, in runs and
        at either end) aggregate as NeMo's sentencepiece aggregation does."""
        conf = WordConfidence(self.model, "max_prob")
        dec, tokenizer = self.model.decoding, self.model.tokenizer
        pieces = [dec.decode_ids_to_tokens([i])[0] for i in range(conf.blank)]
        marker, unknown = pieces.index("\u2581"), pieces.index("<unk>")
        starts = [i for i in range(conf.blank) if conf.starts[i] and i not in (marker, unknown)]
        inner = [i for i in range(conf.blank) if not conf.starts[i]]
        self.assertTrue(starts and inner, "the tokenizer has no word-initial or no inner pieces")
        g = np.random.default_rng(7)
        for trial in range(300):
            n = int(g.integers(1, 14))
            kinds = g.choice(4, size=n, p=[0.3, 0.3, 0.2, 0.2])
            ids = np.array([marker if k == 0 else unknown if k == 1 else int(g.choice(starts if k == 2 else inner))
                            for k in kinds], dtype=np.int64)
            c = g.random(n).astype(np.float32)
            words = tokenizer.ids_to_text(ids.tolist()).split()
            want = dec._aggregate_token_confidence_subwords_sentencepiece(words, c.tolist(), ids.tolist())
            got = conf.words(ids, c)
            self.assertEqual(len(got), len(want), f"trial {trial}: {[pieces[i] for i in ids]}")
            np.testing.assert_allclose(got, want, atol=1e-7, err_msg=f"trial {trial}: {[pieces[i] for i in ids]}")


class CompiledServingTest(unittest.TestCase):
    @unittest.skipUnless(DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1",
                         "compiles on a GPU (or FLEETSCRIBE_COMPILE_CPU=1)")
    def test_serving_compiles_nothing_after_warm_up(self):
        # The compiled encoder's warm-up (the serving path, every shape)
        # leaves nothing to compile at a request: batches of 1 to 5 rows of
        # other lengths, in both row_parts forms, compile no new graph (one
        # compiled at a request stalls its batch while it compiles; the
        # diarize model's compiled some, docs/speakers.md).
        import tempfile

        from torch._dynamo.utils import counters

        model = nemo_anchor.build(DEVICE, size="tiny")
        g = np.random.default_rng(4)
        for parts in EncoderOptions.ROW_PARTS:
            with tempfile.TemporaryDirectory() as cache:
                eng = NemoEngine(model, DEVICE, "fp32", EncoderOptions(mode="compiled", lengths=[32000], rows=[2, 4], cache_dir=cache,
                                                                       row_parts=parts))
                eng.warm(2.0, 4)
                self.assertEqual(eng.describe()[0], "compiled")
                graphs = counters["stats"]["unique_graphs"]
                for rows in range(1, 6):
                    audio = [g.standard_normal(int(16000 * (1 + r * 0.2))).astype(np.float32) * 0.3 for r in range(rows)]
                    eng.transcribe(audio, rows, True, False)
                self.assertEqual(counters["stats"]["unique_graphs"] - graphs, 0, f"graphs compiled while serving (row_parts={parts})")


class FlexAttentionTest(unittest.TestCase):
    @unittest.skipUnless(DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1",
                         "compiles on a GPU (or FLEETSCRIBE_COMPILE_CPU=1)")
    def test_compiled_encoder_with_flex_encodes_as_sdpa(self):
        # encoder_attention=flex on NeMo's own conformer (a model of the
        # same weights): every relative-position attention swapped, the
        # compiled encoder's warm-up generating FlexAttention kernels, its
        # output (a padded row among them) NeMo's through SDPA to fp32's
        # precision, and nothing compiled at requests after the warm-up.
        import tempfile

        from torch._dynamo.utils import counters
        from torch._inductor.utils import run_and_get_code

        ref_model, model = nemo_anchor.build(DEVICE, size="tiny"), nemo_anchor.build(DEVICE, size="tiny")
        model.load_state_dict(ref_model.state_dict())
        audio = [np.random.default_rng(6).standard_normal(n).astype(np.float32) * 0.3 for n in (32000, 22400)]
        with torch.inference_mode():
            ref, ref_n = NemoEngine(ref_model, DEVICE, "fp32", EncoderOptions()).encode(audio)
        with tempfile.TemporaryDirectory() as cache:
            eng = NemoEngine(model, DEVICE, "fp32", EncoderOptions(mode="compiled", lengths=[32000], rows=[2], cache_dir=cache,
                                                                   attention="flex"))
            self.assertEqual(eng.flex, len(model.encoder.layers))
            self.assertIn("FlexAttention in %d where compiled" % eng.flex, eng.config)
            with torch._inductor.config.patch(fx_graph_cache=False):
                _, code = run_and_get_code(eng.warm, 2.0, 2)
            self.assertTrue(any("flex_attention" in c for c in code), "no FlexAttention kernel generated")
            graphs = counters["stats"]["unique_graphs"]
            with torch.inference_mode():
                got, got_n = eng.encode(audio)
            self.assertEqual(counters["stats"]["unique_graphs"] - graphs, 0, "graphs compiled while serving")
        self.assertEqual(got_n.tolist(), ref_n.tolist())
        tol = 1e-2 if DEVICE == "cuda" else 1e-4  # TF32 on a GPU
        for r, n in enumerate(ref_n.tolist()):
            self.assertLess(float((got[r, :, :n] - ref[r, :, :n]).abs().max()), tol * max(1.0, float(ref.abs().max())))


class PointwiseConvsTest(unittest.TestCase):
    def test_matrix_multiplies_encode_as_the_convolutions(self):
        # pointwise_convs=matmul on NeMo's own conformer (a model of the
        # same weights: the change is the model's): two a layer replaced,
        # the parameters' names and shapes kept (a checkpoint loads either
        # way), the encoder's output the same to fp32's precision.
        conv, mm = nemo_anchor.build(DEVICE, size="tiny"), nemo_anchor.build(DEVICE, size="tiny")
        mm.load_state_dict(conv.state_dict())
        keys = {k: v.shape for k, v in conv.state_dict().items()}
        audio = [np.random.default_rng(5).standard_normal(n).astype(np.float32) * 0.3 for n in (48000, 32000)]
        ref, ref_n = NemoEngine(conv, DEVICE, "fp32", EncoderOptions()).encode(audio)
        eng = NemoEngine(mm, DEVICE, "fp32", EncoderOptions(pointwise_convs="matmul"))
        self.assertEqual(eng.pointwise, 2 * len(mm.encoder.layers))
        self.assertEqual({k: v.shape for k, v in mm.state_dict().items()}, keys)
        got, got_n = eng.encode(audio)
        self.assertEqual(got_n.tolist(), ref_n.tolist())
        # (cuDNN's convolutions take TF32 on a GPU by default, the matrix multiplies full fp32)
        tol = 1e-2 if DEVICE == "cuda" else 1e-4
        self.assertLess(float((got - ref).abs().max()), tol * max(1.0, float(ref.abs().max())))

    def test_subsampling_by_taps_compiled_as_the_convolutions(self):
        # subsampling_convs=taps on NeMo's own subsampling: its five
        # convolutions covered, eagerly the module as NeMo wrote it, and
        # compiled (on a GPU; on a CPU with FLEETSCRIBE_COMPILE_CPU=1) the
        # same output and lengths.
        from fleetscribe_asr import convs

        model = nemo_anchor.build(DEVICE, size="tiny")
        pre = model.encoder.pre_encode
        x = torch.randn(3, 700, model.cfg.preprocessor.features, device=DEVICE)
        n = torch.tensor([700, 433, 90], device=DEVICE)
        with torch.inference_mode():
            ref, ref_n = pre(x=x, lengths=n)
            self.assertEqual(convs.by_taps(pre), 5)
            eager, _ = pre(x=x, lengths=n)
            self.assertTrue(torch.equal(eager, ref))
            if DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1":
                got, got_n = torch.compile(pre.forward, dynamic=False)(x=x, lengths=n)
                self.assertEqual(got_n.tolist(), ref_n.tolist())
                tol = 1e-2 if DEVICE == "cuda" else 1e-4  # cuDNN's convolutions in TF32 on a GPU
                self.assertLess(float((got - ref).abs().max()), tol * max(1.0, float(ref.abs().max())))

    def test_fp8_linears_compiled_near_the_models_own(self):
        # linear_precision=fp8 on NeMo's own conformer: every linear layer
        # of the layers made FP8 (the checkpoint's keys unchanged), eagerly
        # the model's numbers, and one layer compiled within FP8's rounding
        # of the same layer run eagerly (on a GPU; on a CPU with
        # FLEETSCRIBE_COMPILE_CPU=1).
        from fleetscribe_asr import compiled, fp8

        model = nemo_anchor.build(DEVICE, size="tiny")
        keys = list(model.state_dict())
        layer = model.encoder.layers[0]
        x = torch.randn(2, 50, layer.feed_forward1.linear1.in_features, device=DEVICE)
        pad = torch.zeros(2, 50, dtype=torch.bool, device=DEVICE)
        att = torch.zeros(2, 50, 50, dtype=torch.bool, device=DEVICE)
        pos = model.encoder.pos_enc(x)[1] if hasattr(model.encoder, "pos_enc") else None
        with torch.inference_mode():
            ref = layer(x, att_mask=att, pos_emb=pos, pad_mask=pad)
            n = compiled.linear_form(model.encoder, "fp8", DEVICE)
            self.assertGreaterEqual(n, 6 * len(model.encoder.layers), "feed-forward (4) and attention (q, k, v, out, pos) layers")
            self.assertEqual(list(model.state_dict()), keys)
            self.assertIsInstance(layer.feed_forward1.linear1, fp8.Fp8Linear)
            self.assertTrue(torch.equal(layer(x, att_mask=att, pos_emb=pos, pad_mask=pad), ref), "eagerly, the model's own")
            if DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1":
                got = torch.compile(layer.forward, dynamic=False)(x, att_mask=att, pos_emb=pos, pad_mask=pad)
                rel = float((got - ref).abs().mean() / ref.abs().mean())
                self.assertGreater(rel, 0.0, "the compiled layer ran its linear layers in FP8")
                self.assertLess(rel, 0.05)


if __name__ == "__main__":
    unittest.main()
