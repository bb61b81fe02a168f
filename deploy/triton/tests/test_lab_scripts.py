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

    def test_gpu_env_leaves_the_library_path_alone_where_the_machine_has_libpython(self):
        # lab/bench/gpu/env.sh puts Python's LIBDIR on LD_LIBRARY_PATH only
        # where the loader's cache has no libpython for the stub. With
        # pipefail, `ldconfig -p | grep -q` failed whenever grep stopped
        # reading before ldconfig finished writing (SIGPIPE), so the path
        # was prepended on some runs and not others (on an H200 a NeMo
        # build in such a run then failed on a cuDNN mismatch). A long cache
        # listing its libpython first makes that happen every time.
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            bin_dir, libdir, carry = (os.path.join(tmp, d) for d in ("bin", "lib", "carry"))
            for d in (bin_dir, libdir, carry):
                os.makedirs(d)
            open(os.path.join(libdir, "libpython3.12.so.1.0"), "w").close()
            fake_py = os.path.join(bin_dir, "py")
            with open(fake_py, "w") as f:  # answers env.sh's three questions for a Python 3.12 in tmp
                f.write('#!/bin/sh\ncase "$2" in *version_info*) echo 3.12;; *getsitepackages*) echo %s;; *LIBDIR*) echo %s;; esac\n'
                        % (tmp, libdir))
            os.chmod(fake_py, 0o755)
            env_sh = os.path.join(ROOT, "lab", "bench", "gpu", "env.sh")
            script = ('set -euo pipefail; py=%s; carry=%s; work=%s/work; log() { :; }; source %s; prepare_carried; '
                      'echo "path=${LD_LIBRARY_PATH:-}"' % (fake_py, carry, tmp, env_sh))
            for listed, want in ((True, ""), (False, libdir)):
                with self.subTest(libpython_in_cache=listed):
                    with open(os.path.join(bin_dir, "ldconfig"), "w") as f:
                        f.write("#!/bin/sh\n%sseq 1 200000 | sed 's/^/libother.so./'\n" % (
                            'echo "\tlibpython3.12.so.1.0 (libc6,x86-64) => /lib/libpython3.12.so.1.0"\n' if listed else ""))
                    os.chmod(os.path.join(bin_dir, "ldconfig"), 0o755)
                    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
                    env["PATH"] = bin_dir + os.pathsep + env["PATH"]
                    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=False)
                    self.assertEqual(r.returncode, 0, r.stderr[-2000:])
                    self.assertEqual(r.stdout.strip(), "path=" + want)


if __name__ == "__main__":
    unittest.main()
