"""Tests of deploy/triton/models/asr/1/model.py without Triton or NeMo: a
stand-in triton_python_backend_utils module and a stand-in model object.

Run: python3 -m unittest discover -s deploy/triton/tests (make test does).
"""

import contextlib
import json
import os
import sys
import types
import unittest
from unittest import mock

import numpy as np


from backend_stub import HERE, model, pb  # noqa: E402 - installs the stand-in triton_python_backend_utils, loads model.py

from fleetscribe_asr import common, compiled, host, parakeet  # noqa: E402 - model.py put its folder on the path


class Hyp:
    def __init__(self, text, words):
        self.text = text
        self.timestamp = {"word": words}


class FakeParakeet:
    """Transcribes an input of n samples as 'len n'; NaN-free inputs
    longer than `poison` samples make a batch call raise (alone too)."""

    def __init__(self, poison=None, break_batches=False):
        self.calls, self.poison, self.break_batches = [], poison, break_batches

    def transcribe(self, audio, batch_size, timestamps, verbose):
        self.calls.append([a.size for a in audio])
        if batch_size != len(audio):
            raise AssertionError("batch_size disagrees with the batch")
        if self.poison is not None and any(a.size == self.poison for a in audio):
            raise RuntimeError("CUDA error: an illegal memory access")
        if self.break_batches and len(audio) > 1:
            raise RuntimeError("out of memory")
        out = []
        for a in audio:
            words = [{"word": "len", "start": 0.0, "end": 0.24, "start_offset": 0, "end_offset": 3},
                     {"word": str(a.size), "start": 0.32, "end": a.size / 16000, "start_offset": 4, "end_offset": 9}]
            out.append(Hyp(f"len {a.size}", words if timestamps else []))
        return out


def make(fake, max_batch=4):
    m = model.TritonPythonModel()
    m._load = lambda source, device: fake
    m.loaded = None
    orig = m._load

    def load(source, device):
        m.loaded = (source, device)
        return orig(source, device)

    m._load = load
    m.host = []  # what the partition set of its host thread: no GPU here
    with mock.patch.object(host, "set_cuda_sync", lambda mode, ordinal: m.host.append(("cuda_sync", mode, ordinal)) or mode), \
            mock.patch.object(host, "set_cpu_threads", lambda n: m.host.append(("cpu_threads", n))):
        m.initialize({"model_config": json.dumps({"max_batch_size": max_batch, "parameters": {"model": {"string_value": "/models/parakeet.nemo"}}}),
                      "model_instance_kind": "GPU", "model_instance_device_id": "1"})
    return m


def audio(n, value=0.1):
    return np.full((1, n), value, dtype=np.float32)


class ModelTest(unittest.TestCase):
    def test_gpu_host_thread_sleeps_on_two_cpu_threads(self):
        m = make(FakeParakeet())
        self.assertEqual(m.host, [("cuda_sync", "blocking", 1), ("cpu_threads", 2)],
                         "a GPU partition waits for its own GPU asleep, on 2 CPU threads, by default")

    def test_load_and_warm_up(self):
        fake = FakeParakeet()
        m = make(fake, max_batch=8)
        self.assertEqual(m.loaded, ("/models/parakeet.nemo", "cuda:1"))
        self.assertEqual(fake.calls, [[30 * 16000] * 8], "warm-up: one full batch of the longest chunk")
        os.environ["PARAKEET_MODEL"] = "nvidia/parakeet-tdt-0.6b-v2"
        try:
            self.assertEqual(make(FakeParakeet()).loaded[0], "nvidia/parakeet-tdt-0.6b-v2")
        finally:
            del os.environ["PARAKEET_MODEL"]

    def test_ragged_batch_in_one_call(self):
        fake = FakeParakeet()
        m = make(fake)
        fake.calls.clear()
        reqs = [pb.Request(audio=audio(n)) for n in (16000, 8000, 40000)]
        out = m.execute(reqs)
        self.assertEqual(fake.calls, [[16000, 8000, 40000]], "one model call for the whole ragged batch")
        for r, n in zip(out, (16000, 8000, 40000)):
            self.assertFalse(r.has_error())
            self.assertEqual(r.outputs["text"].shape, (1, 1))
            self.assertEqual(r.outputs["text"][0, 0].decode(), f"len {n}")
            self.assertEqual(r.outputs["num_words"].tolist(), [[2]])
            words = [json.loads(w) for w in r.outputs["word_timestamps"][0]]
            self.assertEqual(words[0], {"word": "len", "start": 0.0, "end": 0.24})
            self.assertAlmostEqual(words[1]["end"], round(n / 16000, 3))

    def test_audio_length_and_no_timestamps(self):
        fake = FakeParakeet()
        m = make(fake)
        fake.calls.clear()
        out = m.execute([pb.Request(audio=audio(48000), audio_length=np.array([[12345]], dtype=np.int32),
                                    timestamps=np.array([[False]]))])
        self.assertEqual(fake.calls, [[12345]], "padding past audio_length is not transcribed")
        self.assertEqual(out[0].outputs["text"][0, 0].decode(), "len 12345")
        self.assertEqual(out[0].outputs["word_timestamps"].shape, (1, 0))
        self.assertEqual(out[0].outputs["num_words"].tolist(), [[0]])

    def test_bad_requests_fail_alone(self):
        fake = FakeParakeet()
        m = make(fake)
        fake.calls.clear()
        nan = audio(1600)
        nan[0, 5] = np.nan
        reqs = [pb.Request(audio=audio(1600)), pb.Request(audio=np.zeros((1, 0), dtype=np.float32)), pb.Request(audio=nan),
                pb.Request(audio=audio(1600).astype(np.float64)), pb.Request(audio=audio(3200)),
                pb.Request(audio=audio(10), audio_length=np.array([[20]], dtype=np.int32)), pb.Request()]
        out = m.execute(reqs)
        self.assertEqual(fake.calls, [[1600, 3200]], "only the valid requests reach the model, together")
        ok = [not r.has_error() for r in out]
        self.assertEqual(ok, [True, False, False, False, True, False, False])
        for r in out:
            if r.has_error():
                self.assertEqual(r.error().code(), pb.TritonError.INVALID_ARG)

    def test_model_failure_is_isolated(self):
        fake = FakeParakeet(poison=777)
        m = make(fake)
        fake.calls.clear()
        out = m.execute([pb.Request(audio=audio(n)) for n in (1000, 777, 2000)])
        self.assertEqual(fake.calls, [[1000, 777, 2000], [1000], [777], [2000]], "batch fails, then each alone")
        self.assertEqual([r.has_error() for r in out], [False, True, False])
        self.assertEqual(out[1].error().code(), pb.TritonError.INTERNAL)
        self.assertIn("illegal memory access", out[1].error().message())

    def test_batch_only_failure_recovers_every_request(self):
        fake = FakeParakeet(break_batches=True)
        m = make(fake, max_batch=1)
        fake.calls.clear()
        out = m.execute([pb.Request(audio=audio(n)) for n in (100, 200)])
        self.assertEqual([r.has_error() for r in out], [False, False])
        self.assertEqual(out[1].outputs["text"][0, 0].decode(), "len 200")


class HypothesisTest(unittest.TestCase):
    def test_nemo_results_are_read_once_into_words(self):
        class Nemo:
            text = " the heart rate "
            timestamp = {"word": [
                {"word": "the", "start": 0.1, "end": 0.2345678},
                {"char": "heart", "start": 0.3, "end": 0.5, "confidence": 0.875},  # a char-level entry
                {"word": "", "start": 0.5, "end": 0.6},  # no text
                {"word": "rate", "start": None, "end": 0.9},  # no time
            ]}

        h = common.from_nemo(Nemo())
        self.assertEqual(h, common.Hypothesis("the heart rate", (
            common.Word("the", 0.1, 0.2345678), common.Word("heart", 0.3, 0.5, 0.875))))
        self.assertEqual([w.contract() for w in h.words], [
            {"word": "the", "start": 0.1, "end": 0.235}, {"word": "heart", "start": 0.3, "end": 0.5, "confidence": 0.875}])
        self.assertEqual(common.from_nemo("plain text "), common.Hypothesis("plain text"))

    def test_an_engine_returning_another_shape_fails_its_requests_only(self):
        m = make(FakeParakeet())
        good = m.model

        class Untyped:
            def transcribe(self, audio, batch_size, timestamps, verbose):
                return [Hyp("len %d" % a.size, []) if a.size == 500 else h for a, h in zip(audio, good.transcribe(audio, batch_size, timestamps, verbose))]

        m.model = Untyped()
        out = m.execute([pb.Request(audio=audio(n)) for n in (400, 500, 600)])
        self.assertEqual([r.has_error() for r in out], [False, True, False])
        self.assertIn("returned a Hyp, not a Hypothesis", out[1].error().message())
        self.assertEqual(out[2].outputs["text"][0, 0].decode(), "len 600")


class TimingsTest(unittest.TestCase):
    def test_logged_every_n_batches_without_text(self):
        lines = []
        pb.Logger = types.SimpleNamespace(log_info=lines.append)
        try:
            m = model.TritonPythonModel()
            m.initialize({"model_config": json.dumps({"max_batch_size": 4, "parameters": {
                "engine": {"string_value": "echo"}, "log_timings": {"string_value": "2"}}}), "model_instance_kind": "CPU"})
            for _ in range(5):
                m.execute([pb.Request(audio=audio(160)), pb.Request(audio=audio(320))])
        finally:
            del pb.Logger
        self.assertEqual(len(lines), 2, "one line per 2 batches, and not yet for the fifth")
        self.assertIn("2 batches, 2.0 rows each", lines[0])
        for part in ("read", "model", "respond"):
            self.assertIn(part, lines[0])
        self.assertNotIn("samples", "".join(lines), "no transcript text in the log")

    def test_off_by_default(self):
        lines = []
        pb.Logger = types.SimpleNamespace(log_info=lines.append)
        try:
            m = model.TritonPythonModel()
            m.initialize({"model_config": json.dumps({"max_batch_size": 4, "parameters": {"engine": {"string_value": "echo"}}}),
                          "model_instance_kind": "CPU"})
            for _ in range(3):
                m.execute([pb.Request(audio=audio(160))])
        finally:
            del pb.Logger
        self.assertEqual(lines, [])


ENGINE = """
class Engine:
    def __init__(self, params, device):
        self.params, self.device = params, device

    def transcribe(self, audio, batch_size, timestamps, verbose):
        return [Hyp("%s %d on %s" % (self.params["greeting"], a.size, self.device)) for a in audio]


class Hyp:
    def __init__(self, text):
        self.text, self.timestamp = text, {"word": []}


def load(params, device):
    return Engine(params, device)
"""


class ModuleEngineTest(unittest.TestCase):
    def initialize(self, module):
        m = model.TritonPythonModel()
        params = {"engine": {"string_value": "module"}, "greeting": {"string_value": "hello"}}
        if module is not None:
            params["module"] = {"string_value": module}
        m.initialize({"model_config": json.dumps({"max_batch_size": 16, "parameters": params}),
                      "model_instance_kind": "CPU"})
        return m

    def test_loads_the_named_file(self):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "engine.py")
            with open(path, "w") as f:
                f.write(ENGINE)
            m = self.initialize(path)
        self.assertEqual(m.model.params["max_batch"], "16", "the engine hears the model's max_batch_size")
        out = m.execute([pb.Request(audio=audio(320))])
        self.assertEqual(out[0].outputs["text"][0, 0].decode(), "hello 320 on cpu")

    def test_relative_to_the_model_folder(self):
        here = os.path.join(HERE, "..", "models", "asr", "1")
        name = "test-engine-%d.py" % os.getpid()
        with open(os.path.join(here, name), "w") as f:
            f.write(ENGINE)
        try:
            m = self.initialize(name)
        finally:
            os.remove(os.path.join(here, name))
        self.assertEqual(m.execute([pb.Request(audio=audio(5))])[0].outputs["text"][0, 0].decode(), "hello 5 on cpu")

    def test_needs_a_module(self):
        with self.assertRaisesRegex(ValueError, "needs the model parameter module"):
            self.initialize(None)

    def test_cuda_sync_named_wrongly(self):
        m = model.TritonPythonModel()
        params = {"engine": {"string_value": "module"}, "cuda_sync": {"string_value": "blockin"}}
        with self.assertRaisesRegex(ValueError, r"cuda_sync='blockin': want blocking or spin or yield or auto"):
            m.initialize({"model_config": json.dumps({"max_batch_size": 16, "parameters": params}),
                          "model_instance_kind": "CPU"})


if __name__ == "__main__":
    unittest.main()


class AttrDict(dict):
    """Enough of an omegaconf DictConfig: keys as attributes."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError as e:
            raise AttributeError(k) from e

    def __setattr__(self, k, v):
        self[k] = v


class FakeNemoTDT:
    """A NeMo transducer model as NemoEngine configures it: its decoding
    config, and the config change_decoding_strategy was given."""

    def __init__(self, strategy, graphs, sdpa_in_config=None):
        self.cfg = AttrDict(decoding=AttrDict(strategy=strategy, greedy=AttrDict(loop_labels=True, use_cuda_graph_decoder=graphs)))
        if sdpa_in_config is not None:
            self.cfg.encoder = AttrDict(use_pytorch_sdpa=sdpa_in_config)
        self.decoding = types.SimpleNamespace(rnnt_decoder_predictions_tensor=None)
        self.applied = None
        # Two attention modules, as NeMo's conformer layers have, and one without.
        self.attention = [types.SimpleNamespace(use_pytorch_sdpa=False) for _ in range(2)]

    def modules(self):
        return [self, *self.attention, types.SimpleNamespace()]

    def change_decoding_strategy(self, cfg, verbose):
        self.applied = AttrDict(cfg, greedy=AttrDict(cfg.greedy))


class NemoEngineTest(unittest.TestCase):
    def setUp(self):
        self.cudnn_sdp = []  # what the engine set: torch.backends.cuda.enable_cudnn_sdp(on)
        fake_torch = types.SimpleNamespace(bfloat16="bf16", empty=lambda n: np.empty(n),
                                           backends=types.SimpleNamespace(cuda=types.SimpleNamespace(enable_cudnn_sdp=self.cudnn_sdp.append)))
        fake_omegaconf = types.SimpleNamespace(open_dict=lambda cfg: contextlib.nullcontext())
        self.saved = {k: sys.modules.get(k) for k in ("torch", "omegaconf")}
        sys.modules["torch"], sys.modules["omegaconf"] = fake_torch, fake_omegaconf

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def test_greedy_batch_decodes_under_cuda_graphs(self):
        # A .nemo saved with the graphs off decoded eagerly, 5-7x slower a
        # batch on the H200; the engine turns them on, with word times.
        fake = FakeNemoTDT("greedy_batch", graphs=False)
        parakeet.NemoEngine(fake, "cuda:0", "bf16")
        self.assertTrue(fake.applied.compute_timestamps)
        self.assertTrue(fake.applied.greedy.use_cuda_graph_decoder)

    def test_the_ready_line_says_whether_phrases_are_boosted(self):
        # A served benchmark's partitions' logs say which decoder ran.
        plain, boosted = FakeNemoTDT("greedy_batch", graphs=True), FakeNemoTDT("greedy_batch", graphs=True)
        self.assertIn("phrase boosting off", parakeet.NemoEngine(plain, "cuda:0", "bf16").config)
        self.assertFalse(plain.applied.greedy.get("enable_per_stream_biasing", False))
        self.assertIn("phrase boosting on", parakeet.NemoEngine(boosted, "cuda:0", "bf16", boosting=True).config)
        self.assertTrue(boosted.applied.greedy.enable_per_stream_biasing)

    def test_a_failed_compile_serves_eagerly(self):
        # A partition that cannot compile serves eagerly (the engine
        # metric says so, and the slow-path alert fires) rather than never
        # becoming ready.
        engine = parakeet.NemoEngine(FakeNemoTDT("greedy_batch", graphs=True), "cuda:0", "bf16")

        class Broken:
            path = "compiled"

            def warm(self, run):
                raise RuntimeError("inductor failed")

        engine.compiled = Broken()
        warmed = []
        engine.transcribe = lambda audio, batch_size, timestamps, verbose: warmed.append(len(audio))
        engine.warm(1, 2)
        self.assertIsNone(engine.compiled)
        self.assertEqual(engine.describe()[0], "eager")
        self.assertEqual(warmed, [2], "the decoder is still warmed")

    def test_attention_through_sdpa_unless_asked_for_the_models_own(self):
        # SDPA made the compiled encoder 1.23x faster on an H200; the model
        # parameter encoder_attention=model keeps what the .nemo says.
        fake = FakeNemoTDT("greedy_batch", graphs=True)
        engine = parakeet.NemoEngine(fake, "cuda:0", "bf16")
        self.assertEqual([m.use_pytorch_sdpa for m in fake.attention], [True, True])
        self.assertIn("attention sdpa in 2 of 2 modules", engine.config)
        own = parakeet.NemoEngine(fake, "cuda:0", "bf16", compiled.EncoderOptions(attention="model"))
        self.assertEqual([m.use_pytorch_sdpa for m in fake.attention], [False, False])
        self.assertIn("attention NeMo's matrix multiplies", own.config)
        # Engines that share a model each put back their own choice.
        engine.apply_attention()
        self.assertEqual([m.use_pytorch_sdpa for m in fake.attention], [True, True])
        configured = FakeNemoTDT("greedy_batch", graphs=True, sdpa_in_config=True)
        parakeet.NemoEngine(configured, "cuda:0", "bf16", compiled.EncoderOptions(attention="model"))
        self.assertEqual([m.use_pytorch_sdpa for m in configured.attention], [True, True])

    def test_cudnn_attention_off_unless_asked_for(self):
        # cuDNN's fused attention failed under MPS (an illegal memory access
        # ends every client of the GPU): off by default, on when asked.
        parakeet.NemoEngine(FakeNemoTDT("greedy_batch", graphs=True), "cuda:0", "bf16")
        parakeet.NemoEngine(FakeNemoTDT("greedy_batch", graphs=True), "cuda:0", "bf16", compiled.EncoderOptions(cudnn_attention=True))
        parakeet.NemoEngine(FakeNemoTDT("greedy_batch", graphs=True), "cpu", "bf16")
        self.assertEqual(self.cudnn_sdp, [False, True], "set on a GPU only")
        self.assertFalse(compiled.EncoderOptions.from_params({"encoder": "compiled"}, 16).cudnn_attention)
        self.assertTrue(compiled.EncoderOptions.from_params({"cudnn_attention": "true"}, 16).cudnn_attention)

    def test_other_strategies_left_alone(self):
        fake = FakeNemoTDT("beam", graphs=False)
        parakeet.NemoEngine(fake, "cuda:0", "bf16")
        self.assertTrue(fake.applied.compute_timestamps)
        self.assertFalse(fake.applied.greedy.use_cuda_graph_decoder)


class CompileCacheTest(unittest.TestCase):
    """Eight partitions of a host do not compile eight times: the first to
    warm compiles under the cache folder's lock, the others wait and then
    load; a restart loads."""

    def test_one_compiles_the_others_load(self):
        import multiprocessing
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            ctx = multiprocessing.get_context("fork")
            results = ctx.Queue()
            procs = [ctx.Process(target=_warm_in_child, args=(folder, results)) for _ in range(4)]
            for p in procs:
                p.start()
            got = [results.get(timeout=60) for _ in procs]
            for p in procs:
                p.join(timeout=60)
            self.assertEqual(sorted(c for c, _ in got), [False, False, False, True], "exactly one partition compiles")
            # Each that loaded started after the compile had finished.
            compiled_end = next(end for c, end in got if c)
            self.assertTrue(all(end >= compiled_end for c, end in got if not c))
            again = compiled.CompileCache(folder, "key")
            again.warm(lambda: None)
            self.assertFalse(again.cold, "a restart loads what was compiled")
            other = compiled.CompileCache(folder, "another model")
            other.warm(lambda: None)
            self.assertTrue(other.cold, "another key compiles its own")

    def test_buckets(self):
        self.assertEqual(compiled.parse_buckets("45, 30"), [30 * 16000, 45 * 16000])
        self.assertEqual(compiled.parse_buckets(""), [30 * 16000])
        for bad in ("0", "-1", "x"):
            with self.assertRaises(ValueError):
                compiled.parse_buckets(bad)


class StaticShapesTest(unittest.TestCase):
    """The compiled encoder's shapes are finite and known: every batch
    Triton can form has one."""

    def test_row_buckets(self):
        self.assertEqual(compiled.parse_rows("", 32), [1, 2, 4, 8, 16, 32])
        self.assertEqual(compiled.parse_rows("", 24), [1, 2, 4, 8, 16, 24], "max_batch_size is always a shape")
        self.assertEqual(compiled.parse_rows("8, 4", 16), [4, 8, 16])
        for bad in ("0", "33", "x", ","):
            with self.assertRaises(ValueError):
                compiled.parse_rows(bad, 32)

    def test_smallest_shape_that_holds_the_batch(self):
        rows, s30, s45 = [1, 2, 4, 8], 30 * 16000, 45 * 16000
        by_length = {s30: rows, s45: rows}
        self.assertEqual(compiled.plan(by_length, 3, 100, 8), [(3, 4, s30)])
        self.assertEqual(compiled.plan(by_length, 4, s30, 8), [(4, 4, s30)])
        self.assertEqual(compiled.plan(by_length, 5, s30 + 1, 8), [(5, 8, s45)])
        self.assertIsNone(compiled.plan(by_length, 9, 100, 8), "more rows than any shape")
        self.assertIsNone(compiled.plan(by_length, 1, s45 + 1, 8), "longer than any shape")

    def test_a_length_that_holds_fewer_rows_runs_in_parts(self):
        s30, s45 = 30 * 16000, 45 * 16000
        by_length = compiled.rows_by_length([s30, s45], [1, 2, 4, 8, 16, 32, 64], lambda n: 58 if n == s45 else 87)
        self.assertEqual(by_length, {s30: [1, 2, 4, 8, 16, 32, 64], s45: [1, 2, 4, 8, 16, 32]})
        self.assertEqual(compiled.plan(by_length, 64, s30, 64), [(64, 64, s30)])
        self.assertEqual(compiled.plan(by_length, 64, s30 + 1, 64), [(32, 32, s45), (32, 32, s45)])
        self.assertEqual(compiled.plan(by_length, 40, s45, 64), [(32, 32, s45), (8, 8, s45)])
        self.assertEqual(compiled.plan(by_length, 35, s45, 64), [(32, 32, s45), (3, 4, s45)])
        self.assertEqual(compiled.plan(by_length, 5, s45, 64), [(5, 8, s45)])
        self.assertIsNone(compiled.plan(by_length, 65, s30, 64), "more rows than any shape")
        self.assertIsNone(compiled.plan(by_length, 1, s45 + 1, 64), "longer than any shape")
        self.assertEqual(compiled.rows_by_length([s30], [4, 8], lambda n: 2), {s30: [2]}, "at least the limit itself")
        self.assertEqual(compiled.rows_by_length([s30], [4, 8], None), {s30: [4, 8]})

    def test_row_parts_fit_pads_fewer_rows(self):
        buckets = [1, 2, 4, 8, 16]
        # (rows: parts) where two shapes pad fewer rows than one; one shape
        # where they would pad as many (13: 16 pads 3, 8 and 8 pad 3) or
        # the rows fill a bucket.
        want = {1: [(1, 1)], 3: [(2, 2), (1, 1)], 5: [(4, 4), (1, 1)], 6: [(4, 4), (2, 2)], 7: [(7, 8)], 8: [(8, 8)],
                9: [(8, 8), (1, 1)], 11: [(8, 8), (3, 4)], 12: [(8, 8), (4, 4)], 13: [(13, 16)], 14: [(14, 16)], 16: [(16, 16)]}
        for rows, parts in want.items():
            self.assertEqual(compiled.fit_rows(buckets, rows), parts, "%d rows" % rows)
        for rows in range(1, 17):
            parts = compiled.fit_rows(buckets, rows)
            self.assertEqual(sum(r for r, _ in parts), rows, "%d rows: every row runs once" % rows)
            self.assertLessEqual(sum(s for _, s in parts), next(b for b in buckets if b >= rows), "%d rows: no more padding" % rows)
        self.assertEqual(compiled.fit_rows([4, 8], 3), [(3, 4)], "below the smallest bucket: padded")
        s45 = 45 * 16000
        by_length = {s45: buckets}
        self.assertEqual(compiled.plan(by_length, 12, s45, 16), [(12, 16, s45)], "one shape unless asked")
        self.assertEqual(compiled.plan(by_length, 12, s45, 16, fit=True), [(8, 8, s45), (4, 4, s45)])
        limited = {s45: [1, 2, 4, 8]}
        self.assertEqual(compiled.plan(limited, 13, s45, 16, fit=True), [(8, 8, s45), (4, 4, s45), (1, 1, s45)],
                         "a length's row limit first, then each part fitted")

    def test_row_parts_is_a_checked_model_parameter(self):
        opts = compiled.EncoderOptions.from_params({"row_parts": "one"}, 16)
        self.assertEqual(opts.row_parts, "one")
        self.assertEqual(compiled.EncoderOptions.from_params({}, 16).row_parts, "fit", "the default since it was measured")
        with self.assertRaisesRegex(ValueError, "row_parts"):
            compiled.EncoderOptions.from_params({"row_parts": "split"}, 16)

    def test_encoder_forms_are_checked_model_parameters_in_the_cache_key(self):
        # Graphs traced through another form of the convolutions or the
        # linear layers are not the model's: each form has its own cache key.
        by_length = {45 * 16000: [8, 16]}
        conv = compiled.EncoderOptions(mode="compiled", lengths=[45 * 16000], rows=[8, 16]).cache_key("nemo", by_length)
        self.assertIn("|cudnn", conv)
        for key, value, bad in [("pointwise_convs", "matmul", "linear"), ("subsampling_convs", "taps", "fused"), ("linear_precision", "fp8", "int8")]:
            with self.subTest(key):
                # Served: pointwise_convs=matmul since it served more on an
                # H100 (docs/benchmarks.md); the others stay the model's.
                # EncoderOptions itself keeps the model's forms (studies share
                # one model among engines, and a form changes the model).
                served = "matmul" if key == "pointwise_convs" else "model"
                self.assertEqual(getattr(compiled.EncoderOptions.from_params({}, 16), key), served)
                self.assertEqual(getattr(compiled.EncoderOptions(), key), "model")
                self.assertEqual(getattr(compiled.EncoderOptions.from_params({key: value}, 16), key), value)
                with self.assertRaisesRegex(ValueError, key):
                    compiled.EncoderOptions.from_params({key: bad}, 16)
                with self.assertRaisesRegex(ValueError, key):
                    compiled.EncoderOptions(**{key: bad})
                got = compiled.EncoderOptions(mode="compiled", lengths=[45 * 16000], rows=[8, 16], **{key: value}).cache_key("nemo", by_length)
                self.assertEqual(got, conv.replace("|cudnn", "|%s %s|cudnn" % (key.split("_")[0], value)))

    def test_nemo_subsampling_limits_the_rows_of_long_shapes(self):
        # Parakeet's subsampling: 256 channels, stride 2, 128 features, a
        # 10-ms hop: NeMo splits a batch over 2**31 / 256 * 4 elements.
        pre = types.SimpleNamespace(conv2d_subsampling=True, subsampling_conv_chunking_factor=1, _conv_channels=256, _stride=2,
                                    _feat_in=128)
        limit = parakeet.subsampling_row_limit(types.SimpleNamespace(encoder=types.SimpleNamespace(pre_encode=pre)), 160)
        self.assertEqual((limit(30 * 16000), limit(45 * 16000)), (87, 58))
        pre.subsampling_conv_chunking_factor = -1  # never splits
        self.assertIsNone(parakeet.subsampling_row_limit(types.SimpleNamespace(encoder=types.SimpleNamespace(pre_encode=pre)), 160))
        self.assertIsNone(parakeet.subsampling_row_limit(types.SimpleNamespace(encoder=object()), 160))

    def test_options_from_the_model_parameters(self):
        o = compiled.EncoderOptions.from_params({"length_buckets": "45", "batch_buckets": "4,16", "compile_cache": "/c"}, 16)
        self.assertEqual((o.mode, o.lengths, o.rows, o.graphs, o.casts, o.cache_dir), ("compiled", [45 * 16000], [4, 16], False, "fused", "/c"))
        o = compiled.EncoderOptions.from_params({"encoder": "eager"}, 8)
        self.assertEqual((o.mode, o.rows, o.graphs, o.casts, o.tuning), ("eager", [1, 2, 4, 8], False, "fused", "default"))
        self.assertEqual((o.attention, compiled.EncoderOptions.from_params({"encoder_attention": "model"}, 8).attention), ("sdpa", "model"))
        # The study knobs come from the environment, never the parameters.
        with mock.patch.dict(os.environ, {"FLEETSCRIBE_ENCODER_STUDY": "graphs=on,casts=eager,tuning=autotune"}):
            o = compiled.EncoderOptions.from_params({}, 8)
        self.assertEqual((o.graphs, o.casts, o.tuning), (True, "eager", "autotune"))
        for bad in ({"encoder_graphs": "on"}, {"batch_buckets": "64"}, {"encoder_attention": "flash"}, {"encoder": "jit"}):
            with self.assertRaises(ValueError):
                compiled.EncoderOptions.from_params(bad, 32)
        for study in ("graphs=maybe", "casts=bf16", "tuning=max", "graph=on", "graphs"):
            with mock.patch.dict(os.environ, {"FLEETSCRIBE_ENCODER_STUDY": study}), self.assertRaises(ValueError):
                compiled.EncoderOptions.from_params({}, 8)


    def test_the_attention_is_in_the_cache_key(self):
        # Partitions of another attention compile their own graphs: under
        # one key the first would find a marker and load nothing useful.
        by_length = {45 * 16000: [8, 16]}
        sdpa = compiled.EncoderOptions(mode="compiled", lengths=[45 * 16000], rows=[8, 16]).cache_key("nemo", by_length)
        own = compiled.EncoderOptions(mode="compiled", lengths=[45 * 16000], rows=[8, 16], attention="model").cache_key("nemo", by_length)
        self.assertNotEqual(sdpa, own)
        cudnn = compiled.EncoderOptions(mode="compiled", lengths=[45 * 16000], rows=[8, 16], attention="model",
                                        cudnn_attention=True).cache_key("nemo", by_length)
        self.assertEqual(cudnn, "nemo|lengths [720000]|rows [8, 16]|graphs False|casts fused", "caches made before stay valid")
        # Graphs traced with cuDNN's attention call it: without it, others.
        self.assertEqual(own, cudnn + "|cudnn attention off")


def _warm_in_child(folder, results):
    import time

    c = compiled.CompileCache(folder, "key")
    c.warm(lambda: time.sleep(0.5))  # a compile
    results.put((c.cold, time.time()))


class TakingVocabularies(FakeParakeet):
    """An engine that takes vocabularies (whisper's way): it records every
    vocabulary it checks and the vocabularies of every batch, and refuses
    a phrase containing unspellable."""

    def __init__(self, unspellable):
        super().__init__()
        self.unspellable = unspellable
        self.checked = []
        self.vocabularies = []

    def check_vocabulary(self, phrases):
        self.checked.append(phrases)
        if any(self.unspellable in p for p in phrases):
            raise ValueError("vocabulary phrase 1: a character the tokenizer cannot spell")

    def transcribe(self, audio, batch_size, timestamps, verbose, vocabularies=None):
        self.vocabularies.append(vocabularies)
        return [common.from_nemo(h) for h in super().transcribe(audio, batch_size, timestamps, verbose)]


class VocabularyTest(unittest.TestCase):
    """A request's vocabulary (input "vocabulary", a JSON list of phrases):
    read and checked before any model time, passed row by row to an engine
    that takes one, refused by one that does not."""

    def request(self, n, vocabulary=None):
        inputs = {"audio": audio(n)}
        if vocabulary is not None:
            inputs["vocabulary"] = np.array([[vocabulary]], dtype=np.object_)
        return pb.Request(**inputs)

    def test_an_engine_without_vocabularies_refuses_one(self):
        fake = FakeParakeet()
        m = make(fake)
        fake.calls.clear()  # the warm-up's
        res = m.execute([self.request(800, b'["metoprolol"]'), self.request(900)])
        self.assertEqual(res[0].err.code(), pb.TritonError.INVALID_ARG)
        self.assertIn("phrase boosting is off", res[0].err.message())  # the parakeet engine, phrase_boosting off (the default)
        self.assertIsNone(res[1].err)
        self.assertEqual(fake.calls, [[900]], "the refused request spent no model time")
        m.model = FakeParakeet()  # an engine with no check_vocabulary at all
        res = m.execute([self.request(800, b'["metoprolol"]')])
        self.assertIn("takes no vocabulary", res[0].err.message())

    def test_rows_get_their_own_vocabulary(self):
        fake = TakingVocabularies("\u00e9")
        m = make(FakeParakeet())
        m.model = fake  # an engine that takes vocabularies (whisper's way), in the engine's place
        res = m.execute([self.request(800, b'["metoprolol", " Dr. Okafor "]'), self.request(900), self.request(1000, b'["caf\xc3\xa9"]'),
                         self.request(1100, b'{"phrases": 1}'), self.request(1200, json.dumps(["x"] * 1001).encode())])
        self.assertIsNone(res[0].err)
        self.assertIsNone(res[1].err)
        self.assertIn("cannot spell", res[2].err.message())
        self.assertIn("not a JSON list", res[3].err.message())
        self.assertIn("1001 phrases, limit 1000", res[4].err.message())
        for r in res[2:]:
            self.assertEqual(r.err.code(), pb.TritonError.INVALID_ARG)
        self.assertEqual(fake.vocabularies, [[("metoprolol", "Dr. Okafor"), None]])
        # A batch where no row has one calls the engine as before.
        m.execute([self.request(700)])
        self.assertEqual(fake.vocabularies[-1], None)

    def test_a_vocabulary_is_checked_once(self):
        """Every chunk of a job carries its vocabulary: the engine checks it
        (1,000 phrases through the tokenizer) the first time, then the
        instance finds it by its bytes; a refused one is checked again."""
        fake = TakingVocabularies("bad")
        m = make(FakeParakeet())
        m.model = fake
        a, b = b'["metoprolol", "Dr. Okafor"]', b'["atorvastatin"]'
        res = m.execute([self.request(800, a), self.request(900, a), self.request(1000, b)])
        res += m.execute([self.request(1100, a), self.request(1200, b'["bad"]'), self.request(1300, b'["bad"]')])
        self.assertEqual([r.err is None for r in res], [True, True, True, True, False, False])
        self.assertEqual(fake.checked, [("metoprolol", "Dr. Okafor"), ("atorvastatin",), ("bad",), ("bad",)])
        self.assertEqual(fake.vocabularies, [[("metoprolol", "Dr. Okafor")] * 2 + [("atorvastatin",)], [("metoprolol", "Dr. Okafor")]])
        # The least recently used goes first when more are seen than kept.
        m.vocabularies.SIZE = 2
        for v in (b'["one"]', a, b'["two"]', a, b):
            m.execute([self.request(700, v)])
        self.assertEqual(fake.checked[4:], [("one",), ("two",), ("atorvastatin",)])
        m.execute([self.request(700, a)])
        self.assertEqual(len(fake.checked), 7, "the most recently used vocabulary was kept")
