"""What the tests of the Triton models share, and what lab scripts that
run the shipped engines without Triton use: a stand-in
triton_python_backend_utils module, installed on import; the speech
model's model.py loaded (its folder, and with it the fleetscribe_asr
engines, on sys.path); and speech from ffmpeg's flite voices. Not a test
module: importing it runs no test.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import types
import wave

import numpy as np


def fake_pb_utils():
    pb = types.ModuleType("triton_python_backend_utils")

    class Tensor:
        def __init__(self, name, array):
            self._name, self._array = name, array

        def name(self):
            return self._name

        def as_numpy(self):
            return self._array

    class TritonError:
        INVALID_ARG, INTERNAL = "INVALID_ARG", "INTERNAL"

        def __init__(self, message, code=None):
            self._message, self._code = message, code

        def message(self):
            return self._message

        def code(self):
            return self._code

    class InferenceResponse:
        def __init__(self, output_tensors, error=None):
            self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
            self.err = error

        def has_error(self):
            return self.err is not None

        def error(self):
            return self.err

    class Request:
        def __init__(self, **inputs):
            self.inputs = {k: Tensor(k, v) for k, v in inputs.items()}

    pb.Tensor, pb.TritonError, pb.InferenceResponse, pb.Request = Tensor, TritonError, InferenceResponse, Request
    pb.get_input_tensor_by_name = lambda req, name: req.inputs.get(name)
    return pb


sys.modules["triton_python_backend_utils"] = pb = fake_pb_utils()
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("asr_model", os.path.join(HERE, "..", "models", "asr", "1", "model.py"))
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)


def flite(text, voice="rms"):
    """text spoken by ffmpeg's flite voice: a 16 kHz mono 16-bit WAV, as
    float32 in [-1, 1]."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.wav")
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", f"flite=text='{text}':voice={voice}",
                        "-ar", "16000", "-ac", "1", path], check=True)
        with wave.open(path) as w:
            return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
