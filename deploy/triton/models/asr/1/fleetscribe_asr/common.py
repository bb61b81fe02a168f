"""What every engine shares with the contract (model.py): the sample rate,
the hypothesis NeMo's engines return, and the log."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

try:  # Only inside Triton; the tests put a stand-in in its place.
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover
    pb_utils = None

SAMPLE_RATE = 16000

# One request's samples (16 kHz mono), a word as the contract sends it
# (word, start, end, optional confidence) and a model's parameters.
Audio = npt.NDArray[np.float32]
Word = dict[str, Any]
Params = dict[str, str]


class Hypothesis:
    """A transcription result shaped as NeMo's: text, and word timings in
    timestamp["word"] (dicts of word, start and end in seconds)."""

    def __init__(self, text: str, words: list[Word]) -> None:
        self.text = text
        self.timestamp = {"word": words}


def log_info(line: str) -> None:
    """Logs a line of numbers or names (never audio or text) through
    Triton's log, or stdout where there is none."""
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        logger.log_info(line)
    else:
        print(line, flush=True)
