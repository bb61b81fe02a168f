"""The engines behind model.py's contract, by name (the model parameter
"engine"). model.py reads requests, batches them, isolates bad inputs and
responds; an engine only transcribes a batch of 16 kHz mono float32 arrays,
with NeMo's transcribe signature, and returns one common.Hypothesis a row
(text, and its words with their times). Each engine is its own module,
imported only where it is chosen:

  parakeet      NVIDIA Parakeet TDT 0.6B V2 through NeMo (parakeet.py; the
                GPU repository deploy/triton/models; the default)
  pocketsphinx  the CMU pocketsphinx recogniser, on CPU (sphinx.py;
                deploy/triton/cpu: the fast tests, the chaos suite)
  whisper       Whisper tiny.en through faster-whisper, on CPU (whisper.py;
                deploy/triton/cpu-whisper: the demo, the accuracy
                benchmarks): a neural CPU stand-in for Parakeet
  echo          answers "samples N" after a modelled batch time (echo.py;
                conformance tests and serving benchmarks, never real audio)
  module        the engine of a Python file named by the parameter "module"
                (pyfile.py; the GPU benchmark's stand-in, or your own)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .common import Hypothesis
from .options import (
    ENGINE_OPTIONS,
    AsrParams,
    EchoOptions,
    EncoderParams,
    EncoderStudy,
    HostOptions,
    ModuleOptions,
    ParakeetOptions,
    SphinxOptions,
    WhisperOptions,
    asr_params,
)

__all__ = ["NAMES", "AsrParams", "Context", "Engine", "asr_params", "make"]

Audio = npt.NDArray[np.float32]
NAMES = tuple(ENGINE_OPTIONS)


class Engine(Protocol):
    """What model.py asks of an engine. One that takes vocabularies also
    has check_vocabulary(phrases), which raises ValueError for phrases it
    cannot use, and transcribe(..., vocabularies=[phrases or None per
    row]); model.py passes vocabularies only to such an engine, and only
    when a row has one."""

    def transcribe(self, audio: list[Audio], batch_size: int, timestamps: bool, verbose: bool) -> Sequence[Hypothesis]:
        """One hypothesis for each row of audio, in order."""


@dataclass
class Context:
    """Where an engine runs: its model parameters, the instance's kind (GPU
    or CPU) and device ("cuda:N" or "cpu"), the model's max_batch_size,
    the model's folder (for relative paths) and the loader of NeMo models
    (replaced in tests)."""

    params: dict[str, str]
    kind: str
    device: str
    ordinal: int
    max_batch: int
    folder: str
    load_nemo: Callable[[str, str], Any]


def make(params: AsrParams, ctx: Context) -> tuple[str, Engine]:
    """The engine params name, started and warmed for ctx, and where it
    came from (a model name or file, for the log). params are the model's
    parameters typed (options.asr_params, which refuses unknown keys); a
    ValueError names what else is wrong with them."""
    name = params.model.engine
    if name == "pocketsphinx":
        from .sphinx import SphinxModel

        return "pocketsphinx", SphinxModel(params.get(SphinxOptions))
    if name == "whisper":
        from .whisper import WhisperModel

        return "whisper", WhisperModel(params.get(WhisperOptions))
    if name == "echo":
        from .echo import EchoModel

        return "echo", EchoModel(params.get(EchoOptions))
    from . import host
    from .compiled import EncoderOptions

    note = host.configure(params.get(HostOptions), ctx.kind, ctx.ordinal)
    options = EncoderOptions.from_typed(params.get(EncoderParams), ctx.max_batch, EncoderStudy.from_env())
    if name == "module":
        from .pyfile import load_module

        path = params.get(ModuleOptions).module
        if not path:
            raise ValueError("engine=module needs the model parameter module (a Python file)")
        if not os.path.isabs(path):
            path = os.path.join(ctx.folder, path)
        return path, load_module(path, dict(ctx.params, max_batch=str(ctx.max_batch)), ctx.device, options)
    from .parakeet import start

    opts: ParakeetOptions = params.get(ParakeetOptions)
    source = os.environ.get("PARAKEET_MODEL") or opts.model
    return start(source, opts, ctx.device, ctx.max_batch, options, ctx.load_nemo, note)
