"""Triton Python-backend model of the worker's speech contract.

Implements the worker's model contract (docs/contracts.md, "Model contract") in the
ragged batching mode of ../config.pbtxt: Triton's dynamic batcher hands
execute() a list of requests of any lengths; they are transcribed together
in one call of the engine, and each gets its own response:

  inputs   audio FP32 [1, n] (16 kHz mono), optional timestamps BOOL [1, 1],
           optional audio_length INT32 [1, 1] (true length of padded audio)
  outputs  text BYTES [1, 1], word_timestamps BYTES [1, words] (one JSON
           object per word: word, start, end in seconds), num_words INT32 [1, 1]

A request that is invalid (empty, not finite, too long) gets an
INVALID_ARGUMENT error of its own, which the worker treats as permanent;
if the batch call fails, each request is retried alone so that one bad
input cannot fail the others.

The engine is the model config parameter "engine" (each repository's
config.pbtxt names its own; default parakeet); the engines are the package
fleetscribe_asr beside this file, one module each (its __init__ lists them),
and the worker cannot tell them apart. Each instance exports which engine,
encoder path and decoder CUDA-graph mode it runs as the Triton metric
fleetscribe_model_engine (the worker reports it).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# The engines' package sits beside this file: Triton's Python backend puts
# this folder on sys.path, the tests load this file by its path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fleetscribe_asr as engines
from fleetscribe_asr.common import SAMPLE_RATE, Audio, Hypothesis, log_info

try:  # Only inside Triton; the tests put a stand-in in its place.
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover
    pb_utils = None

# Longest chunk accepted: the worker sends at most -chunk-seconds (30 s);
# Parakeet TDT handles far longer, but a runaway input must not take the GPU.
MAX_SECONDS = 600


class RequestError(ValueError):
    """An input the model must refuse: a permanent, per-request error."""


# A vocabulary's bounds (the worker's, contract.MaxPhrases and MaxPhraseRunes).
MAX_PHRASES = 1000
MAX_PHRASE_CHARS = 100


def read_vocabulary(request: Any) -> bytes | None:
    """The request's vocabulary as sent (a JSON list of phrases), None where
    it has none."""
    t = pb_utils.get_input_tensor_by_name(request, "vocabulary")
    if t is None:
        return None
    elems = t.as_numpy().reshape(-1)
    return bytes(elems[0]) if elems.size else b""


def parse_vocabulary(raw: bytes) -> tuple[str, ...]:
    """The phrases of a vocabulary as sent, or a RequestError saying what is
    wrong (never the phrases' text)."""
    try:
        phrases = json.loads(raw) if raw else None
    except (ValueError, TypeError):
        raise RequestError("input 'vocabulary' is not a JSON list of phrases") from None
    if not isinstance(phrases, list) or not phrases or not all(isinstance(p, str) and p.strip() for p in phrases):
        raise RequestError("input 'vocabulary' is not a JSON list of phrases (non-empty strings)")
    if len(phrases) > MAX_PHRASES:
        raise RequestError(f"vocabulary has {len(phrases)} phrases, limit {MAX_PHRASES}")
    for i, p in enumerate(phrases):
        if len(p) > MAX_PHRASE_CHARS:
            raise RequestError(f"vocabulary phrase {i + 1}: {len(p)} characters, limit {MAX_PHRASE_CHARS}")
    return tuple(p.strip() for p in phrases)


class Vocabularies:
    """The vocabularies an instance has accepted, by the SHA-256 of the
    bytes a request carried, the SIZE most recently used kept. Every chunk
    of a job carries the job's vocabulary, and parsing it and checking each
    phrase against the engine's tokenizer costs milliseconds of host time a
    request (5.6 ms for 1,000 phrases through a 1,024-piece SentencePiece
    tokenizer on one core of a 2-core machine: lab/bench/gpu/vocabulary_host.py),
    which a batch of 16 rows would pay in turn before the GPU starts. So a
    vocabulary is checked once and then found by its digest (0.014 ms). A refused one
    is not kept: the next request that carries it is refused again, as
    invalid input."""

    SIZE = 128

    def __init__(self, check: Callable[[tuple[str, ...]], None]) -> None:
        self.check = check
        self.accepted: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()

    def accept(self, raw: bytes) -> tuple[str, ...]:
        """The phrases of raw, parsed and checked the first time they are
        seen; a RequestError where the vocabulary is refused."""
        key = hashlib.sha256(raw).digest()
        phrases = self.accepted.get(key)
        if phrases is not None:
            self.accepted.move_to_end(key)
            return phrases
        phrases = parse_vocabulary(raw)
        self.check(phrases)
        self.accepted[key] = phrases
        while len(self.accepted) > self.SIZE:
            self.accepted.popitem(last=False)
        return phrases


def read_request(request: Any) -> tuple[Audio, bool]:
    """Returns (samples, want_timestamps) of one request, or raises RequestError."""
    audio = pb_utils.get_input_tensor_by_name(request, "audio")
    if audio is None:
        raise RequestError("input 'audio' is missing")
    samples = audio.as_numpy()
    if samples.dtype != np.float32:
        raise RequestError(f"input 'audio' is {samples.dtype}, want float32")
    samples = samples.reshape(-1)
    length = pb_utils.get_input_tensor_by_name(request, "audio_length")
    if length is not None:
        n = int(length.as_numpy().reshape(-1)[0])
        if n < 0 or n > samples.size:
            raise RequestError(f"audio_length {n} outside 0..{samples.size}")
        samples = samples[:n]
    if samples.size == 0:
        raise RequestError("audio is empty")
    if samples.size > MAX_SECONDS * SAMPLE_RATE:
        raise RequestError(f"audio is {samples.size / SAMPLE_RATE:.0f} s, limit {MAX_SECONDS} s")
    if not np.isfinite(samples).all():
        raise RequestError("audio has NaN or infinite samples")
    ts = pb_utils.get_input_tensor_by_name(request, "timestamps")
    want = True if ts is None else bool(ts.as_numpy().reshape(-1)[0])
    return samples, want


class Timings:
    """Where execute's time goes (reading and checking requests, the model,
    building responses), logged every `every` batches (model parameter
    log_timings; 0: never). Numbers only: no audio, no text."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.reset()

    def reset(self) -> None:
        self.batches, self.rows, self.read, self.model, self.respond = 0, 0, 0.0, 0.0, 0.0

    def add(self, rows: int, read: float, model: float, respond: float) -> None:
        if self.every <= 0:
            return
        self.batches += 1
        self.rows += rows
        self.read, self.model, self.respond = self.read + read, self.model + model, self.respond + respond
        if self.batches >= self.every:
            line = "execute timings: %d batches, %.1f rows each; per batch: read %.1f ms, model %.1f ms, respond %.1f ms" % (
                self.batches, self.rows / self.batches, 1000 * self.read / self.batches,
                1000 * self.model / self.batches, 1000 * self.respond / self.batches)
            log_info(line)
            self.reset()


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        typed = engines.asr_params(params)  # an unknown key or a bad value refuses to load
        self.engine = typed.model.engine
        kind = args.get("model_instance_kind", "GPU")
        device = f"cuda:{args.get('model_instance_device_id', '0')}" if kind == "GPU" else "cpu"
        self.max_batch = int(config.get("max_batch_size", 32)) or 1
        self.timings = Timings(typed.model.log_timings)
        self.vocabularies = Vocabularies(self.check_vocabulary)
        ordinal = int(args.get("model_instance_device_id", "0"))
        self.source, self.model = engines.make(typed, engines.Context(
            params=params, kind=kind, device=device, ordinal=ordinal, max_batch=self.max_batch,
            folder=os.path.dirname(os.path.abspath(__file__)), load_nemo=self._load))
        self.export_engine(kind)

    def _load(self, source: str, device: str) -> Any:  # replaced in tests
        from fleetscribe_asr.parakeet import load_model

        return load_model(source, device)

    def export_engine(self, kind: str) -> None:
        """The Triton metric fleetscribe_model_engine: which encoder path
        and decoder CUDA-graph mode this instance runs (the worker reports
        it, and alerts on a GPU partition running eagerly or without
        graphs: NeMo falls back silently on old drivers)."""
        family = getattr(pb_utils, "MetricFamily", None)
        if family is None:
            return
        describe = getattr(self.model, "describe", None)
        encoder, graphs = describe() if describe else ("none", "none")
        self.engine_family = family(name="fleetscribe_model_engine", kind=family.GAUGE,
                                    description=("1 for the engine this model instance runs: its encoder path (compiled, eager, none)"
                                                 " and decoder CUDA-graph mode"))
        self.engine_metric = self.engine_family.Metric(labels={
            "engine": self.engine, "device": "gpu" if kind == "GPU" else "cpu", "encoder": encoder, "decoder_graphs": graphs})
        self.engine_metric.set(1.0)

    def transcribe(self, batch: list[Audio], timestamps: bool, vocabularies: list[tuple[str, ...] | None] | None = None) -> Sequence[Hypothesis]:
        if vocabularies and any(vocabularies):
            takes: Any = self.model  # checked by check_vocabulary: it takes vocabularies
            out: Sequence[Hypothesis] = takes.transcribe(batch, batch_size=len(batch), timestamps=timestamps, verbose=False, vocabularies=vocabularies)
            return out
        return self.model.transcribe(batch, batch_size=len(batch), timestamps=timestamps, verbose=False)

    def check_vocabulary(self, vocabulary: tuple[str, ...]) -> None:
        """Refuses (RequestError) a vocabulary this engine cannot use: an
        engine that takes none, or phrases its tokenizer cannot spell. Before
        any model time: the request fails alone, as invalid input."""
        check = getattr(self.model, "check_vocabulary", None)
        if check is None:
            raise RequestError(f"the {self.engine} engine takes no vocabulary (the whisper engine does, and parakeet with phrase_boosting on)")
        try:
            check(vocabulary)
        except ValueError as e:
            raise RequestError(str(e)) from None

    def execute(self, requests: list[Any]) -> list[Any]:
        t0 = time.perf_counter()
        responses: list[Any] = [None] * len(requests)
        batch: list[Audio] = []
        where: list[int] = []
        vocabularies: list[tuple[str, ...] | None] = []
        want_ts = False
        for i, req in enumerate(requests):
            try:
                samples, ts = read_request(req)
                raw = read_vocabulary(req)
                vocabulary = None if raw is None else self.vocabularies.accept(raw)
            except RequestError as e:
                responses[i] = self.error(str(e), invalid=True)
                continue
            batch.append(samples)
            where.append(i)
            vocabularies.append(vocabulary)
            want_ts = want_ts or ts
        t1 = t2 = time.perf_counter()
        if batch:
            hyps: list[Any] | None
            try:
                hyps = list(self.transcribe(batch, want_ts, vocabularies))
                t2 = time.perf_counter()
                if len(hyps) != len(batch):
                    raise RuntimeError(f"model returned {len(hyps)} results for {len(batch)} inputs")
            except Exception:  # noqa: BLE001 - isolate the input that failed
                hyps = None
            if hyps is None:
                # One input broke the batch: run each alone, so only it fails.
                hyps = []
                for samples, vocabulary in zip(batch, vocabularies, strict=True):
                    try:
                        hyps.append(self.transcribe([samples], want_ts, [vocabulary])[0])
                    except Exception as e:  # noqa: BLE001
                        hyps.append(e)
            for i, hyp in zip(where, hyps, strict=True):
                if isinstance(hyp, Exception):
                    responses[i] = self.error(f"transcription failed: {hyp}", invalid=False)
                else:
                    responses[i] = self.respond(hyp)
        self.timings.add(len(requests), t1 - t0, t2 - t1, time.perf_counter() - t2)
        return responses

    def respond(self, hyp: object) -> Any:
        if not isinstance(hyp, Hypothesis):  # an engine's bug: this request fails, the batch goes on
            return self.error(f"the {self.engine} engine returned a {type(hyp).__name__}, not a Hypothesis", invalid=False)
        words = hyp.words
        text = np.array([[hyp.text.strip().encode("utf-8")]], dtype=np.object_)
        stamps = np.array([[json.dumps(w.contract()).encode("utf-8") for w in words]], dtype=np.object_).reshape(1, len(words))
        count = np.array([[len(words)]], dtype=np.int32)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text", text),
            pb_utils.Tensor("word_timestamps", stamps),
            pb_utils.Tensor("num_words", count),
        ])

    def error(self, message: str, invalid: bool) -> Any:
        code = pb_utils.TritonError.INVALID_ARG if invalid else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, code))

    def finalize(self) -> None:
        del self.model
