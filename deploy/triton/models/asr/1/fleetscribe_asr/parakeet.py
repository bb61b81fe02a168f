"""The parakeet engine: NVIDIA Parakeet TDT through NeMo, its encoder
compiled (compiled.py), its decoder NeMo's greedy_batch under CUDA graphs."""

from __future__ import annotations

import collections
import contextlib
import os
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .common import SAMPLE_RATE, Audio, Hypothesis, from_nemo, log_info
from .compiled import (
    CompiledEncoder,
    Encoded,
    EncoderOptions,
    PinnedRows,
    Tensor,
    compiles_on,
    conv_forms,
    device_name,
    gpu_memory,
    linear_form,
    set_cudnn_attention,
    source_identity,
)
from .confidence import METHODS, WordConfidence
from .options import ParakeetOptions

DEFAULT_MODEL = "nvidia/parakeet-tdt-0.6b-v2"


def load_model(source: str, device: str) -> Any:
    """Loads a NeMo ASR model from a .nemo path or a model name."""
    import nemo.collections.asr as nemo_asr  # heavy: imported only here

    if source.endswith(".nemo") or os.path.exists(source):
        model = nemo_asr.models.ASRModel.restore_from(restore_path=source, map_location=device)
    else:
        model = nemo_asr.models.ASRModel.from_pretrained(model_name=source, map_location=device)
    model.eval()
    return model


def subsampling_row_limit(model: Any, hop: int) -> Callable[[int], int] | None:
    """The most rows a compiled shape of n samples may hold for model's
    convolutional subsampling, or None where it sets no limit. NeMo splits
    a batch whose subsampling input (rows x frames x features) exceeds
    2**31 / channels x stride**2 elements, so that no convolution output
    passes 32-bit indexing. Compiled, that split path corrupted GPU memory:
    on an H200, NeMo's Parakeet-shaped model with its encoder compiled for
    64 rows of 45 s (36.9 M elements, over the 33.6 M limit) ended in a CUDA
    illegal memory access at the next kernels, in the offline study and in
    every partition, while 64 rows of 30 s and 48 of 45 s (under it) ran
    (docs/benchmarks.md). Larger batches run in parts instead (compiled.plan)."""
    pre = getattr(getattr(model, "encoder", None), "pre_encode", None)
    if pre is None or not getattr(pre, "conv2d_subsampling", False) or getattr(pre, "subsampling_conv_chunking_factor", -1) != 1:
        return None
    ceiling = 2**31 / pre._conv_channels * pre._stride * pre._stride
    features = pre._feat_in

    def limit(n: int) -> int:
        return int(ceiling // ((n // hop + 1) * features))

    return limit


def attention_modules(model: Any) -> list[Any]:
    """The modules of model whose attention can run through PyTorch's
    scaled_dot_product_attention (NeMo's use_pytorch_sdpa: the conformer
    layers' relative-position attention)."""
    modules = getattr(model, "modules", None)
    return [m for m in modules() if hasattr(m, "use_pytorch_sdpa")] if modules is not None else []


def model_uses_sdpa(model: Any) -> bool:
    """Whether model's own configuration runs its attention through SDPA
    (NeMo's default: no)."""
    enc: Any = getattr(getattr(model, "cfg", None), "encoder", None)
    get = getattr(enc, "get", None)
    return bool(get("use_pytorch_sdpa", False)) if callable(get) else False


class NemoEngine:
    """A NeMo transducer model (Parakeet TDT) as Triton calls it. NeMo's
    transcribe() builds a dataloader for every call and changes the
    decoding strategy (rebuilding the decoder and its CUDA graphs) whenever
    the timestamps flag differs from the last call's; here the decoder is
    configured once, with word timestamps, and each batch is padded into one
    tensor and passed through the preprocessor, the encoder and the decoder.
    Models without a transducer decoder go through transcribe().

    The attention runs through PyTorch's fused scaled_dot_product_attention
    (NeMo's use_pytorch_sdpa, with the relative positions as its additive
    mask) unless the encoder_attention option is model (the model's own
    configuration: NeMo's attention in separate matrix multiplies and a
    softmax). On an H200, at 16 rows of 45 s, the compiled encoder took
    52.9 ms with it and 64.9 without, eagerly 96.0 and 116.7
    (docs/benchmarks.md)."""

    # Word confidence methods (model parameter word_confidence): NeMo's
    # measures of the label distribution that emitted each token, a word's
    # its lowest token's, computed after decoding (confidence.py).
    CONFIDENCE_METHODS = ("off", *METHODS)
    # Boosting trees kept at once: the vocabularies of a queue's jobs are
    # few; inline ones may be many, so the least recently used goes.
    MAX_TREES = 64

    def __init__(self, model: Any, device: str, precision: str, options: EncoderOptions | None = None, source: str = "",
                 confidence: str = "off", boosting: bool = False) -> None:
        options = options or EncoderOptions()
        self.boosting = boosting
        # A vocabulary's key -> its boosting tree's id in the decoder's
        # multi-model, the least recently used first; at most MAX_TREES kept.
        self.trees: collections.OrderedDict[str, int] = collections.OrderedDict()
        if confidence not in self.CONFIDENCE_METHODS:
            raise ValueError(f"model parameter word_confidence={confidence!r}: want {', '.join(self.CONFIDENCE_METHODS)}")
        self.confidence = confidence
        self.word_confidence: WordConfidence | None = None
        self.model, self.device = model, device
        self.compiled: CompiledEncoder | None = None
        self.torch: Any = None
        self.dtype: Any = None
        self.config = ""
        self.encoder_path = "none"
        self.attention, self.cudnn_attention = options.attention, options.cudnn_attention
        self.attention_modules = attention_modules(model)
        self.apply_attention()
        # pointwise_convs=matmul, subsampling_convs=taps: the conformer's
        # convolutions in other forms for the compiler (convs.py), set
        # before anything compiles; engines that share the model share them.
        self.pointwise, self.taps = conv_forms(getattr(model, "encoder", None), options.pointwise_convs, options.subsampling_convs)
        # linear_precision=fp8: the layers' linear layers as FP8 matrix
        # multiplies where compiled (fp8.py), quantised from the loaded weights.
        self.fp8 = linear_form(getattr(model, "encoder", None), options.linear_precision, device)
        self.direct = hasattr(getattr(model, "decoding", None), "rnnt_decoder_predictions_tensor")
        if self.direct:
            import torch
            from omegaconf import open_dict

            self.torch = torch
            self.dtype = torch.bfloat16 if precision == "bf16" and str(device).startswith("cuda") else None
            set_cudnn_attention(self.cudnn_attention, device)
            cfg = model.cfg.decoding
            with open_dict(cfg):
                cfg.compute_timestamps = True
                # Greedy batched decoding under CUDA graphs, as NeMo does by
                # default, whatever the .nemo file says: a model saved with
                # the graphs off decoded eagerly here, 5-7x slower a batch.
                if cfg.get("strategy") == "greedy_batch" and "greedy" in cfg:
                    cfg.greedy.use_cuda_graph_decoder = True
                # Word confidence is computed after decoding (confidence.py),
                # never in NeMo's decoder: its per-frame bookkeeping cost 59%.
                cfg.confidence_cfg = {"preserve_word_confidence": False}
                # Phrase boosting per row (NeMo's per-stream biasing): each
                # vocabulary's boosting tree is built once, kept in the
                # decoder's multi-model, and named by the rows that use it.
                if boosting and "greedy" in cfg:
                    cfg.greedy.enable_per_stream_biasing = True
            model.change_decoding_strategy(cfg, verbose=False)
            if confidence != "off":
                self.word_confidence = WordConfidence(model, confidence)
            g = cfg.get("greedy", {})
            self.config = ("strategy %s, loop_labels %s, use_cuda_graph_decoder %s, %s; attention %s; %d pointwise convolutions as matrix "
                           "multiplies, %d of the subsampling by taps, %d linear layers in FP8; word confidence %s; phrase boosting %s") % (
                cfg.get("strategy"), g.get("loop_labels"), g.get("use_cuda_graph_decoder"),
                type(getattr(model.decoding, "decoding", None)).__name__, self.attention_name(), self.pointwise, self.taps, self.fp8,
                confidence, "on" if g.get("enable_per_stream_biasing") else "off")
            self.staging = PinnedRows(device)
            self.encoder_path = "eager"
            if options.mode == "compiled" and compiles_on(device) and hasattr(model.encoder, "forward_internal"):
                enc, pre = model.encoder, model.preprocessor
                # The positional encodings of the longest bucket, made now:
                # forward() extends them as a side effect, outside the graph.
                hop = round(float(model.cfg.preprocessor.get("window_stride", 0.01)) * SAMPLE_RATE)
                if hasattr(enc, "update_max_seq_length"):
                    enc.update_max_seq_length(seq_length=max(options.lengths) // hop + 1, device=device)

                def encode(x: Tensor, lengths: Tensor) -> Encoded:
                    features, n = pre(input_signal=x, length=lengths)
                    out: Encoded = enc.forward_internal(features, n)
                    return out

                # The conformer layers (one code, one compiled graph a shape
                # for all 24) and the subsampling: nearly all the work.
                regions = [m for m in [getattr(enc, "pre_encode", None), *getattr(enc, "layers", [])] if m is not None]
                key = "nemo|%s|%s|%s|%s" % (source_identity(source), torch.__version__, device_name(device), precision)
                self.compiled = options.encoder(encode, device, key, regions, row_limit=subsampling_row_limit(model, hop))
            elif options.mode not in ("compiled", "eager"):
                raise ValueError(f"model parameter encoder={options.mode!r}: want compiled or eager")

    def apply_attention(self) -> None:
        """Sets every attention module's path to this engine's choice
        (engines that share one model, as the encoder study's do, call it
        before each of their calls)."""
        sdpa = self.attention in ("sdpa", "flex") or model_uses_sdpa(self.model)
        for m in self.attention_modules:
            m.use_pytorch_sdpa = sdpa
        # encoder_attention=flex: where compiled, FlexAttention (relpos.py);
        # eagerly the sdpa path above.
        self.flex = 0
        encoder = getattr(self.model, "encoder", None)
        if encoder is not None and self.attention_modules:
            from . import relpos

            swapped = relpos.as_flex([encoder], on=self.attention == "flex")
            self.flex = swapped if self.attention == "flex" else 0

    def attention_name(self) -> str:
        """The attention path, for the start-up log."""
        if not self.attention_modules:
            return "the model's own"
        on = sum(bool(m.use_pytorch_sdpa) for m in self.attention_modules)
        flex = " (FlexAttention in %d where compiled)" % self.flex if self.flex else ""
        return "sdpa in %d of %d modules%s" % (on, len(self.attention_modules), flex) if on else "NeMo's matrix multiplies"

    def describe(self) -> tuple[str, str]:
        """(encoder path, decoder CUDA-graph mode), as the engine metric says them."""
        return (self.compiled.path if self.compiled is not None else self.encoder_path), self.graphs_mode()

    def graphs_mode(self) -> str:
        """Which of NeMo's CUDA-graph modes the decoder runs in (full_graph,
        no_while_loops, no_graphs), or "none" where it has no such decoder.
        Known only once a batch has been decoded."""
        computer = getattr(getattr(getattr(self.model, "decoding", None), "decoding", None), "decoding_computer", None)
        mode = getattr(computer, "cuda_graphs_mode", None)
        return str(mode) if mode is not None else "none"

    @contextlib.contextmanager
    def inference(self) -> Iterator[None]:
        """Inference mode and the engine's autocast, as every batch runs."""
        torch = self.torch
        with torch.inference_mode(), torch.autocast("cuda", dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            yield

    def encode(self, audio: list[Audio]) -> Encoded:
        """The encoder's output for audio (only the real rows): compiled
        where a static shape holds the batch, else eagerly."""
        return self.compiled.encode(audio, self.encode_eagerly) if self.compiled is not None else self.encode_eagerly(audio)

    def encode_eagerly(self, audio: list[Audio]) -> Encoded:
        x = self.staging(audio)  # a batch's copy has ended when its hypotheses are back on the host
        lengths = self.torch.tensor([a.size for a in audio], device=self.device)
        out: Encoded = self.model.forward(input_signal=x, input_signal_length=lengths)
        return out

    def warm(self, seconds: float, max_batch: int, timestamps: bool = True) -> None:
        """Compiles (or loads) and captures every static shape, then one
        batch of the longest chunk at the largest batch, which captures the
        decoder's CUDA graphs; a partition is ready only after this."""
        rng = np.random.default_rng(0)

        def run(n: int, rows: int) -> None:
            quiet = rng.standard_normal(n).astype(np.float32) * 1e-3
            self.transcribe([quiet] * rows, rows, timestamps, False)

        def encode(n: int, rows: int) -> None:
            quiet = rng.standard_normal(n).astype(np.float32) * 1e-3
            with self.inference():
                self.encode([quiet] * rows)

        if self.compiled is not None:
            try:
                self.compiled.warm(run, encode)
            except Exception as e:  # noqa: BLE001 - serve eagerly (the engine metric says so, and an alert fires) rather than never
                log_info("compiling the encoder failed (%s: %s): it runs eagerly\n%s" % (type(e).__name__, e, traceback.format_exc()))
                self.compiled = None
        run(int(seconds * SAMPLE_RATE), max_batch)

    def check_vocabulary(self, vocabulary: tuple[str, ...]) -> None:
        """Refuses a vocabulary where phrase boosting is off (the model
        parameter phrase_boosting) or a phrase the model's tokenizer cannot
        spell (a character it maps to its unknown token)."""
        if not self.boosting or not self.direct:
            raise ValueError("the parakeet engine's phrase boosting is off (model parameter phrase_boosting)")
        tok = self.model.tokenizer
        unk = getattr(tok, "unk_id", None)
        for i, phrase in enumerate(vocabulary):
            ids = tok.text_to_ids(phrase)
            if not ids or (unk is not None and unk >= 0 and unk in ids):
                raise ValueError(f"vocabulary phrase {i + 1}: a character this model's tokenizer cannot spell (phrases must match its "
                                 "writing: Parakeet writes capitals and punctuation)")

    def biasing(self, vocabularies: list[tuple[str, ...] | None] | None) -> list[Any] | None:
        """The decoder's partial hypotheses naming each row's boosting tree
        (None where no row has a vocabulary), building and adding a tree
        the first time its vocabulary is seen."""
        if not vocabularies or not any(vocabularies):
            return None
        import hashlib

        from nemo.collections.asr.parts.context_biasing.biasing_multi_model import BiasingRequestItemConfig
        from nemo.collections.asr.parts.context_biasing.boosting_graph_batched import BoostingTreeModelConfig
        multi = self.model.decoding.decoding.decoding_computer.biasing_multi_model
        request = biasing_request_class()
        out: list[Any] = []
        for v in vocabularies:
            if not v:
                out.append(None)
                continue
            key = hashlib.sha256("\n".join(v).encode()).hexdigest()
            if key in self.trees:
                self.trees.move_to_end(key)
            else:
                while len(self.trees) >= self.MAX_TREES:
                    _, old = self.trees.popitem(last=False)
                    multi.remove_model(old)
                item = BiasingRequestItemConfig(boosting_model_cfg=BoostingTreeModelConfig(key_phrases_list=list(v)), cache_key=key,
                                                auto_manage_multi_model=False)
                item.add_to_multi_model(tokenizer=self.model.tokenizer, biasing_multi_model=multi)
                self.trees[key] = int(item.multi_model_id)
            out.append(request(y_sequence=[], score=0.0, biasing_cfg=BiasingRequestItemConfig(
                multi_model_id=self.trees[key], cache_key=key, auto_manage_multi_model=False)))
        return out

    def transcribe(self, audio: list[Audio], batch_size: int, timestamps: bool, verbose: bool,
                   vocabularies: list[tuple[str, ...] | None] | None = None) -> list[Hypothesis]:
        if not self.direct:
            return [from_nemo(h) for h in self.model.transcribe(audio, batch_size=batch_size, timestamps=timestamps, verbose=verbose)]
        from nemo.collections.asr.parts.utils.timestamp_utils import process_timestamp_outputs

        partial = self.biasing(vocabularies) if self.boosting else None
        with self.inference():
            enc, enc_len = self.encode(audio)
            hyps = self.model.decoding.rnnt_decoder_predictions_tensor(enc, enc_len, return_hypotheses=True, partial_hypotheses=partial)
            confidences = self.word_confidence(enc, hyps) if timestamps and self.word_confidence is not None else None
        if timestamps:
            hyps = process_timestamp_outputs(hyps, self.model.encoder.subsampling_factor,
                                             self.model.cfg.preprocessor.window_stride)
            if confidences is not None:
                for h, conf in zip(hyps, confidences, strict=True):
                    attach_confidence(h, conf)
        return [from_nemo(h) for h in hyps]


_REQUEST: Any = None


def biasing_request_class() -> Any:
    """NeMo's Hypothesis as an empty request naming a row's boosting tree,
    whose merge with the decoded continuation also keeps the TDT token
    durations (NeMo 2.7.3's merge_ drops them, and its word timestamps then
    fail on the merged hypothesis)."""
    global _REQUEST
    if _REQUEST is None:
        from nemo.collections.asr.parts.utils.rnnt_utils import Hypothesis

        class BiasingRequest(Hypothesis):  # type: ignore[misc]
            def merge_(self, other: Any) -> Any:
                super().merge_(other)
                if getattr(self, "token_duration", None) is None:
                    self.token_duration = getattr(other, "token_duration", None)
                return self

        _REQUEST = BiasingRequest
    return _REQUEST


def attach_confidence(hyp: Any, conf: list[float]) -> None:
    """Puts each word's confidence (0-1, one per word of the hypothesis) on
    its timestamp entry, where the two agree in number; otherwise, and for a
    value outside 0-1, a word keeps none."""
    stamps = (getattr(hyp, "timestamp", None) or {}).get("word") if isinstance(getattr(hyp, "timestamp", None), dict) else None
    if not conf or not stamps or len(conf) != len(stamps):
        return
    for w, value in zip(stamps, conf, strict=True):
        if 0.0 <= value <= 1.0:
            w["confidence"] = round(value, 4)


def start(source: str, opts: ParakeetOptions, device: str, max_batch: int, options: EncoderOptions,
          load: Callable[[str, str], Any], host: str) -> tuple[str, NemoEngine]:
    """The Parakeet engine of source (a .nemo file or a model name; empty:
    DEFAULT_MODEL) loaded by load, its encoder compiled as options say and
    every shape warmed: a partition is ready only after this."""
    source = source or DEFAULT_MODEL
    model = load(source, device)
    t0 = time.perf_counter()
    engine = NemoEngine(model, device, opts.precision, options, source=source, confidence=opts.word_confidence, boosting=opts.phrase_boosting)
    engine.warm(opts.warmup_seconds, max_batch)
    c = engine.compiled
    mem = gpu_memory(device)
    log_info("NeMo ready in %.0f s: encoder %s%s; decoder CUDA graphs mode %s (%s); %s%s" % (
        time.perf_counter() - t0, engine.describe()[0], " (%s)" % c.summary() if c else "",
        engine.graphs_mode(), getattr(engine, "config", ""), host, "; " + mem if mem else ""))
    return source, engine
