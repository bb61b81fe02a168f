"""Tests of the GPU diarizer (engine sortformer of the diarize model,
deploy/triton/models/asr/1/fleetscribe_asr/sortformer.py) on NeMo's own
SortformerEncLabelModel, built tiny (two layers of each, random weights)
from the 4spk-v2 streaming configuration of sortformer_study.py. They need
NeMo (pinned: lab/bench/gpu/nemo-requirements.txt), so they run on the GPU
machine (run.sh's test step) and anywhere NeMo is installed, on its GPU or
on CPU; make test (no NeMo) does not run them.

    cd lab/bench/gpu && python3 -m unittest -v test_sortformer
"""
import contextlib
import json
import math
import os
import sys
import tempfile
import types
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "deploy", "triton", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "deploy", "triton", "models", "asr", "1"))

import backend_stub  # noqa: E402,F401 - installs the stand-in triton_python_backend_utils
from fleetscribe_asr import sortformer  # noqa: E402
from fleetscribe_asr.compiled import PinnedRows  # noqa: E402
from fleetscribe_asr.diarize import Ask, StateError  # noqa: E402
from sortformer_study import POINTS, check_update, config, copy_state  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CHUNK_S = 8.0  # a small operating point keeps the CPU runs short


def tiny_model():
    from nemo.collections.asr.models import SortformerEncLabelModel

    torch.manual_seed(0)
    return SortformerEncLabelModel(cfg=config(POINTS["issue-27s"], tiny=True)).to(DEVICE).eval()


MODEL = None


def engine(model=None, **params):
    """An eager engine of the tiny model (one built once and shared, or model)."""
    global MODEL
    if MODEL is None:
        MODEL = tiny_model()
    opts = sortformer.SortformerOptions.from_params({"engine": "sortformer", "chunk_seconds": str(CHUNK_S), "fifo_frames": "20",
                                                     "cache_frames": "40", "update_period": "60", "encoder": "eager",
                                                     # this process's CUDA context is the tests', not a partition's: left as it is
                                                     "cuda_sync": "auto", **params})
    return sortformer.SortformerDiarizer(opts, DEVICE, model=model if model is not None else MODEL)


def speech(seconds, seed):
    """Bursts of noise with pauses, a loudness of their own."""
    g = np.random.default_rng(seed)
    n = int(seconds * 16000)
    x = g.standard_normal(n).astype(np.float32) * 0.05
    env = np.repeat((g.random(n // 16000 + 1) > 0.3).astype(np.float32), 16000)[:n]
    return x * env * (0.2 + g.random())


def walk(d, recordings, chunk_s=CHUNK_S, together=True):
    """Serves each recording chunk by chunk (several recordings in one batch
    where together), the state going out and back as bytes; returns each
    recording's states and turns, chunk by chunk."""
    cut = int(chunk_s * 16000)
    pieces = [[x[i:i + cut] for i in range(0, len(x), cut)] for x in recordings]
    raw = [b""] * len(recordings)
    states, turns = [[] for _ in recordings], [[] for _ in recordings]
    for step in range(max(len(p) for p in pieces)):
        live = [r for r in range(len(recordings)) if step < len(pieces[r])]
        groups = [live] if together else [[r] for r in live]
        for group in groups:
            out = d.serve({r: Ask(pieces[r][step], raw[r]) for r in group})
            for r in group:
                reply = out[r]
                if not isinstance(reply, sortformer.Reply):
                    raise reply
                raw[r] = reply.state
                states[r].append(reply.state)
                turns[r].append(reply.turns)
    return states, turns


def nemo_streaming(d, rec, request_s):
    """rec through NeMo's own streaming step (forward_streaming_step,
    asynchronous), in requests of request_s: each request's audio scaled and
    its features made as the engine makes them, then NeMo's steps over
    them, its state kept on the device between requests. After each
    request: NeMo's state, and the request's turns from NeMo's chunk
    probabilities (chunk_turns at the engine's settings)."""
    m, sm, o = d.model, d.sm, d.opts
    m.async_streaming = True
    state = sm.init_streaming_state(batch_size=1, async_streaming=True, device=DEVICE)
    cut, out = int(request_s * 16000), []
    with torch.inference_mode():
        for c in [rec[j:j + cut] for j in range(0, rec.size, cut)]:
            x = torch.from_numpy(c)[None].to(DEVICE)
            feats, n = m.preprocessor(input_signal=x / (x.abs().amax(dim=1, keepdim=True) + 1e-3), length=torch.tensor([c.size], device=DEVICE))
            feats = feats[:, :, :int(n.max())]
            feats = torch.nn.functional.pad(feats, (0, -feats.shape[2] % (sm.chunk_len * sm.subsampling_factor)))
            preds = torch.zeros((1, 0, 4), device=DEVICE)
            for _, chunk, chunk_len, lo, ro in sm.streaming_feat_loader(feat_seq=feats, feat_seq_length=n, feat_seq_offset=torch.zeros_like(n)):
                state, preds = m.forward_streaming_step(chunk, chunk_len, state, preds, left_offset=lo, right_offset=ro)
            probs = preds[0, :math.ceil(c.size / 16000 / sortformer.FRAME_S)].float().cpu().numpy()
            # (NeMo's step updates its state in place: a copy of each request's)
            out.append((copy_state(state), sortformer.chunk_turns(probs, c.size / 16000, o.threshold, o.min_gap, o.min_turn)))
    return out


class StandInGraph:
    """A stand-in for a CUDA graph (capture_graphs' capture) on any device:
    its replay reruns the captured function into the outputs it captured,
    as a replay overwrites them."""

    replays = 0

    def __init__(self, fn):
        self.fn, self.out = fn, fn()

    def replay(self):
        StandInGraph.replays += 1
        for o, new in zip(self.out, self.fn(), strict=True):
            o.copy_(new)

    @classmethod
    def capture(cls, fn, device, pool):
        g = cls(fn)
        return g, g.out


@contextlib.contextmanager
def compiling_nothing(test, what="graphs compiled while serving"):
    """Fails test where the block compiles a graph (one compiled at a
    request stalls its batch while it compiles)."""
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    yield
    test.assertEqual(counters["stats"]["unique_graphs"] - before, 0, what)


def largest_difference(a, b):
    """The largest difference between two states' arrays (their shapes equal)."""
    worst = 0.0
    for x, y in zip(arrays(a), arrays(b), strict=True):
        if x.shape != y.shape:
            raise AssertionError(f"state shapes {x.shape} and {y.shape}")
        worst = max(worst, float(np.abs(x - y).max(initial=0)))
    return worst


def arrays(raw):
    s = sortformer.Stream.decode(raw, 512, 40, 20)
    return [s.cache, s.cache_preds, s.fifo, s.sil]


class SortformerTest(unittest.TestCase):
    def test_fast_update_is_nemos(self):
        # The served step's cache and FIFO update against NeMo's own, rows
        # at different fills, some ending mid-chunk.
        d = engine()
        with torch.inference_mode():
            self.assertLess(check_update(d.sm, DEVICE), 1e-5)

    def test_served_chunks_are_nemos_streaming(self):
        # Recordings served together request by request, each state out as
        # bytes and back, against NeMo's own streaming step
        # (forward_streaming_step, asynchronous) over each recording alone,
        # its state kept on the device, each request's features its own as
        # the engine makes them: after every request the same speaker
        # cache, FIFO and silence profile, and the same turns (made from
        # NeMo's chunk probabilities). Requests of one step and of two (fp32,
        # NeMo's lengths). The random-weights model calls no frame silence
        # at NeMo's threshold: a higher one gives the silence profile frames.
        d = engine(align_frames="1")
        d.autocast = lambda: torch.autocast(DEVICE, enabled=False)  # fp32, as the reference runs
        threshold, d.sm.sil_threshold = d.sm.sil_threshold, 2.0
        self.addCleanup(setattr, d.sm, "sil_threshold", threshold)
        recs = [speech(3 * CHUNK_S + 1, 21), speech(2 * CHUNK_S - 3, 22)]
        for request_s in (CHUNK_S, 2 * CHUNK_S):
            states, turns = walk(d, recs, chunk_s=request_s)
            self.assertGreater(sortformer.Stream.decode(states[0][-1], 512, 40, 20).n_sil, 0)
            for r, rec in enumerate(recs):
                for i, (state, want) in enumerate(nemo_streaming(d, rec, request_s)):
                    got, where = sortformer.Stream.decode(states[r][i], 512, 40, 20), f"{request_s:g}-s requests, recording {r}, request {i}"
                    nc, nf = int(state.spkcache_lengths[0]), int(state.fifo_lengths[0])
                    self.assertEqual((len(got.cache), len(got.fifo), got.n_sil), (nc, nf, int(state.n_sil_frames[0])), where)
                    for name, a, b in [("cache", got.cache, state.spkcache[0, :nc]), ("cache_preds", got.cache_preds, state.spkcache_preds[0, :nc]),
                                       ("fifo", got.fifo, state.fifo[0, :nf]), ("sil", got.sil, state.mean_sil_emb[0])]:
                        self.assertLess(float(np.abs(a - b.float().cpu().numpy()).max(initial=0)), 1e-4, f"{where}: {name}")
                    self.assertEqual(turns[r][i], want, where)

    def test_state_round_trip_and_refusals(self):
        d = engine()
        states, _ = walk(d, [speech(20, 1)])
        raw = states[0][-1]
        st = sortformer.Stream.decode(raw, 512, 40, 20)
        self.assertEqual(st.encode(), raw)
        self.assertGreater(len(st.cache), 0)
        self.assertAlmostEqual(st.seconds, 20.0, places=2)
        for bad, why in [(b"{\"v\":1}", "not a Sortformer state"), (raw[:-4], "inconsistent"), (raw[:4] + b"\x09" + raw[5:], "version")]:
            with self.assertRaisesRegex(StateError, why):
                sortformer.Stream.decode(bad, 512, 40, 20)
        with self.assertRaisesRegex(StateError, "not this model's"):
            sortformer.Stream.decode(raw, 512, 10, 20)  # more cache frames than this model keeps
        out = d.serve({0: Ask(speech(2, 2), b"FSSF garbage")})
        self.assertIsInstance(out[0], StateError)

    def test_rows_of_a_batch_are_independent(self):
        # Recordings of different lengths (different cache fills, one ending
        # mid-step) served together give what each gives alone.
        # What is allowed is what batching does without any leak: the first
        # recording three times in one batch (rows alike, so a row handed
        # another's state is unchanged) against it alone. On a CPU that is
        # nothing; on a GPU, where another batch size runs other kernels in
        # bf16, a few bf16 steps.
        d = engine()
        recs = [speech(30, 3), speech(13, 4), speech(21.5, 5)]
        together, t_turns = walk(d, recs, together=True)
        alone, a_turns = walk(d, recs, together=False)
        same, _ = walk(d, [recs[0]] * 3, together=True)
        noise = max(largest_difference(a, b) for a, b in zip(same[0], alone[0], strict=True))
        allowed = max(2e-3, 2 * noise)
        for r in range(len(recs)):
            for a, b in zip(together[r], alone[r], strict=True):
                self.assertLess(largest_difference(a, b), allowed, f"recording {r}; batching alone moves a state {noise:.4g}")
            self.assertEqual(len(t_turns[r]), len(a_turns[r]))
        print(f"rows of a batch against each alone: batching alone moves a state up to {noise:.4g}", flush=True)

    def test_each_row_scaled_by_its_own_loudest_sample_on_the_device(self):
        # upload: a quiet row beside a loud one keeps its own scale (NeMo
        # scales a batch by its loudest clip), the same numbers the host
        # gave before (c / (max |c| + 1e-3)), zeros past each row's length;
        # the pinned buffer grows for a larger batch and is reused.
        d = types.SimpleNamespace(torch=torch, staging=PinnedRows(DEVICE))
        rng = np.random.default_rng(4)
        quiet, loud = (rng.standard_normal(1600) * 0.01).astype(np.float32), (rng.standard_normal(2400) * 0.8).astype(np.float32)
        for chunks in ([quiet, loud], [loud, quiet, loud[:100]]):
            x, n = sortformer.SortformerDiarizer.upload(d, chunks)
            self.assertEqual(n.tolist(), [c.size for c in chunks])
            got = x.cpu().numpy()
            for r, c in enumerate(chunks):
                np.testing.assert_array_equal(got[r, :c.size], c / (np.abs(c).max() + 1e-3))
                self.assertFalse(got[r, c.size:].any(), "row %d: zeros past its length" % r)
        self.assertEqual(d.staging.buffer.numel(), 3 * 2400)

    def test_a_request_of_chunk_seconds_is_one_step(self):
        # NeMo's preprocessor pads frames to a multiple of 16: a request of
        # exactly chunk_seconds must still be one encoder pass, a longer
        # one as many as its chunks.
        d = engine()
        calls = []
        run = d.run_encoder
        d.run_encoder = lambda seq, n: calls.append(seq.shape[0]) or run(seq, n)
        for seconds, steps in ((CHUNK_S, 1), (CHUNK_S / 2, 1), (2 * CHUNK_S, 2), (3 * CHUNK_S + 1, 4)):
            calls.clear()
            d.serve({0: Ask(speech(seconds, 11)), 1: Ask(speech(seconds / 3, 12))})
            self.assertEqual(len(calls), steps, f"{seconds} s")

    def test_a_first_step_runs_at_its_own_length(self):
        # A batch of recordings' first steps (speaker cache and FIFO empty)
        # runs at the chunk's length, not padded to a later step's, and its
        # rows get the states padding gave them (to bf16's rounding: other
        # shapes, other kernels; the encoder alone is exact in fp32); the
        # next step runs at the full length. NeMo's lengths (align_frames=1;
        # the aligned ones have a test of their own).
        short, full = engine(align_frames="1"), engine(first_step="full", align_frames="1")
        self.assertEqual(short.lengths, [short.total - 40 - 20, short.total])
        self.assertEqual(full.lengths, [full.total])
        seen = []
        run = short.run_encoder
        short.run_encoder = lambda seq, n: seen.append(seq.shape[1]) or run(seq, n)
        recs = [speech(CHUNK_S, 60 + r) for r in range(3)]
        a, _ = walk(short, recs)
        b, _ = walk(full, recs)
        self.assertEqual(seen, short.lengths[:1])
        for r in range(len(recs)):
            x, y = arrays(a[r][0]), arrays(b[r][0])
            self.assertEqual([v.shape for v in x], [v.shape for v in y])
            self.assertLess(float(np.abs(x[1] - y[1]).max(initial=0)), 0.02)  # the cache's speaker probabilities
        seq = torch.randn(2, short.total, 512, device=DEVICE)
        n = torch.tensor(short.lengths[:1] * 2, device=DEVICE) - torch.tensor([0, 9], device=DEVICE)
        seq[:, short.lengths[0]:] = 0
        with torch.inference_mode():
            want, got = sortformer.encode(short.model, seq, n), sortformer.encode(short.model, seq[:, :short.lengths[0]], n)
        for r in range(2):
            self.assertLess(float((got[r, :n[r]] - want[r, :n[r]]).abs().max()), 1e-5)
        # A later step runs at the full length, and so does a batch where
        # one row starts and another goes on.
        seen.clear()
        walk(short, [speech(2 * CHUNK_S, 72)])
        self.assertEqual(seen, short.lengths)
        seen.clear()
        short.serve({0: Ask(speech(CHUNK_S, 70)), 1: Ask(speech(CHUNK_S, 71), a[0][0])})
        self.assertEqual(seen, [short.total])

    def test_aligned_lengths_are_masked_padding(self):
        # align_frames=8 (the default): a first step's and a later step's
        # lengths rounded up to a multiple of 8 (102 and 162 frames here,
        # 565 and 793 at 45-s chunks), the encoder run at them, and the
        # frames within each row's length what NeMo's lengths
        # (align_frames=1) give (past it, masked).
        plain, al = engine(align_frames="1"), engine()
        self.assertEqual(al.lengths, [-(-n // 8) * 8 for n in plain.lengths])
        self.assertNotEqual(al.lengths, plain.lengths)
        self.assertIn("eager at %s frames" % " and ".join(map(str, al.lengths)), al.describe())
        seen = []
        run = al.run_encoder
        al.run_encoder = lambda seq, n: seen.append(seq.shape[1]) or run(seq, n)
        recs = [speech(2 * CHUNK_S, 80 + r) for r in range(3)]
        a, a_turns = walk(al, recs)
        b, b_turns = walk(plain, recs)
        self.assertEqual(seen, al.lengths)
        # On a CPU the same numbers; on a GPU, in bf16, another length runs
        # other kernels: to bf16's rounding, as first_step's test allows.
        exact = DEVICE == "cpu"
        for r in range(len(recs)):
            x, y = arrays(a[r][0]), arrays(b[r][0])
            self.assertEqual([v.shape for v in x], [v.shape for v in y])
            self.assertLess(float(np.abs(x[1] - y[1]).max(initial=0)), 1e-4 if exact else 0.02)  # the first step's cache probabilities
            if exact:
                self.assertEqual(a_turns[r][0], b_turns[r][0])
        for length in plain.lengths:
            seq = torch.randn(2, length, 512, device=DEVICE)
            n = torch.tensor([length, length - 9], device=DEVICE)
            with torch.inference_mode():
                want = sortformer.encode(plain.model, seq, n)
                got = sortformer.encode(plain.model, torch.nn.functional.pad(seq, (0, 0, 0, sortformer.aligned(length, 8) - length)), n)
            for r in range(2):
                self.assertLess(float((got[r, :n[r]] - want[r, :n[r]]).abs().max()), 1e-5)

    def test_long_request_takes_several_steps(self):
        # A request longer than chunk_seconds is walked in steps; its turns
        # stay inside it and its state is bounded.
        d = engine()
        x = speech(3 * CHUNK_S + 1, 6)
        out = d.serve({0: Ask(x)})[0]
        st = sortformer.Stream.decode(out.state, 512, 40, 20)
        self.assertAlmostEqual(st.seconds, len(x) / 16000, places=2)
        self.assertLessEqual(len(st.cache), 40)
        self.assertLessEqual(len(st.fifo), 20)
        for t in out.turns:
            self.assertTrue(0 <= t.start < t.end <= len(x) / 16000 + 1e-6, t)

    def test_silence_is_served(self):
        # Digital silence (scaled by its own loudest sample, 0) is a chunk
        # like any other: no error, no NaN in the state. (What speakers the
        # random weights hear in it says nothing; the trained model's
        # answer is in docs/speakers.md.)
        d = engine()
        states, _ = walk(d, [np.zeros(12 * 16000, np.float32)])
        fin = d.serve({0: Ask(np.zeros(0, np.float32), states[0][-1], finish=True)})[0]
        self.assertIsInstance(fin, sortformer.Reply)
        self.assertEqual(len(fin.labels), 4)

    def test_finish_labels_and_hints(self):
        # The labels' rules are diarize.final_labels' (test_diarize.py);
        # here, through serve(): a finish after real chunks, and bad hints.
        d = engine()
        states, _ = walk(d, [speech(20, 9)])
        fin = d.serve({0: Ask(np.zeros(0, np.float32), states[0][-1], True, 0, 1)})[0]
        self.assertLessEqual(max(fin.labels), 0)
        for lo, hi in [(3, 2), (0, 5)]:
            self.assertIsInstance(d.serve({0: Ask(np.zeros(0, np.float32), states[0][-1], True, lo, hi)})[0], StateError)

    @unittest.skipUnless(DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1", "compiles on a GPU (or FLEETSCRIBE_COMPILE_CPU=1)")
    def test_compiled_encoder_agrees_with_eager(self):
        # The compiled layers (row buckets 2 and 4; 3 rows run padded to 4,
        # 5 in parts) give the eager engine's states, to bf16's precision,
        # and serving compiles nothing the warm-up did not: 5 rows run as 4
        # (a bucket's rows exactly, no padding) and 1 padded to 2, the
        # later steps as 4 and 1 (a graph compiled at a request stalls its
        # batch while it compiles).
        with tempfile.TemporaryDirectory() as cache:
            compiled = engine(encoder="compiled", batch_buckets="2,4", compile_cache=cache)
            self.assertIsNotNone(compiled.compiled)
            eager = engine()
            recs = [speech(17, 10 + r) for r in range(5)]
            with compiling_nothing(self):
                a, _ = walk(compiled, recs)
            b, _ = walk(eager, recs)
            for r in range(len(recs)):
                x, y = arrays(a[r][-1]), arrays(b[r][-1])
                self.assertEqual(x[0].shape, y[0].shape)
                self.assertLess(float(np.abs(x[1] - y[1]).max(initial=0)), 0.1)  # the cache's speaker probabilities
            # Its shapes captured (a stand-in for CUDA's graphs: the
            # compiled layers run on the graphs' own input tensors) compile
            # nothing more and serve the same states.
            with compiling_nothing(self, "graphs compiled in capture or while serving"):
                compiled.capture_graphs(capture=StandInGraph.capture)
                self.assertEqual(len(compiled.graphs), 2 * (len(compiled.lengths) + 1))
                c, _ = walk(compiled, recs)
            for r in range(len(recs)):
                self.assertLess(largest_difference(a[r][-1], c[r][-1]), 1e-6)

    def test_pointwise_convs_as_matrix_multiplies_give_the_same_states(self):
        # pointwise_convs=matmul on a model of the same weights (its own:
        # the change is the model's): every kernel-1 convolution of the
        # conformer layers replaced, the encoder's numbers the same (the
        # served state is not compared value by value: the cache keeps
        # frames by their scores, and this small random model's scores tie,
        # so a rounding apart keeps other frames; on an H100 a walk's last
        # step ended 0.52 apart. The full-size model served with the form
        # agreed on every speaker-frame: docs/speakers.md).
        mm = engine(model=tiny_model(), pointwise_convs="matmul")
        self.assertEqual(mm.pointwise, 2 * len(mm.model.encoder.layers))
        self.assertIn("%d pointwise convolutions as matrix multiplies" % mm.pointwise, mm.describe())
        self.assert_encodes_alike(engine().model, mm.model)

    def test_transformer_attention_through_sdpa_is_nemos(self):
        # transformer_attention=sdpa on a model of the same weights: every
        # Transformer layer's attention fused, the same speaker
        # probabilities as NeMo's attention on one input with a padded row
        # (its mask, its scale).
        d = engine(model=tiny_model(), transformer_attention="sdpa")
        self.assertEqual(d.sdpa, len(d.model.transformer_encoder.layers))
        self.assertIn("%d Transformer attentions through SDPA" % d.sdpa, d.describe())
        self.assert_encodes_alike(engine().model, d.model)
        # Served: a recording walks through (its state's shapes as NeMo's
        # attention gives them; their values are not compared: the cache
        # keeps frames by their scores, and this small random model's
        # scores tie, so a rounding apart keeps other frames).
        a, _ = walk(d, [speech(17, 50)])
        b, _ = walk(engine(), [speech(17, 50)])
        self.assertEqual([[x.shape for x in arrays(s)] for s in a[0]], [[x.shape for x in arrays(s)] for s in b[0]])

    @unittest.skipUnless(DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1", "compiles on a GPU (or FLEETSCRIBE_COMPILE_CPU=1)")
    def test_conformer_attention_through_flex_is_nemos(self):
        # conformer_attention=flex on a model of the same weights: every
        # Fast Conformer attention swapped, which only a compiled layer runs
        # through FlexAttention (eagerly the swapped layer is NeMo's, to
        # the bit); compiled, the speaker probabilities of one input with a
        # padded row are NeMo's attention's (its shift, scale and mask).
        d = engine(model=tiny_model(), conformer_attention="flex")
        self.assertEqual(d.flex, len(d.model.encoder.layers))
        self.assertIn("%d conformer attentions through FlexAttention" % d.flex, d.describe())
        ref = engine().model
        seq = torch.randn(2, 90, 512, device=DEVICE)
        n = torch.tensor([90, 61], device=DEVICE)
        with torch.inference_mode():
            self.assertEqual(float((sortformer.encode(d.model, seq, n) - sortformer.encode(ref, seq, n)).abs().max()), 0.0, "eager")
        compiled = [(m, torch.compile(m.forward, dynamic=False)) for m in d.model.encoder.layers]
        for m, c in compiled:
            m.forward = c
        try:
            from torch._inductor.utils import run_and_get_code

            with torch._inductor.config.patch(fx_graph_cache=False):
                _, code = run_and_get_code(self.assert_encodes_alike, ref, d.model)
            self.assertTrue(any("flex_attention" in c for c in code), "no FlexAttention kernel generated")
        finally:
            for m, _ in compiled:
                del m.forward

    @unittest.skipUnless(DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1", "compiles on a GPU (or FLEETSCRIBE_COMPILE_CPU=1)")
    def test_compiled_with_flex_attention_serves_as_eager(self):
        # The engine compiled with conformer_attention=flex serves the eager
        # engine's states, to bf16's precision, and compiles nothing at
        # requests after its warm-up.
        with tempfile.TemporaryDirectory() as cache:
            flex = engine(model=tiny_model(), encoder="compiled", batch_buckets="2,4", compile_cache=cache, conformer_attention="flex")
            self.assertIn("%d conformer attentions through FlexAttention" % len(flex.model.encoder.layers), flex.describe())
            recs = [speech(17, 60 + r) for r in range(3)]
            with compiling_nothing(self):
                a, _ = walk(flex, recs)
            b, _ = walk(engine(), recs)
            for r in range(len(recs)):
                x, y = arrays(a[r][-1]), arrays(b[r][-1])
                self.assertEqual(x[0].shape, y[0].shape)
                self.assertLess(float(np.abs(x[1] - y[1]).max(initial=0)), 0.1)  # the cache's speaker probabilities

    def test_graphs_replayed_give_the_uncaptured_steps(self):
        # cuda_graphs=on's plumbing on any device, with a stand-in for
        # CUDA's capture (a graph whose replay reruns its function into the
        # outputs it captured, as a replay overwrites them): every part of
        # the subsampling and of the encoder replays its shape's graph, a
        # batch in parts of one bucket (3 rows in buckets of 2) keeps each
        # part's own frames, and the states and turns are those of the same
        # engine uncaptured, exactly. The layers run as they are (the
        # plumbing, not the compiler, is under test).
        def uncompiled(d):
            layer = d.model.encoder.layers[0]
            d.compiled, d.pre_compiled = [(layer, layer.forward)], d.model.encoder.pre_encode.forward
            return d

        captured = uncompiled(engine(batch_buckets="2", cuda_graphs="on"))
        StandInGraph.replays = 0
        captured.capture_graphs(capture=StandInGraph.capture)
        self.assertEqual(sorted(captured.graphs), sorted([("encoder", 2, n) for n in captured.lengths] +
                                                         [("subsampling", 2, captured.pre_frames)]))
        self.assertIn("3 CUDA graphs captured", captured.describe())
        recs = [speech(17, 80 + r) for r in range(3)]
        a, ta = walk(captured, recs)
        # 3 steps of 3 rows (2 parts each) through the subsampling and the
        # encoder
        self.assertEqual(StandInGraph.replays, 3 * 2 * 2)
        b, tb = walk(uncompiled(engine(batch_buckets="2")), recs)
        self.assertEqual(ta, tb)
        for r in range(len(recs)):
            for x, y in zip(a[r], b[r], strict=True):
                self.assertEqual(largest_difference(x, y), 0.0)

    def test_graphs_need_the_compiled_encoder_on_a_gpu(self):
        d = engine(cuda_graphs="on")
        self.assertEqual(d.graphs, {})
        self.assertIn("CUDA graphs asked for, off: they need encoder=compiled on a GPU", d.describe())
        self.assertNotIn("CUDA graph", engine().describe())
        with self.assertRaises(ValueError):
            engine(cuda_graphs="yes")

    @unittest.skipUnless(DEVICE == "cuda", "CUDA graphs: on a GPU")
    def test_captured_graphs_serve_as_the_compiled_kernels(self):
        # On a GPU, cuda_graphs=on captures every compiled shape after the
        # warm-up, serves the compiled engine's states (the same kernels,
        # replayed) and compiles nothing at requests; 5 rows in buckets of
        # 2 and 4 run as 4 and 1 padded to 2.
        with tempfile.TemporaryDirectory() as cache:
            graphs = engine(model=tiny_model(), encoder="compiled", batch_buckets="2,4", compile_cache=cache, cuda_graphs="on")
            self.assertEqual(len(graphs.graphs), 2 * (len(graphs.lengths) + 1), graphs.describe())
            plain = engine(model=tiny_model(), encoder="compiled", batch_buckets="2,4", compile_cache=cache)
            recs = [speech(17, 90 + r) for r in range(5)]
            with compiling_nothing(self):
                a, _ = walk(graphs, recs)
            b, _ = walk(plain, recs)
            for r in range(len(recs)):
                self.assertLess(largest_difference(a[r][-1], b[r][-1]), 1e-3)

    def assert_encodes_alike(self, ref, model):
        """The Sortformer's encoder (past the subsampling) and Transformer
        of model give ref's speaker probabilities on one input with a
        padded row: within 1e-4 in fp32 (cuDNN's TF32 off), within 0.02 in
        bf16 as served."""
        seq = torch.randn(2, 90, 512, device=DEVICE)
        n = torch.tensor([90, 61], device=DEVICE)
        tf32 = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
        try:
            with torch.inference_mode():
                want, got = sortformer.encode(ref, seq, n), sortformer.encode(model, seq, n)
                self.assertLess(float((got - want).abs().max()), 1e-4, "fp32")
                with torch.autocast(DEVICE, dtype=torch.bfloat16):
                    want, got = sortformer.encode(ref, seq, n), sortformer.encode(model, seq, n)
                self.assertLess(float((got.float() - want.float()).abs().max()), 0.02, "bf16")
        finally:
            torch.backends.cudnn.allow_tf32 = tf32

    @unittest.skipUnless(DEVICE == "cuda" or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1", "compiles on a GPU (or FLEETSCRIBE_COMPILE_CPU=1)")
    def test_compiled_with_both_conv_forms_agrees_with_eager(self):
        # pointwise_convs=matmul and subsampling_convs=taps compiled (a
        # model of the same weights: the changes are the model's) against
        # the eager engine as the model ships, to bf16's precision.
        with tempfile.TemporaryDirectory() as cache:
            forms = engine(model=tiny_model(), encoder="compiled", batch_buckets="2,4", compile_cache=cache, pointwise_convs="matmul",
                           subsampling_convs="taps")
            self.assertEqual(forms.taps, 5)
            recs = [speech(17, 40 + r) for r in range(3)]
            a, _ = walk(forms, recs)
            b, _ = walk(engine(), recs)
            for r in range(len(recs)):
                x, y = arrays(a[r][-1]), arrays(b[r][-1])
                self.assertLess(float(np.abs(x[1] - y[1]).max(initial=0)), 0.1)  # the cache's speaker probabilities

    def test_through_model_py(self):
        # The diarize model's execute() with engine sortformer, a .nemo
        # saved from the tiny model: a recording's chunks and its finish.
        import importlib.util

        pb = sys.modules["triton_python_backend_utils"]
        spec = importlib.util.spec_from_file_location("diarize_model_sf", os.path.join(HERE, "..", "..", "..", "deploy", "triton", "models",
                                                                                        "diarize", "1", "model.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules["diarize_model_sf"] = mod
        spec.loader.exec_module(mod)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sortformer-tiny.nemo")
            tiny_model().save_to(path)
            params = {"engine": "sortformer", "model": path, "chunk_seconds": str(CHUNK_S), "fifo_frames": "20", "cache_frames": "40",
                      "update_period": "60", "encoder": "eager"}
            m = mod.TritonPythonModel()
            m.initialize({"model_config": json.dumps({"max_batch_size": 8, "parameters": {k: {"string_value": v} for k, v in params.items()}}),
                          "model_instance_kind": "GPU" if DEVICE == "cuda" else "CPU", "model_instance_device_id": "0"})

            def req(audio=None, state=b"", finish=False):
                inputs = {"state": np.array([[state]], dtype=np.object_), "finish": np.array([[finish]]),
                          "speakers": np.array([[0, 0]], dtype=np.int32)}
                if audio is not None:
                    inputs["audio"] = audio.reshape(1, -1)
                return pb.Request(**inputs)

            x, state = speech(2 * CHUNK_S, 8), b""
            for i in range(2):
                res = m.execute([req(x[i * int(CHUNK_S * 16000):(i + 1) * int(CHUNK_S * 16000)], state), req(np.array([np.nan], np.float32))])
                self.assertFalse(res[0].has_error(), res[0].error() and res[0].error().message())
                self.assertEqual(res[1].error().code(), pb.TritonError.INVALID_ARG)
                state = bytes(res[0].outputs["state_out"].reshape(-1)[0])
                for turn in res[0].outputs["turns"].reshape(-1):
                    t = json.loads(turn)
                    self.assertTrue(0 <= t["start"] < t["end"] <= CHUNK_S + 1e-6 and 0 <= t["speaker"] < 4, t)
            fin = m.execute([req(None, state, finish=True)])[0]
            self.assertFalse(fin.has_error())
            self.assertEqual(fin.outputs["labels"].size, 4)


if __name__ == "__main__":
    unittest.main()

