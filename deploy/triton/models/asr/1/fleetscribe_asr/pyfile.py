"""The module engine: the engine of a Python file named by the model
parameter module (the GPU benchmark's stand-in, or your own model)."""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .common import Audio, Hypothesis, Params, from_nemo
from .compiled import CompiledEncoder, EncoderOptions, compiles_on


def load_module(path: str, params: Params, device: str, options: EncoderOptions) -> ModuleEngine:
    """The engine of a Python file: its load(params, device), or
    load(params, device, compiler) where it takes a third argument:
    compiler(fn, key, regions) is options.encoder for the device (a
    CompiledEncoder in the shared compile cache, or None where the encoder
    runs eagerly: the GPU benchmark's stand-in compiles its encoder as the
    Parakeet engine does)."""
    spec = importlib.util.spec_from_file_location("fleetscribe_engine", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"model parameter module={path!r}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if len(inspect.signature(mod.load).parameters) >= 3:
        def compiler(fn: Callable[..., Any], key: str, regions: Sequence[Any] = ()) -> CompiledEncoder | None:
            return options.encoder(fn, device, key, regions) if options.mode == "compiled" and compiles_on(device) else None

        return ModuleEngine(mod.load(params, device, compiler))
    return ModuleEngine(mod.load(params, device))


class ModuleEngine:
    """A module's engine as model.py takes it: its transcribe returns
    NeMo-shaped results (text, timestamp["word"]), read into Hypothesis;
    everything else (describe, check_vocabulary, ...) is the module's own."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def transcribe(self, audio: list[Audio], batch_size: int, timestamps: bool, verbose: bool, **kw: Any) -> list[Hypothesis]:
        return [from_nemo(h) for h in self.inner.transcribe(audio, batch_size=batch_size, timestamps=timestamps, verbose=verbose, **kw)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
