"""The lab's Python benchmarks that run on the model's engines load: they
import the shipped package by path, and a move of either side broke one
unnoticed (make bench-narrowband looked in the wrong folder and asked
model.py for classes that moved into fleetscribe_asr). Each is loaded in a
fresh interpreter, as make runs it, so what the tests imported already
cannot hide a wrong path."""

import os
import subprocess
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

LOAD = """
import runpy, sys
g = runpy.run_path(sys.argv[1], run_name="loaded")
print(callable(g["main"]), g["SphinxModel"].__module__, g["WhisperModel"].__module__, g["SAMPLE_RATE"])
"""


class LabScriptsTest(unittest.TestCase):
    def test_narrowband_loads_the_engines_it_measures(self):
        path = os.path.join(ROOT, "lab", "bench", "narrowband", "narrowband.py")
        r = subprocess.run([sys.executable, "-c", LOAD, path], capture_output=True, text=True, cwd="/", check=False,
                           env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(r.stdout.split(), ["True", "fleetscribe_asr.sphinx", "fleetscribe_asr.whisper", "16000"])


if __name__ == "__main__":
    unittest.main()
