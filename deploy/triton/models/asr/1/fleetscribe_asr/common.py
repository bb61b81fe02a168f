"""What every engine shares with the contract (model.py): the sample rate,
the hypothesis an engine returns (typed; NeMo's own shape is read once, by
from_nemo), and the log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

try:  # Only inside Triton; the tests put a stand-in in its place.
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover
    pb_utils = None

SAMPLE_RATE = 16000

# One request's samples (16 kHz mono) and a model's parameters.
Audio = npt.NDArray[np.float32]
Params = dict[str, str]


@dataclass(frozen=True)
class Word:
    """A word as the contract sends it: its text, its start and end in
    seconds into the request's audio, and the recogniser's confidence in it
    (0-1) where the recogniser gives one."""

    word: str
    start: float
    end: float
    confidence: float | None = None

    def contract(self) -> dict[str, str | float]:
        """The word_timestamps object: times to the millisecond, confidence
        only where there is one."""
        out: dict[str, str | float] = {"word": self.word, "start": round(self.start, 3), "end": round(self.end, 3)}
        if self.confidence is not None:
            out["confidence"] = self.confidence
        return out


@dataclass(frozen=True)
class Hypothesis:
    """What an engine returns for one row: its text and, when timestamps
    were asked for, its words in order."""

    text: str
    words: tuple[Word, ...] = ()


def from_nemo(hyp: Any) -> Hypothesis:
    """A NeMo-shaped result (what NeMo's transcribe returns, and what a
    module engine returns: text, and timestamp["word"] of dicts with word
    or char, start, end and maybe confidence) as a Hypothesis. The one place
    that shape is read: a word without text or times is left out."""
    stamps = getattr(hyp, "timestamp", None)
    words = []
    for w in stamps.get("word", []) if isinstance(stamps, dict) else []:
        text = w.get("word") or w.get("char") or ""
        start, end = w.get("start"), w.get("end")
        if not text or start is None or end is None:
            continue
        conf = w.get("confidence")
        words.append(Word(str(text), float(start), float(end), None if conf is None else float(conf)))
    text = hyp.text if hasattr(hyp, "text") else str(hyp)
    return Hypothesis(str(text).strip(), tuple(words))


def log_info(line: str) -> None:
    """Logs a line of numbers or names (never audio or text) through
    Triton's log, or stdout where there is none."""
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        logger.log_info(line)
    else:
        print(line, flush=True)
