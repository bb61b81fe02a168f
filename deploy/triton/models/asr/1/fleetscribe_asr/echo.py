"""The echo engine: "samples N" after a modelled batch time (conformance
tests and benchmarks of the serving path; never for real audio)."""

from __future__ import annotations

import os
import time

from .common import SAMPLE_RATE, Audio, Hypothesis, Word
from .options import EchoOptions


class EchoModel:
    """Answers "samples N" for N samples (two timed words: "samples" over
    the first half, N over the second), so a test sees which input each
    result came from. A batch takes batch_delay_ms, plus row_delay_ms for
    each 30 s of audio in it (a row's share scaled by its length): a simple
    model of a GPU's batch time, so that batching, queueing and priority
    can be observed on a real server. While the file fail_file names
    exists, every batch fails (a model that fails everything, as after an
    MPS fault), for outage benchmarks on a real server. A row sent with a
    vocabulary of K phrases answers "samples N vocabulary K", so a test of
    the serving path sees that its vocabulary arrived."""

    ROW_SAMPLES = 30 * SAMPLE_RATE

    def __init__(self, opts: EchoOptions | None = None) -> None:
        opts = opts or EchoOptions()
        self.batch_delay = opts.batch_delay_ms / 1000
        self.row_delay = opts.row_delay_ms / 1000
        self.fail_file = opts.fail_file

    def check_vocabulary(self, vocabulary: tuple[str, ...]) -> None:
        """Every vocabulary the contract allows is taken."""

    def transcribe(self, audio: list[Audio], batch_size: int, timestamps: bool, verbose: bool,  # noqa: ARG002 - NeMo's signature
                   vocabularies: list[tuple[str, ...] | None] | None = None) -> list[Hypothesis]:
        if self.fail_file and os.path.exists(self.fail_file):
            raise RuntimeError("echo engine failing every request (fail_file exists)")
        delay = self.batch_delay + self.row_delay * sum(a.size for a in audio) / self.ROW_SAMPLES
        if delay > 0:
            time.sleep(delay)
        out = []
        for i, samples in enumerate(audio):
            n = int(samples.size)
            d = n / SAMPLE_RATE
            words = [Word("samples", 0.0, d / 2), Word(str(n), d / 2, d)]
            text = f"samples {n}"
            vocabulary = vocabularies[i] if vocabularies else None
            if vocabulary:
                text += f" vocabulary {len(vocabulary)}"
                words += [Word("vocabulary", d, d), Word(str(len(vocabulary)), d, d)]
            out.append(Hypothesis(text, tuple(words) if timestamps else ()))
        return out
