"""Tests of model.py's CompiledEncoder on the tiny stand-in: static shapes,
regional compilation and, on a GPU, CUDA-graph replay, against the same
encoder run eagerly.

    python -m unittest discover -s lab/bench/gpu -p 'test_*.py'

Needs torch (and a C++ compiler on a host without a GPU, where inductor
compiles for the CPU: slower, about a minute a shape). On a GPU host the
CUDA-graph cases run too (the GPU benchmark runs them before it measures
anything).
"""
import os
import sys
import tempfile
import types
import unittest
from unittest import mock

import numpy as np
import standin
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_PY = os.path.join(HERE, "..", "..", "..", "deploy", "triton", "models", "asr", "1", "model.py")


def shipped():
    """The shipped engines' code (model.py's package fleetscribe_asr): the
    compiled encoder and the Parakeet engine, as one namespace."""

    sys.path.insert(0, os.path.dirname(MODEL_PY))
    from fleetscribe_asr import compiled, parakeet

    return types.SimpleNamespace(EncoderOptions=compiled.EncoderOptions, parse_buckets=compiled.parse_buckets,
                                 NemoEngine=parakeet.NemoEngine, load_model=parakeet.load_model)


class CompiledEncoderTest(unittest.TestCase):
    """One compile for the class: two row buckets of one length."""

    @classmethod
    def setUpClass(cls):
        cls.mod = shipped()
        cls.device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.manual_seed(0)
        cls.model = standin.build(standin.Config.tiny(), cls.device, torch.float32)
        cls.cache = tempfile.mkdtemp(prefix="compiled-test-")
        enc = cls.model.encoder
        cls.regions = [enc.sub, *enc.layers]
        opts = cls.mod.EncoderOptions(mode="compiled", lengths=[16000], rows=[2, 4], graphs=True, cache_dir=cls.cache)
        cls.compiled = opts.encoder(enc.forward, cls.device, "test", cls.regions)
        cls.nographs = cls.mod.EncoderOptions(mode="compiled", lengths=[16000], rows=[2, 4], graphs=False,
                                              cache_dir=cls.cache).encoder(enc.forward, cls.device, "test", cls.regions)
        rng = np.random.default_rng(3)
        cls.audio = [standin.speech_like(rng, n) for n in (16000, 9000, 12000)]
        with torch.no_grad():
            cls.compiled.warm(lambda n, rows: cls.compiled([np.zeros(n, dtype=np.float32)] * rows))
            cls.nographs.warm(lambda n, rows: cls.nographs([np.zeros(n, dtype=np.float32)] * rows))

    def eager(self, audio):
        x = torch.zeros(len(audio), max(a.size for a in audio), device=self.device)
        for i, a in enumerate(audio):
            x[i, :a.size] = torch.from_numpy(a)
        with torch.no_grad():
            return self.model.encoder(x, torch.tensor([a.size for a in audio], device=self.device))

    def assert_matches_eager(self, got, frames):
        """got and frames are self.audio's rows as the encoder run eagerly
        on the whole batch gives them (frames equal, each row's valid frames
        within 1e-3 of its scale)."""
        want, want_frames = self.eager(self.audio)
        self.assertEqual(frames.tolist(), want_frames.tolist())
        for i, n in enumerate(want_frames.tolist()):
            err = (got[i, :n] - want[i, :n]).abs().max().item()
            self.assertLess(err, 1e-3 * max(1.0, want[i, :n].abs().max().item()), "row %d" % i)

    def test_every_shape_compiled_once(self):
        self.assertEqual(sorted(self.compiled.shapes), [(2, 16000), (4, 16000)])
        # The two layers share one graph a shape, the subsampling has its
        # own: four graphs for two shapes, not eight.
        self.assertEqual(self.compiled.graphs, 4)

    def test_rows_padded_to_their_shape_match_eager(self):
        with torch.no_grad():
            got, frames = self.compiled(self.audio)  # three rows in the 4-row shape
            got, frames = got.clone(), frames.clone()
        self.assertEqual(got.shape[0], 3)
        self.assert_matches_eager(got, frames)

    def test_graphs_replay_the_compiled_kernels(self):
        with torch.no_grad():
            a, _ = self.compiled(self.audio[:2])
            a = a.clone()
            b, _ = self.nographs(self.audio[:2])
        self.assertTrue(torch.equal(a, b))
        self.assertEqual(self.compiled.path, "compiled")
        self.assertEqual(self.nographs.path, "compiled", "no graphs were asked for")
        if self.device == "cuda":
            self.assertTrue(all(s.graph is not None for s in self.compiled.shapes.values()))

    def test_outside_every_shape_is_none_and_eager_stays_eager(self):
        self.assertIsNone(self.compiled([np.zeros(16001, dtype=np.float32)]))
        self.assertIsNone(self.compiled([np.zeros(100, dtype=np.float32)] * 5))
        for m in self.regions:  # the compiled forward is installed only inside a call
            self.assertNotIn("forward", vars(m))
        from torch._dynamo.utils import counters

        before = counters["stats"]["unique_graphs"]
        self.eager([np.zeros(20000, dtype=np.float32)] * 3)
        self.assertEqual(counters["stats"]["unique_graphs"], before, "the eager path compiled something")

    def test_a_batch_over_its_lengths_rows_runs_in_parts(self):
        # Where the engine limits a length's rows (NeMo's subsampling), a
        # larger batch runs as parts of the shapes that length holds, and
        # matches the batch run eagerly whole.
        enc = self.model.encoder
        limited = self.mod.EncoderOptions(mode="compiled", lengths=[16000], rows=[2, 4], graphs=True, cache_dir=self.cache).encoder(
            enc.forward, self.device, "test", self.regions, row_limit=lambda n: 2)
        with torch.no_grad():
            limited.warm(lambda n, rows: limited([np.zeros(n, dtype=np.float32)] * rows))
            got, frames = limited(self.audio)  # three rows: two, then one in the 2-row shape
        self.assertEqual(sorted(limited.shapes), [(2, 16000)])
        self.assert_matches_eager(got, frames)

    def test_row_parts_fit_runs_two_shapes_and_matches_eager(self):
        # row_parts=fit: three rows run as two and one (no row of zeros),
        # not in the 4-row shape, and match the batch run eagerly whole.
        enc = self.model.encoder
        fit = self.mod.EncoderOptions(mode="compiled", lengths=[16000], rows=[1, 2, 4], graphs=True, cache_dir=self.cache,
                                      row_parts="fit").encoder(enc.forward, self.device, "test", self.regions)
        shapes = []
        run_shape = fit.run_shape
        fit.run_shape = lambda audio, shape, at=0: shapes.append(shape) or run_shape(audio, shape, at)
        with torch.no_grad():
            fit.warm(lambda n, rows: fit([np.zeros(n, dtype=np.float32)] * rows))
            shapes.clear()
            got, frames = fit(self.audio)
        self.assertEqual(shapes, [(2, 16000), (1, 16000)])
        self.assert_matches_eager(got, frames)

    def test_sortformer_row_parts_fit_matches_one_bucket(self):
        # The diarizer's in_buckets with row_parts=fit: 6 rows of buckets
        # 1, 2, 4, 8 run as 4 and 2, equal to the rows run in the one 8-row
        # bucket with its padding cut.

        sys.path.insert(0, os.path.dirname(MODEL_PY))
        from fleetscribe_asr import sortformer

        weight = torch.randn(6, 6, device=self.device)
        shapes = []

        def fn(x, n):
            shapes.append(x.shape[0])
            return torch.tanh(x @ weight) * (n.view(-1, 1, 1) > 0), n

        x = torch.randn(6, 5, 6, device=self.device)
        n = torch.arange(1, 7, device=self.device)
        got = {}
        for mode in ("one", "fit"):
            shapes.clear()
            engine = types.SimpleNamespace(torch=torch, rows=[1, 2, 4, 8], opts=types.SimpleNamespace(row_parts=mode), graphs={})
            out, out_n = sortformer.SortformerDiarizer.in_buckets(engine, x, n, fn, "encoder")
            got[mode] = (list(shapes), out, out_n)
        self.assertEqual(got["one"][0], [8])
        self.assertEqual(got["fit"][0], [4, 2])
        self.assertEqual(got["fit"][2].tolist(), n.tolist())
        self.assertLess((got["fit"][1] - got["one"][1]).abs().max().item(), 1e-5)

    def test_a_restart_loads_the_cache(self):
        enc = self.model.encoder
        again = self.mod.EncoderOptions(mode="compiled", lengths=[16000], rows=[2, 4], graphs=True, cache_dir=self.cache).encoder(
            enc.forward, self.device, "test", self.regions)
        with torch.no_grad():
            again.warm(lambda n, rows: again([np.zeros(n, dtype=np.float32)] * rows))
        self.assertFalse(again.cold)

    def test_graphs_load_every_shape_then_capture_then_decode(self):
        # With CUDA graphs, warm() loads (or compiles) every shape, then
        # captures every shape, and only then puts batches through the
        # whole model (whose decoder captures its own graphs in the first):
        # loading or capturing after NeMo's decoder capture is what crashed.
        # On a CPU the capture is recorded, not made.
        enc = self.model.encoder
        c = self.mod.EncoderOptions(mode="compiled", lengths=[16000], rows=[2, 4], graphs=True, cache_dir=self.cache).encoder(
            enc.forward, self.device, "test", self.regions)
        c.graphs_on = True
        events = []
        call = c.compiled_call

        def compiled_call(x, lengths):
            events.append(("load", x.shape[0]))
            return call(x, lengths)

        def capture(s):
            events.append(("capture", s.x.shape[0]))
            out = call(s.x, s.lengths)
            s.graph, s.out = types.SimpleNamespace(replay=lambda: None), out

        c.compiled_call, c._capture = compiled_call, capture
        with torch.no_grad():
            c.warm(lambda n, rows: events.append(("decode", rows)) or c([np.zeros(n, dtype=np.float32)] * rows),
                   lambda n, rows: c([np.zeros(n, dtype=np.float32)] * rows))
        self.assertEqual(events, [("load", 4), ("load", 2), ("capture", 4), ("capture", 2), ("decode", 4), ("decode", 2)])

        # Without graphs the encoder-only passes are skipped.
        plain = self.mod.EncoderOptions(mode="compiled", lengths=[16000], rows=[2, 4], cache_dir=self.cache).encoder(
            enc.forward, self.device, "test", self.regions)
        passes = []
        with torch.no_grad():
            plain.warm(lambda n, rows: passes.append("run") or plain([np.zeros(n, dtype=np.float32)] * rows),
                       lambda n, rows: passes.append("encode"))
        self.assertEqual(passes, ["run", "run"])


class ConformerConvolution(torch.nn.Module):
    """NeMo's ConformerConvolution as it runs (conformer_modules.py): the
    layer's (B, T, C) transposed to convolve, a kernel-1 Conv1d, GLU,
    the padding zeroed, a depthwise convolution (a Conv1d subclass, as
    NeMo's CausalConv1D), batch norm, SiLU, a kernel-1 Conv1d, back."""

    class Depthwise(torch.nn.Conv1d):
        pass

    def __init__(self, d, k=9):
        super().__init__()
        self.pointwise_conv1 = torch.nn.Conv1d(d, 2 * d, 1)
        self.depthwise_conv = self.Depthwise(d, d, k, padding=k // 2, groups=d)
        self.batch_norm = torch.nn.BatchNorm1d(d)
        self.pointwise_conv2 = torch.nn.Conv1d(d, d, 1)

    def forward(self, x, pad_mask):
        x = torch.nn.functional.glu(self.pointwise_conv1(x.transpose(1, 2)), dim=1)
        x = self.depthwise_conv(x.masked_fill(pad_mask.unsqueeze(1), 0.0))
        return self.pointwise_conv2(torch.nn.functional.silu(self.batch_norm(x))).transpose(1, 2)


class PointwiseTest(unittest.TestCase):
    """pointwise_convs=matmul (fleetscribe_asr/convs.py) on a module of
    NeMo's shape, eagerly (the compiled and NeMo cases run where NeMo is:
    test_parakeet_options, test_sortformer)."""

    def test_the_same_numbers_and_parameters(self):
        sys.path.insert(0, os.path.dirname(MODEL_PY))
        from fleetscribe_asr import convs as pointwise

        torch.manual_seed(1)
        layers = [ConformerConvolution(16).eval() for _ in range(3)]
        with torch.no_grad():
            for m in layers:  # batch norm statistics of its own, as a trained model's
                m.batch_norm.running_mean.uniform_(-1, 1)
                m.batch_norm.running_var.uniform_(0.5, 2)
        x = torch.randn(2, 37, 16)
        pad = torch.arange(37).unsqueeze(0) >= torch.tensor([[37], [20]])

        def run():
            y = x
            for m in layers:
                y = y + m(y, pad)
            return y

        with torch.no_grad():
            ref = run()
            shapes = [{k: v.shape for k, v in m.state_dict().items()} for m in layers]
            saved = [{k: v.clone() for k, v in m.state_dict().items()} for m in layers]
            self.assertEqual(pointwise.as_matmul(layers), 6)
            self.assertEqual(pointwise.as_matmul(layers), 0, "twice changes nothing")
            for m in layers:
                self.assertIsInstance(m.pointwise_conv1, pointwise.PointwiseMatmul)
                self.assertIsInstance(m.depthwise_conv, ConformerConvolution.Depthwise, "the depthwise convolution stays")
            got = run()
            self.assertEqual([{k: v.shape for k, v in m.state_dict().items()} for m in layers], shapes)
            for m, sd in zip(layers, saved, strict=True):
                m.load_state_dict(sd)  # a checkpoint of the model as it was loads
            self.assertLess((got - ref).abs().max().item(), 1e-5)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low = run()
            self.assertLess(((low.float() - ref).abs().mean() / ref.abs().mean()).item(), 0.01, "bf16 within 1% of fp32")

    def test_only_plain_kernel_1_convolutions(self):
        sys.path.insert(0, os.path.dirname(MODEL_PY))
        from fleetscribe_asr import convs as pointwise

        for conv, want in [(torch.nn.Conv1d(4, 4, 1), True), (torch.nn.Conv1d(4, 4, 3), False),
                           (torch.nn.Conv1d(4, 4, 1, stride=2), False), (torch.nn.Conv1d(4, 4, 1, groups=4), False),
                           (torch.nn.Conv1d(4, 4, 1, padding=1), False), (ConformerConvolution.Depthwise(4, 4, 1), False),
                           (torch.nn.Conv2d(4, 4, 1), False), (torch.nn.Conv1d(4, 4, 1, bias=False), True)]:
            self.assertEqual(pointwise.is_pointwise(conv), want, conv)
        m = torch.nn.Conv1d(4, 6, 1, bias=False)
        x = torch.randn(3, 4, 5)
        with torch.no_grad():
            self.assertLess((pointwise.PointwiseMatmul(m)(x) - m(x)).abs().max().item(), 1e-6)


class MaskedConvSequential(torch.nn.Sequential):
    """NeMo's MaskedConvSequential (subsampling.py) as it runs: the padded
    frames masked before every layer and at the end, the lengths carried
    through each strided convolution."""

    def forward(self, x, lengths):
        x = x.unsqueeze(1)
        current = lengths.clone().float()
        mask = self.mask(x, current.long())
        for layer in self:
            x = x * mask.unsqueeze(1).expand(x.shape)
            x = layer(x)
            if hasattr(layer, "stride") and layer.stride != (1, 1):
                current = (current + layer.padding[0] + layer.padding[1] - layer.kernel_size[0]) // layer.stride[0] + 1
                mask = self.mask(x, current.long())
        return x * mask.unsqueeze(1).expand(x.shape), current.long()

    @staticmethod
    def mask(x, lengths):
        b, _, t, f = x.shape
        return (torch.arange(t).expand(b, t) < lengths.unsqueeze(1)).unsqueeze(-1).expand(b, t, f).to(x.dtype)


def dw_striding(channels=8, activation=None):
    """NeMo's dw_striding layers (8x: a 3x3 convolution of the one input
    channel, then twice a depthwise 3x3 and a 1x1, all strided by 2; one
    activation module shared, as NeMo builds it)."""
    act = activation or torch.nn.ReLU()
    c = channels
    return MaskedConvSequential(torch.nn.Conv2d(1, c, 3, 2, 1), act, torch.nn.Conv2d(c, c, 3, 2, 1, groups=c), torch.nn.Conv2d(c, c, 1),
                                act, torch.nn.Conv2d(c, c, 3, 2, 1, groups=c), torch.nn.Conv2d(c, c, 1), act)


class SubsamplingTapsTest(unittest.TestCase):
    """subsampling_convs=taps (fleetscribe_asr/convs.py) on NeMo's
    subsampling layers as a module of its shape (NeMo's own: on the GPU
    machine, test_parakeet_options)."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.dirname(MODEL_PY))
        from fleetscribe_asr import convs

        cls.convs = convs
        torch.manual_seed(2)
        cls.x = torch.randn(3, 61, 16)  # features (B, T, F), T not a multiple of 8
        cls.lengths = torch.tensor([61, 40, 9])

    def pre(self):

        torch.manual_seed(4)
        return types.SimpleNamespace(conv=dw_striding().eval())

    def test_taps_are_the_convolutions(self):
        pre = self.pre()
        with torch.no_grad():
            ref, ref_n = pre.conv(self.x, self.lengths)
            got, got_n = self.convs.taps_forward(pre.conv, self.x, self.lengths)
            self.assertEqual(got_n.tolist(), ref_n.tolist())
            self.assertEqual(got.shape, ref.shape)
            self.assertLess((got - ref).abs().max().item(), 1e-5)
            self.assertEqual(float(got[2, :, ref_n[2]:].abs().max()), 0.0, "frames past a row's length are zero")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                low, _ = self.convs.taps_forward(pre.conv, self.x, self.lengths)
            self.assertEqual(low.dtype, torch.bfloat16, "as autocast's convolutions give")
            self.assertLess(((low.float() - ref).abs().mean() / ref.abs().mean()).item(), 0.01)

    def test_by_taps_only_when_compiled(self):
        pre = self.pre()
        with torch.no_grad():
            ref, _ = pre.conv(self.x, self.lengths)
            names = [k for k, _ in pre.conv.state_dict().items()]
            self.assertEqual(self.convs.by_taps(pre), 5)
            self.assertEqual(self.convs.by_taps(pre), 5, "twice is once")
            self.assertEqual([k for k, _ in pre.conv.state_dict().items()], names)
            self.assertIsInstance(pre.conv, MaskedConvSequential)
            eager, _ = pre.conv(self.x, self.lengths)
            self.assertTrue(torch.equal(eager, ref), "eagerly the module runs as it was written")
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="compiled-test-"))
            compiled, n = torch.compile(pre.conv.forward, dynamic=False)(self.x, self.lengths)
            self.assertLess((compiled - ref).abs().max().item(), 1e-4)

    def test_conv_forms_set_on_an_encoder(self):
        # compiled.conv_forms, what both engines call: each form where asked
        # for, counted; neither where the model's own forms are.

        from fleetscribe_asr import compiled

        def encoder():
            return types.SimpleNamespace(layers=[ConformerConvolution(4)], pre_encode=types.SimpleNamespace(conv=dw_striding(4)))

        self.assertEqual(compiled.conv_forms(encoder(), "model", "model"), (0, 0))
        self.assertEqual(compiled.conv_forms(encoder(), "matmul", "model"), (2, 0))
        self.assertEqual(compiled.conv_forms(encoder(), "model", "taps"), (0, 5))
        both = encoder()
        self.assertEqual(compiled.conv_forms(both, "matmul", "taps"), (2, 5))
        self.assertIsInstance(both.layers[0].pointwise_conv2, self.convs.PointwiseMatmul)
        self.assertEqual(compiled.conv_forms(types.SimpleNamespace(), "matmul", "taps"), (0, 0), "no conformer: nothing to change")

    def test_other_subsamplings_are_left_alone(self):

        c = 4
        striding = MaskedConvSequential(torch.nn.Conv2d(1, c, 3, 2, 1), torch.nn.ReLU(), torch.nn.Conv2d(c, c, 3, 2, 1))  # not depthwise
        for pre in (types.SimpleNamespace(conv=striding), types.SimpleNamespace(conv=torch.nn.Sequential(torch.nn.Conv2d(1, c, 3))),
                    types.SimpleNamespace()):
            before = type(getattr(pre, "conv", None))
            self.assertEqual(self.convs.by_taps(pre), 0)
            self.assertIs(type(getattr(pre, "conv", None)), before)


class FeedForward(torch.nn.Module):
    """A conformer layer's feed-forward module as NeMo builds it: a layer
    norm, a linear layer four times wider, SiLU, a linear layer back."""

    def __init__(self, d):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.linear1 = torch.nn.Linear(d, 4 * d)
        self.linear2 = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.linear2(torch.nn.functional.silu(self.linear1(self.norm(x))))


class Fp8Test(unittest.TestCase):
    """linear_precision=fp8 (fleetscribe_asr/fp8.py) on a module of a
    conformer feed-forward's shape (NeMo's encoder: on the GPU machine,
    test_parakeet_options)."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.dirname(MODEL_PY))
        from fleetscribe_asr import compiled, fp8

        cls.fp8, cls.compiled = fp8, compiled

    @staticmethod
    def reference(x, linear):
        """The FP8 matrix multiply written out in float32: each row of x and
        of the weight rounded to e4m3 at its own scale."""
        def q(t):
            scale = t.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 448.0
            return (t / scale).to(torch.float8_e4m3fn).float() * scale

        rows = x.reshape(-1, x.shape[-1]).float()
        return (q(rows) @ q(linear.weight.float()).t() + linear.bias.float()).reshape(*x.shape[:-1], -1)

    def test_quantised_rows_come_back_within_e4m3s_step(self):
        x = torch.randn(5, 64) * torch.logspace(-3, 3, 5).unsqueeze(1)  # rows of very different sizes
        q, scale = self.fp8.quantise_rows(x)
        self.assertEqual((q.dtype, scale.shape), (torch.float8_e4m3fn, (5, 1)))
        back = q.float() * scale
        err = ((back - x).abs() / x.abs().amax(dim=1, keepdim=True)).max().item()
        self.assertLess(err, 2 ** -4, "each value within half an e4m3 step of its row's largest")
        self.assertTrue(torch.allclose(q.float().abs().amax(dim=1), torch.full((5,), 448.0)), "each row's largest maps to 448")

    def test_eagerly_the_models_linear_and_its_checkpoint(self):
        torch.manual_seed(0)
        ff = FeedForward(32)
        before = {k: v.clone() for k, v in ff.state_dict().items()}
        x = torch.randn(2, 7, 32)
        want = ff(x)
        self.assertEqual(self.fp8.as_fp8([ff]), 2)
        self.assertIsInstance(ff.linear1, self.fp8.Fp8Linear)
        self.assertTrue(torch.equal(ff(x), want), "uncompiled, the layer is the model's own")
        self.assertEqual(list(ff.state_dict()), list(before), "the quantised copies stay out of the checkpoint")
        ff.load_state_dict(before)
        self.assertEqual(ff.linear1.weight_fp8.dtype, torch.float8_e4m3fn)

    def test_compiled_runs_the_fp8_matrix_multiply(self):
        torch.manual_seed(1)
        lin = torch.nn.Linear(64, 48)
        x = torch.randn(3, 9, 64)
        want_float = lin(x)
        self.fp8.as_fp8([torch.nn.Sequential(lin)])
        torch._dynamo.reset()
        with torch.no_grad():  # as a batch runs (inference): FP8 has no backward
            got = torch.compile(lin.forward, dynamic=False)(x).float()
        ref = self.reference(x, lin)
        self.assertLess((got - ref).abs().max().item(), 2e-2 * ref.abs().max().item(), "the FP8 product, as written out")
        rel = ((got - want_float).abs().mean() / want_float.abs().mean()).item()
        self.assertGreater(rel, 1e-4, "not the float matrix multiply")
        self.assertLess(rel, 0.08, "within FP8's rounding of the float one")

    def test_compiled_feed_forward_within_fp8s_rounding(self):
        torch.manual_seed(2)
        ff = FeedForward(64)
        x = torch.randn(2, 11, 64)
        want = ff(x)
        self.fp8.as_fp8([ff])
        torch._dynamo.reset()
        with torch.no_grad():
            got = torch.compile(ff.forward, dynamic=False)(x)
        rel = ((got - want).abs().mean() / want.abs().mean()).item()
        self.assertGreater(rel, 1e-4)
        self.assertLess(rel, 0.03, "the residual keeps the block within a few percent")

    def test_only_plain_linears_of_fp8s_sizes(self):
        class Own(torch.nn.Linear):
            pass

        root = torch.nn.ModuleDict({"a": torch.nn.Linear(32, 64), "odd": torch.nn.Linear(32, 10), "own": Own(32, 32),
                                    "conv": torch.nn.Conv1d(32, 32, 1)})
        self.assertEqual(self.fp8.as_fp8([root]), 1)
        self.assertIs(type(root["odd"]), torch.nn.Linear)
        self.assertIs(type(root["own"]), Own)

    def test_linear_form_on_an_encoder(self):
        enc = types.SimpleNamespace(layers=[FeedForward(32), FeedForward(32)])
        self.assertEqual(self.compiled.linear_form(enc, "model", "cpu"), 0)
        self.assertIs(type(enc.layers[0].linear1), torch.nn.Linear)
        self.assertEqual(self.compiled.linear_form(enc, "fp8", "cpu"), 4)
        self.assertEqual(self.compiled.linear_form(types.SimpleNamespace(), "fp8", "cpu"), 0, "no conformer: nothing to change")
        with mock.patch.object(self.fp8, "supported", return_value=False):
            with self.assertRaisesRegex(ValueError, "linear_precision=fp8: this GPU has no FP8"):
                self.compiled.linear_form(types.SimpleNamespace(layers=[FeedForward(32)]), "fp8", "cuda")


@unittest.skipUnless(torch.cuda.is_available(), "needs a GPU's driver (the CUDA context's flags)")
class CudaSyncTest(unittest.TestCase):
    """model.py's cuda_sync: the flag set before torch starts CUDA is the
    flag of the context torch then runs in (a fresh process each)."""

    def flags_after_torch(self, mode):
        import subprocess
        import sys

        code = (
            "import ctypes, sys, torch\n"
            "import os; sys.path.insert(0, os.path.dirname(sys.argv[1]))\n"
            "from fleetscribe_asr.host import set_cuda_sync\n"
            "print(set_cuda_sync(sys.argv[2], 0))\n"
            "torch.ones(1, device='cuda').sum().item()\n"
            "cuda = ctypes.CDLL('libcuda.so.1'); dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()\n"
            "assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0\n"
            "assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0\n"
            "print(flags.value & 7, active.value)\n")
        out = subprocess.run([sys.executable, "-c", code, MODEL_PY, mode], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        return out.stdout.split("\n")

    def test_blocking_holds_under_torch(self):
        said, state = self.flags_after_torch("blocking")[:2]
        self.assertEqual(said, "blocking (flags 0x4)")
        self.assertEqual(state, "4 1", "torch's context is active with the blocking-sync flag")

    def test_auto_leaves_the_driver_alone(self):
        said, state = self.flags_after_torch("auto")[:2]
        self.assertEqual((said, state), ("auto", "0 1"))


if __name__ == "__main__":
    unittest.main()
