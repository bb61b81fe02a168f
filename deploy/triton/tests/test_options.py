"""The models' parameters, typed (fleetscribe_asr/options.py): unknown keys
and bad values refuse to load, every shipped configuration loads, and
docs/triton.md's reference tables are the classes' own."""

from __future__ import annotations

import glob
import os
import re
import unittest
from unittest import mock

from backend_stub import HERE  # noqa: F401 - installs the stand-in triton_python_backend_utils, puts fleetscribe_asr on the path

from fleetscribe_asr import diarize, options, sortformer  # noqa: E402 - on the path backend_stub set

ROOT = os.path.join(HERE, "..", "..", "..")
PARAMETER = re.compile(r'^parameters: \{\n  key: "([^"]*)"\n  value: \{\n    string_value: "([^"]*)"\n  \}\n\}$', re.M)


def config_parameters(path: str) -> dict[str, str]:
    """A config.pbtxt's parameters, as modelspec renders them."""
    with open(path) as f:
        return dict(PARAMETER.findall(f.read()))


class AsrParametersTest(unittest.TestCase):
    def test_a_misspelt_key_names_itself_and_what_is_known(self):
        with self.assertRaises(ValueError) as e:
            options.asr_params({"engine": "whisper", "whispr_beam": "5"})
        self.assertIn("unknown asr model parameter(s) whispr_beam for engine whisper; known: engine, log_timings, whisper_beam", str(e.exception))

    def test_another_engines_key_is_refused(self):
        # The combination is wrong even though each key exists somewhere.
        for params in ({"engine": "pocketsphinx", "whisper_beam": "5"}, {"engine": "whisper", "word_confidence": "max_prob"},
                       {"engine": "echo", "encoder": "eager"}, {"engine": "parakeet", "batch_delay_ms": "5"}):
            with self.subTest(params=params), self.assertRaises(ValueError):
                options.asr_params(params)

    def test_values_of_the_wrong_kind_are_refused(self):
        for params in ({"engine": "whisper", "whisper_beam": "five"}, {"engine": "whisper", "whisper_vad": "of"},
                       {"engine": "whisper", "whisper_beam": "0"}, {"engine": "parakeet", "precision": "fp8"},
                       {"engine": "parakeet", "word_confidence": "maxprob"}, {"engine": "parakeet", "phrase_boosting": "yes please"},
                       {"engine": "parakeet", "cuda_sync": "sleep"}, {"engine": "parakeet", "encoder": "jit"},
                       {"engine": "parakeet", "warmup_seconds": "0"}, {"engine": "parakeet", "log_timings": "often"}, {"engine": "nemo"}):
            with self.subTest(params=params), self.assertRaises(ValueError):
                options.asr_params(params)

    def test_typed_values_and_defaults(self):
        p = options.asr_params({"engine": "parakeet", "phrase_boosting": "on", "warmup_seconds": "12.5", "length_buckets": "45",
                                "log_timings": "100"})
        self.assertEqual((p.model.engine, p.model.log_timings), ("parakeet", 100))
        self.assertEqual((p.get(options.ParakeetOptions).phrase_boosting, p.get(options.ParakeetOptions).warmup_seconds), (True, 12.5))
        self.assertEqual((p.get(options.EncoderParams).length_buckets, p.get(options.HostOptions).cuda_sync), ("45", "blocking"))
        self.assertEqual(options.asr_params({}).model.engine, "parakeet")
        self.assertEqual(options.asr_params({"engine": "echo", "batch_delay_ms": ""}).get(options.EchoOptions).batch_delay_ms, 0.0,
                         "an empty value is the default")

    def test_the_module_engine_gets_the_keys_no_class_declares(self):
        p = options.asr_params({"engine": "module", "module": "standin.py", "decoder": "eager", "size": "full", "encoder": "eager"})
        self.assertEqual(p.rest, {"decoder": "eager", "size": "full"})
        self.assertEqual((p.get(options.ModuleOptions).module, p.get(options.EncoderParams).encoder), ("standin.py", "eager"))

    def test_study_knobs_are_not_model_parameters(self):
        for key in ("encoder_graphs", "encoder_casts", "encoder_tuning", "graphs"):
            with self.subTest(key=key), self.assertRaises(ValueError):
                options.asr_params({"engine": "parakeet", key: "on"})
        with mock.patch.dict(os.environ, {"FLEETSCRIBE_ENCODER_STUDY": "graphs=on, tuning=autotune"}):
            self.assertEqual(options.EncoderStudy.from_env(), options.EncoderStudy(graphs=True, tuning="autotune"))

    def test_every_shipped_configuration_loads(self):
        asr = sorted(glob.glob(os.path.join(ROOT, "deploy", "triton", "*", "asr", "config.pbtxt")))
        diar = sorted(glob.glob(os.path.join(ROOT, "deploy", "triton", "*", "diarize", "config.pbtxt")))
        self.assertGreaterEqual((len(asr), len(diar)), (3, 3))
        for path in asr + [os.path.join(ROOT, "deploy", "triton", "variants", "asr-buckets.pbtxt")]:
            with self.subTest(path=os.path.relpath(path, ROOT)):
                options.asr_params(config_parameters(path))
        for path in diar:
            with self.subTest(path=os.path.relpath(path, ROOT)):
                params = config_parameters(path)
                self.assertIn("engine", params)  # the reading above found the parameters
                cls = sortformer.SortformerOptions if params.get("engine") == "sortformer" else diarize.DiarizeOptions
                cls.from_params(params)


class ReferenceTest(unittest.TestCase):
    def test_docs_reference_is_current(self):
        """docs/triton.md's parameter tables are generated from the classes
        (UPDATE_DOCS=1 rewrites them)."""
        path = os.path.join(ROOT, "docs", "triton.md")
        with open(path) as f:
            doc = f.read()
        want = doc
        for name, table in (("asr", options.reference()), ("diarize", diarize.DiarizeOptions.reference()),
                            ("sortformer", sortformer.SortformerOptions.reference())):
            begin, end = f"<!-- {name} parameters: begin -->\n", f"<!-- {name} parameters: end -->"
            head, rest = want.split(begin)
            _, tail = rest.split(end)
            want = head + begin + table + end + tail
        if os.environ.get("UPDATE_DOCS") == "1":
            with open(path, "w") as f:
                f.write(want)
            return
        self.assertEqual(doc, want, "docs/triton.md's parameter tables are not the options classes' (UPDATE_DOCS=1 rewrites them)")

    def test_every_key_read_is_declared(self):
        """No engine reads a parameter by name outside options.py: the
        shipped code has no params.get left."""
        src = os.path.join(ROOT, "deploy", "triton", "models", "asr", "1")
        for path in glob.glob(os.path.join(src, "**", "*.py"), recursive=True):
            with open(path) as f:
                text = f.read()
            with self.subTest(path=os.path.relpath(path, src)):
                self.assertNotRegex(text, r"params\.get\(\"", "a parameter read by name: declare it in options.py")


if __name__ == "__main__":
    unittest.main()
