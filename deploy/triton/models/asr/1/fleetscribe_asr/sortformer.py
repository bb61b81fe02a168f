"""The GPU diarizer (engine "sortformer" of the diarize model): NVIDIA's
streaming Sortformer (NeMo's SortformerEncLabelModel, 4 speakers, v2
streaming configuration) batched across recordings, the partitions
stateless.

A request is one chunk of a recording. Its recording's streaming state
(NeMo's speaker cache and FIFO of pre-encoded frames with their speaker
predictions, the silence profile, and each speaker's talk time, first
time heard and embedding sum) travels with the request and comes back
with the response, so any partition serves any chunk and the chunks of
many recordings form one GPU batch: every row of a batch is another
recording, at its own cache and FIFO fill (NeMo's asynchronous streaming
mode). Each row's audio is scaled by its own loudest sample (NeMo scales
a batch by its loudest clip).

One streaming step takes chunk_seconds of audio: with the worker's
-chunk-seconds, each request is one step. A step concatenates each row's
speaker cache, FIFO and chunk, runs the Fast Conformer and the
Transformer over that sequence padded to a fixed length (a later step's,
or a first step's where every row starts its recording: first_step), and updates
the cache and FIFO (fast_update: NeMo's streaming_update_async as tensor
operations over all rows, equal to it). The encoder runs compiled
(torch.compile, regional: each conformer and transformer layer) for a
finite set of row buckets at those lengths, its artefacts in the same
compile cache as the speech model's (compiled.CompileCache); a batch of
more rows than the largest bucket runs in parts, and the eager encoder
stays for encoder=eager.

Speakers: Sortformer's outputs are four speakers in order of arrival,
kept consistent across chunks by the speaker cache: its indices are the
provisional speakers; finish labels them by first appearance (-1: never
heard) and honours the job's max by merging the most alike (centroid
cosine of the cache frames each speaker holds; diarize.final_labels). A
fifth voice has no speaker of its own: the model gives its speech to one
of the four (docs/speakers.md)."""

from __future__ import annotations

import json
import math
import os
import struct
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import host
from .common import SAMPLE_RATE, log_info
from .compiled import (
    CompileCache,
    GraphedCall,
    PinnedRows,
    compile_cache_dir,
    conv_forms,
    conv_forms_key,
    cudnn_key,
    device_name,
    gpu_memory,
    row_parts,
    set_cudnn_attention,
    source_identity,
)
from .diarize import Ask, Reply, State, StateError, Turn, failed, final_labels
from .options import (
    CPU_THREADS_HELP,
    CUDA_SYNC_HELP,
    CUDNN_ATTENTION_HELP,
    POINTWISE_CONVS,
    POINTWISE_CONVS_HELP,
    SUBSAMPLING_CONVS,
    SUBSAMPLING_CONVS_HELP,
    HostOptions,
    one_of,
    options_reference,
    typed_options,
)
from .options import param as _param

F32 = npt.NDArray[np.float32]
FRAME_S = 0.08  # an encoder frame: 10-ms features, 8x subsampling
HOP = 160
STATE_MAGIC = b"FSSF"
STATE_VERSION = 1
SPEAKERS = 4
DEFAULT_MODEL = "nvidia/diar_streaming_sortformer_4spk-v2"
Tensor = Any


@dataclass(frozen=True)
class SortformerOptions:
    """The diarize model's parameters with engine sortformer, typed. Every
    key is named in docs/triton.md; an unknown key is refused at load."""

    engine: str = _param("sortformer", "the diarizer: sortformer (NeMo's streaming Sortformer on the partition's GPU)")
    model: str = _param(DEFAULT_MODEL, "a .nemo checkpoint of SortformerEncLabelModel (streaming), or a model name NeMo can load")
    chunk_seconds: float = _param(30.0, "audio one streaming step takes: the worker's -chunk-seconds, so each request is one step "
                                  "(a longer request takes several)")
    fifo_frames: int = _param(40, "the FIFO of recent frames (80 ms each) before they enter the speaker cache")
    cache_frames: int = _param(188, "the speaker cache (80-ms frames), the recording's memory of each speaker's voice")
    update_period: int = _param(300, "frames moved from the FIFO to the speaker cache at once (at least one chunk's)")
    encoder: str = _param("compiled", "compiled (torch.compile, static row buckets, the lengths of first_step) or eager")
    first_step: str = _param("short", "a recording's first step: short (its chunk alone, the speaker cache and FIFO still empty, "
                                      "a shape of its own: a batch of first steps runs 377 frames, not 605, at the defaults, 565, "
                                      "not 793, at 45-s chunks) or full (padded to the length of every later step)")
    batch_buckets: str = _param("4,8,16,32", "the compiled encoder's row buckets, those past the first that holds the model's "
                                             "max_batch_size dropped (never run); larger batches run in parts")
    row_parts: str = _param("one", "one (a batch runs in the smallest row bucket that holds it) or fit (in two buckets where they pad "
                                   "fewer rows, as the speech encoder's row_parts; pays with small buckets: batch_buckets=1,2,4,8,16)")
    pointwise_convs: str = _param("model", POINTWISE_CONVS_HELP)
    subsampling_convs: str = _param("model", SUBSAMPLING_CONVS_HELP)
    transformer_attention: str = _param("model", "the Transformer layers' attention: model (NeMo's: each score matrix written, "
                                                 "masked, softmaxed, multiplied) or sdpa (PyTorch's fused attention, the same mask "
                                                 "and scale, no score matrix written; on an H100 13% less GPU time a step, but "
                                                 "one process's step slower on the wall clock, not yet served: docs/speakers.md)")
    conformer_attention: str = _param("model", "the Fast Conformer layers' attention with relative positions where compiled: model "
                                               "(NeMo's through SDPA: the positions' scores shifted, masked and written as an "
                                               "additive mask for PyTorch's memory-efficient kernel) or flex (FlexAttention reads "
                                               "the positions' scores where the shift puts them, and the mask, in one generated "
                                               "kernel: the shifted matrix never written; the same numbers, but diarization alone "
                                               "served 0.70-0.73x model's on an H100: docs/speakers.md)")
    align_frames: int = _param(8, "the encoder's sequence lengths (first_step's and a later step's) rounded up to a multiple of "
                                  "this many frames, the padding masked: 8 gives the bf16 matrix multiplies over the sequence "
                                  "aligned rows (at 45-s chunks 568 and 800 frames, not 565 and 793: diarization alone served "
                                  "1.06-1.08x on an H100, docs/speakers.md); 1: NeMo's lengths")
    cuda_graphs: str = _param("off", "on: every compiled shape (the subsampling's and the encoder's, each row bucket at each "
                                     "length) captured once as a CUDA graph, all in one memory pool, after the warm-up; a step then "
                                     "replays a graph where it launched each kernel from the partition's host thread (this process has "
                                     "no decoder graphs, whose capture broke later loads: NeMo issue 15423); where capture fails, the "
                                     "compiled kernels run as with off (logged). Needs encoder=compiled on a GPU; not yet served")
    compile_cache: str = _param("", "the compile cache folder; empty: FLEETSCRIBE_COMPILE_CACHE, else the default")
    cudnn_attention: bool = _param(False, CUDNN_ATTENTION_HELP)
    cuda_sync: str = _param("blocking", CUDA_SYNC_HELP)
    cpu_threads: int = _param(-1, CPU_THREADS_HELP)
    threshold: float = _param(0.5, "a speaker talks in a frame where its probability is at least this")
    min_gap: float = _param(0.3, "one speaker's pauses shorter than this (s) are closed within a chunk")
    min_turn: float = _param(0.16, "turns shorter than this (s) are dropped")
    min_talk: float = _param(0.5, "seconds a speaker must talk not to be merged into the most alike at finish")
    max_speakers: int = _param(SPEAKERS, "the most speakers a job may ask for: the model's (the worker's -diarize-max-speakers says the same)")

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> SortformerOptions:
        opts: SortformerOptions = typed_options(cls, params, "diarize")
        opts.check()
        return opts

    def check(self) -> None:
        if self.engine != "sortformer":
            raise ValueError(f"diarize model parameter engine={self.engine!r}: want sortformer")
        if not 1 <= self.chunk_seconds <= 600 or self.fifo_frames < 0 or self.cache_frames < 4 * SPEAKERS or self.update_period < 1:
            raise ValueError("diarize model parameters: 1 <= chunk_seconds <= 600, fifo_frames >= 0, cache_frames >= 16, update_period >= 1")
        for name, value, allowed in [("encoder", self.encoder, ("compiled", "eager")), ("row_parts", self.row_parts, ("one", "fit")),
                                     ("first_step", self.first_step, ("short", "full")),
                                     ("pointwise_convs", self.pointwise_convs, POINTWISE_CONVS),
                                     ("subsampling_convs", self.subsampling_convs, SUBSAMPLING_CONVS),
                                     ("transformer_attention", self.transformer_attention, ("model", "sdpa")),
                                     ("conformer_attention", self.conformer_attention, ("model", "flex")),
                                     ("cuda_graphs", self.cuda_graphs, ("off", "on"))]:
            one_of(name, value, allowed, "diarize model")
        if not 1 <= self.align_frames <= 64:
            raise ValueError(f"diarize model parameter align_frames={self.align_frames}: 1 to 64 frames")
        if not 0 < self.threshold < 1 or self.min_gap < 0 or self.min_turn < 0 or self.min_talk < 0:
            raise ValueError("diarize model parameters: 0 < threshold < 1; min_gap, min_turn and min_talk >= 0")
        if not 1 <= self.max_speakers <= SPEAKERS:
            raise ValueError(f"diarize model parameter max_speakers: 1 to {SPEAKERS} (the model's speakers)")
        self.buckets()
        self.host().check()

    def host(self) -> HostOptions:
        """The partition's host options (as the speech model's)."""
        return HostOptions(cuda_sync=self.cuda_sync, cpu_threads=self.cpu_threads)

    def buckets(self, max_batch: int = 0) -> list[int]:
        """The row buckets, cut at the first that holds max_batch rows (the
        model's max_batch_size, where known): Triton never hands execute()
        more, so a larger bucket would only cost its compile time and its
        warm-up's GPU memory (a partition of max_batch_size 16 compiled 32
        rows at both lengths: 2 of its 8 shapes, never run)."""
        try:
            out = sorted({int(v) for v in self.batch_buckets.split(",") if v.strip()})
        except ValueError:
            out = []
        if not out or out[0] < 1:
            raise ValueError(f"diarize model parameter batch_buckets={self.batch_buckets!r}: want rows, comma-separated")
        if max_batch > 0:
            out = out[:next((i for i, rows in enumerate(out) if rows >= max_batch), len(out) - 1) + 1]
        return out

    @property
    def chunk_frames(self) -> int:
        return math.ceil(self.chunk_seconds / FRAME_S)

    @classmethod
    def reference(cls) -> str:
        return options_reference(cls)


def load_model(source: str, device: str) -> Any:
    """NeMo's SortformerEncLabelModel from a .nemo file or a model name."""
    from nemo.collections.asr.models import SortformerEncLabelModel  # heavy: imported only here

    if source.endswith(".nemo") or os.path.exists(source):
        model = SortformerEncLabelModel.restore_from(restore_path=source, map_location=device)
    else:
        model = SortformerEncLabelModel.from_pretrained(model_name=source, map_location=device)
    return model.eval()


# ---- The recording's state, as it travels ---------------------------------


@dataclass
class Stream:
    """One recording's streaming state between chunks (numpy, valid frames
    only): NeMo's speaker cache and FIFO with their predictions, the mean
    silence embedding and its count, and per speaker the talk time (s),
    first time heard (s into the recording, -1: not yet) and the sum of the
    cache frames' embeddings weighted by their probability (for merging at
    finish); seconds diarized so far."""

    cache: F32
    cache_preds: F32
    fifo: F32
    fifo_preds: F32
    sil: F32
    n_sil: int
    talk: list[float]
    first: list[float]
    seconds: float

    @classmethod
    def empty(cls, dim: int) -> Stream:
        z = np.zeros((0, dim), np.float32)
        p = np.zeros((0, SPEAKERS), np.float32)
        return cls(z, p, z, p, np.zeros(dim, np.float32), 0, [0.0] * SPEAKERS, [-1.0] * SPEAKERS, 0.0)

    def encode(self) -> bytes:
        """MAGIC, version, a JSON header's length and the header, then the
        arrays as little-endian float32 (lossless: the next chunk sees what
        NeMo's own loop would)."""
        head = json.dumps({"cache": len(self.cache), "fifo": len(self.fifo), "dim": int(self.sil.size), "n_sil": self.n_sil,
                           "talk": [round(t, 3) for t in self.talk], "first": [round(f, 3) for f in self.first],
                           "seconds": round(self.seconds, 3)}).encode()
        arrays = [self.cache, self.cache_preds, self.fifo, self.fifo_preds, self.sil]
        # One copy of the arrays (about 0.47 MB a recording at the
        # defaults) into the state itself, join reading their buffers; two
        # for an array not already contiguous little-endian float32.
        return b"".join([STATE_MAGIC, struct.pack("<BI", STATE_VERSION, len(head)), head,
                         *(np.ascontiguousarray(a, dtype="<f4").reshape(-1).data for a in arrays)])

    @classmethod
    def decode(cls, raw: bytes, dim: int, cache_frames: int, fifo_frames: int) -> Stream:
        if not raw:
            return cls.empty(dim)
        if raw[:4] != STATE_MAGIC or len(raw) < 9:
            raise StateError("diarization state is not this model's (not a Sortformer state)")
        version, n = struct.unpack("<BI", raw[4:9])
        if version != STATE_VERSION:
            raise StateError(f"diarization state version {version}, want {STATE_VERSION}")
        try:
            h = json.loads(raw[9:9 + n])
            nc, nf, d = int(h["cache"]), int(h["fifo"]), int(h["dim"])
            talk, first = [float(t) for t in h["talk"]], [float(f) for f in h["first"]]
            n_sil, seconds = int(h["n_sil"]), float(h["seconds"])
        except (ValueError, KeyError, TypeError) as e:
            raise StateError(f"diarization state is not this model's: {type(e).__name__}") from None
        if d != dim or not 0 <= nc <= cache_frames or not 0 <= nf <= fifo_frames or len(talk) != SPEAKERS or len(first) != SPEAKERS:
            raise StateError(f"diarization state is not this model's: {nc} cache and {nf} FIFO frames of {d}, "
                             f"want at most {cache_frames} and {fifo_frames} of {dim}")
        body = np.frombuffer(raw, "<f4", offset=9 + n) if (len(raw) - 9 - n) % 4 == 0 else None
        sizes = [nc * d, nc * SPEAKERS, nf * d, nf * SPEAKERS, d]
        if body is None or body.size != sum(sizes) or not np.isfinite(body).all():
            raise StateError("diarization state is inconsistent (its arrays do not match its header)")
        parts, at = [], 0
        for size in sizes:
            parts.append(body[at:at + size].astype(np.float32))
            at += size
        return cls(parts[0].reshape(nc, d), parts[1].reshape(nc, SPEAKERS), parts[2].reshape(nf, d), parts[3].reshape(nf, SPEAKERS),
                   parts[4], n_sil, talk, first, seconds)

    def speakers(self) -> State:
        """The state as diarize.State for final_labels: each speaker's
        embedding sum over the cache frames, weighted by its probability."""
        sums = [(self.cache_preds[:, s:s + 1] * self.cache).sum(axis=0).astype(np.float32) for s in range(SPEAKERS)]
        return State(sums, list(self.talk), list(self.first), self.seconds)


# ---- NeMo's streaming step over rows at their own lengths -----------------


def _take(x: Tensor, idx: Tensor) -> Tensor:
    """x (rows, frames, dim) at frame indices idx (rows, n), clamped to x."""
    idx = idx.clamp(0, max(x.shape[1] - 1, 0)).expand(x.shape[0], -1)
    return x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[2]))


def _spliced(parts: list[tuple[Tensor, Tensor]], total: int) -> tuple[Tensor, Tensor]:
    """The rows' valid frames of each (x, length) part, one after another,
    in a sequence of total frames (zeros past the sum), and that sum."""
    import torch

    rows = parts[0][0].shape[0]
    t = torch.arange(total, device=parts[0][0].device).unsqueeze(0).expand(rows, -1)
    out, start = None, torch.zeros((rows, 1), dtype=torch.long, device=t.device)
    for x, n in parts:
        if x.shape[1] == 0:
            continue
        n = n.view(-1, 1)
        inside = ((t >= start) & (t < start + n)).unsqueeze(-1)
        piece = torch.where(inside, _take(x, t - start), torch.zeros((), dtype=x.dtype, device=x.device))
        out = piece if out is None else out + piece.to(out.dtype)
        start = start + n
    return out, start.view(-1)


def fast_concat(state: Any, emb: Tensor, emb_len: Tensor, total: int) -> tuple[Tensor, Tensor]:
    """NeMo's concat_and_pad of speaker cache, FIFO and chunk, without its
    loop over rows: one fixed length (total) for every row, as long as
    the longest row's sum or longer."""
    return _spliced([(state.spkcache, state.spkcache_lengths), (state.fifo, state.fifo_lengths), (emb, emb_len)], total)


def fast_update(sm: Any, streaming_state: Any, chunk: Tensor, chunk_lengths: Tensor, preds: Tensor, lc: int, rc: int) -> tuple[Any, Tensor]:
    """NeMo's streaming_update_async (speaker cache and FIFO of rows at their
    own lengths) as tensor operations over all rows at once, no host sync
    per row; the speaker-cache compression is NeMo's own, on the rows that
    overflow. Returns the new state and the chunk's predictions."""
    import torch
    from nemo.collections.asr.modules.sortformer_modules import StreamingSortformerState

    state = streaming_state
    dev = chunk.device
    cache_n, fifo_n, c = sm.spkcache_len, sm.fifo_len, chunk.shape[1] - lc - rc
    sl, fl = state.spkcache_lengths.view(-1, 1), state.fifo_lengths.view(-1, 1)
    cl = (chunk_lengths.view(-1, 1) - lc).clamp(0, c)

    def rng(n: int) -> Tensor:
        return torch.arange(n, device=dev).unsqueeze(0)

    def masked(x: Tensor, idx: Tensor, keep: Tensor) -> Tensor:
        return torch.where(keep.unsqueeze(-1), _take(x, idx), torch.zeros((), dtype=x.dtype, device=dev))

    fifo_preds = masked(preds, sl + rng(fifo_n), rng(fifo_n) < fl) if fifo_n else preds[:, :0]
    chunk_preds = masked(preds, sl + fl + lc + rng(c), rng(c) < cl)
    new_n = fl + cl
    grown, _ = _spliced([(state.fifo, fl.view(-1)), (chunk[:, lc:lc + c], cl.view(-1))], fifo_n + c)
    grown_preds, _ = _spliced([(fifo_preds, fl.view(-1)), (chunk_preds, cl.view(-1))], fifo_n + c)
    # What overflows the FIFO moves to the speaker cache.
    period = max(sm.spkcache_update_period, c)
    max_pop = min(period, c + fifo_n)
    pop = torch.where(new_n > fifo_n, torch.minimum(torch.clamp(c - fifo_n + fl, min=sm.spkcache_update_period), new_n),
                      torch.zeros_like(new_n))
    keep = rng(max_pop) < pop
    pop_embs = masked(grown, rng(max_pop), keep)
    pop_preds = masked(grown_preds, rng(max_pop), keep)
    is_sil = (pop_preds.sum(dim=2) < sm.sil_threshold) & keep
    count = is_sil.sum(dim=1)
    n_sil = state.n_sil_frames + count
    mean = (state.mean_sil_emb * state.n_sil_frames.unsqueeze(1) + (pop_embs * is_sil.unsqueeze(-1)).sum(dim=1)) / n_sil.clamp(min=1).unsqueeze(1)
    mean = torch.where((count > 0).unsqueeze(1), mean, state.mean_sil_emb)
    cache = _spliced([(state.spkcache, sl.view(-1)), (grown, pop.view(-1))], cache_n + max_pop)[0]
    cache_preds = _spliced([(state.spkcache_preds, sl.view(-1)), (grown_preds, pop.view(-1))], cache_n + max_pop)[0]
    left = new_n - pop
    fifo = masked(grown, pop + rng(fifo_n), rng(fifo_n) < left) if fifo_n else grown[:, :0]
    out = StreamingSortformerState()
    out.fifo, out.fifo_lengths = fifo, left.view(-1)
    out.fifo_preds = masked(grown_preds, pop + rng(fifo_n), rng(fifo_n) < left) if fifo_n else grown_preds[:, :0]
    out.mean_sil_emb, out.n_sil_frames = mean, n_sil
    lengths = (sl + pop).view(-1)
    out.spkcache, out.spkcache_preds = cache[:, :cache_n].clone(), cache_preds[:, :cache_n].clone()
    idx = torch.where(lengths > cache_n)[0]
    if len(idx) > 0:
        out.spkcache[idx], out.spkcache_preds[idx], _ = sm._compress_spkcache(
            emb_seq=cache[idx], preds=cache_preds[idx], mean_sil_emb=mean[idx], permute_spk=False)
    out.spkcache_lengths = lengths.clamp(max=cache_n)
    return out, chunk_preds


def chunk_turns(probs: F32, seconds: float, threshold: float, min_gap: float, min_turn: float) -> list[Turn]:
    """A chunk's turns from its frames' speaker probabilities (frames x
    speakers): each speaker's runs of frames at threshold or above, cut at
    seconds; one speaker's turns less than min_gap apart joined, those
    shorter than min_turn dropped; in order of start, then speaker. The
    same turns as diarize._close_gaps over each run, in array operations
    over all runs at once: a random-weights model's noisy frames made some
    600 runs a 45-s chunk, whose Python loop took about 2 ms of the host a
    row (docs/speakers.md)."""
    on = np.asarray(probs >= threshold, dtype=np.int8).T  # speakers x frames
    edges = np.diff(np.pad(on, ((0, 0), (1, 1))), axis=1)
    speaker, first = np.nonzero(edges > 0)  # row-major: by speaker, then frame
    last = np.nonzero(edges < 0)[1]  # each run's end, paired in the same order
    start, end = first * FRAME_S, np.minimum(last * FRAME_S, seconds)
    keep = end > start
    speaker, start, end = speaker[keep], start[keep], end[keep]
    if not speaker.size:
        return []
    opens = np.ones(speaker.size, dtype=bool)
    opens[1:] = (speaker[1:] != speaker[:-1]) | (start[1:] - end[:-1] >= min_gap)
    at = np.flatnonzero(opens)
    speaker, start, end = speaker[at], start[at], np.maximum.reduceat(end, at)
    keep = end - start >= min_turn
    speaker, start, end = speaker[keep], start[keep], end[keep]
    order = np.lexsort((speaker, start))
    return [Turn(float(start[i]), float(end[i]), int(speaker[i])) for i in order]


def bucket_parts(buckets: list[int], rows: int, fit: bool) -> list[tuple[int, int, int]]:
    """How rows rows run in compiled row buckets (ascending): compiled.row_parts
    as (first row, rows, bucket), in order."""
    out: list[tuple[int, int, int]] = []
    at = 0
    for real, shape in row_parts(buckets, rows, fit):
        out.append((at, real, shape))
        at += real
    return out


def aligned(frames: int, multiple: int) -> int:
    """frames rounded up to a multiple of multiple."""
    return -(-frames // multiple) * multiple


def encode(model: Any, seq: Tensor, seq_len: Tensor) -> Tensor:
    """The Fast Conformer (past its pre-encode) and the Transformer over the
    concatenated sequence: speaker probabilities per frame."""
    emb, emb_len = model.frontend_encoder(processed_signal=seq, processed_signal_length=seq_len, bypass_pre_encode=True)
    return model.forward_infer(emb, emb_len)


# ---- The engine ------------------------------------------------------------


class SortformerDiarizer:
    """The streaming Sortformer as the diarize model's engine (see the
    module's comment)."""

    def __init__(self, opts: SortformerOptions, device: str, model: Any = None, max_batch: int = 0) -> None:
        import torch

        self.torch, self.opts, self.device = torch, opts, device
        self.cuda = str(device).startswith("cuda")
        # How the process waits for the GPU and its CPU threads, set before
        # anything creates the CUDA context (the speech model's partitions
        # do the same): CUDA's own choice spun a CPU per waiting process.
        ordinal = int(str(device).partition(":")[2] or 0) if self.cuda else 0
        self.host_note = host.configure(opts.host(), "GPU" if self.cuda else "CPU", ordinal)
        self.model = model if model is not None else load_model(opts.model, device)
        self.model = self.model.to(device).eval()
        sm = self.model.sortformer_modules
        sm.chunk_len, sm.fifo_len, sm.spkcache_len = opts.chunk_frames, opts.fifo_frames, opts.cache_frames
        sm.spkcache_update_period = opts.update_period
        sm._check_streaming_parameters()
        if sm.n_spk != SPEAKERS:
            raise ValueError(f"the Sortformer model has {sm.n_spk} speakers; this engine serves {SPEAKERS}")
        for m in self.model.modules():
            if hasattr(m, "use_pytorch_sdpa"):
                m.use_pytorch_sdpa = True  # PyTorch's fused attention (NeMo's default: matrix multiplies)
        set_cudnn_attention(opts.cudnn_attention, device)
        # The encoder's convolutions in other forms for the compiler
        # (convs.py: pointwise_convs=matmul, subsampling_convs=taps).
        self.pointwise, self.taps = conv_forms(self.model.encoder, opts.pointwise_convs, opts.subsampling_convs)
        # transformer_attention=sdpa: the Transformer layers' attention fused (sdpa.py).
        self.sdpa = 0
        if opts.transformer_attention == "sdpa":
            from . import sdpa

            self.sdpa = sdpa.as_sdpa([self.model.transformer_encoder])
        # conformer_attention=flex: the Fast Conformer's attention through
        # FlexAttention where compiled (relpos.py).
        self.flex = 0
        if opts.conformer_attention == "flex":
            from . import relpos

            self.flex = relpos.as_flex([self.model.encoder])
        self.sm, self.dim = sm, sm.fc_d_model
        # The encoder's sequence lengths, each a compiled shape: a later
        # step's (speaker cache, FIFO and chunk), and with first_step=short
        # a first step's (the chunk alone: cache and FIFO are empty until
        # it ends), which a batch of first steps runs instead of padding to
        # the longer; each rounded up to a multiple of align_frames (the
        # frames past a row's length are masked, as a shorter row's are).
        first = sm.chunk_left_context + sm.chunk_len + sm.chunk_right_context
        self.total = aligned(first + sm.spkcache_len + sm.fifo_len, opts.align_frames)
        first = aligned(first, opts.align_frames)
        self.lengths = sorted({first, self.total}) if opts.first_step == "short" else [self.total]
        self.rows = opts.buckets(max_batch)
        self.compiled: Any = None
        self.pre_compiled: Any = None
        self.pre_frames = sm.chunk_len * sm.subsampling_factor  # a one-step request's features
        self.cache: CompileCache | None = None
        self.staging = PinnedRows(device)  # upload's
        # cuda_graphs=on: each compiled shape's CUDA graph, by (subsampling
        # or encoder, rows, frames), captured by capture_graphs.
        self.graphs: dict[tuple[str, int, int], GraphedCall] = {}
        self.graph_note = ""
        if opts.encoder == "compiled" and (self.cuda or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1"):
            self.compile()
        if opts.cuda_graphs == "on" and not self.graphs and not self.graph_note:
            self.graph_note = "CUDA graphs asked for, off: they need encoder=compiled on a GPU"

    def describe(self) -> str:
        c = "compiled for rows %s at %s frames, %s in %.0f s" % (
            ",".join(map(str, self.rows)), " and ".join(map(str, self.lengths)), "compiled" if self.cache and self.cache.cold else "loaded from the cache",
            self.cache.seconds if self.cache else 0) if self.compiled else "eager at %s frames" % " and ".join(map(str, self.lengths))
        return "chunk %d frames (%.1f s), FIFO %d, speaker cache %d, update period %d; encoder %s, %d pointwise convolutions as matrix " \
            "multiplies, %d of the subsampling by taps, %d Transformer attentions through SDPA, %d conformer attentions through " \
            "FlexAttention%s; %s" % (
                self.sm.chunk_len, self.sm.chunk_len * FRAME_S, self.sm.fifo_len, self.sm.spkcache_len, self.sm.spkcache_update_period, c,
                self.pointwise, self.taps, self.sdpa, self.flex, "; " + self.graph_note if self.graph_note else "", self.host_note)

    def compile(self) -> None:
        """The layers compiled for every row bucket at each sequence length
        (self.lengths), loaded from the shared cache where a partition
        compiled them before."""
        cache_dir = compile_cache_dir(self.opts.compile_cache)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cache_dir, "triton"))
        import torch
        import torch._dynamo

        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, len(self.rows) * len(self.lengths) + 8)
        regions = [*self.model.encoder.layers, *self.model.transformer_encoder.layers]
        self.compiled = [(m, torch.compile(m.forward, dynamic=False)) for m in regions]
        # The chunk's subsampling convolutions (256 channels at the feature
        # rate, as costly an audio second as the speech model's front end):
        # compiled for a one-step request's length, each row bucket.
        self.pre_compiled = torch.compile(self.model.encoder.pre_encode.forward, dynamic=False)
        key = "sortformer|%s|%s|%s|%s|%s" % (source_identity(self.opts.model), torch.__version__, device_name(self.device),
                                              "+".join(map(str, self.lengths)), ",".join(map(str, self.rows))) + cudnn_key(self.opts.cudnn_attention)
        key += conv_forms_key(self.opts.pointwise_convs, self.opts.subsampling_convs)
        key += "|transformer sdpa" if self.opts.transformer_attention == "sdpa" else ""
        key += "|conformer flex" if self.opts.conformer_attention == "flex" else ""
        self.cache = CompileCache(cache_dir, key)

        def every_shape() -> None:
            # The inputs made as serving makes them (inference tensors, in
            # a row-major layout): a tensor's layout and dispatch keys are
            # part of what a compiled graph is kept for, so any other input
            # compiles again at the first request, in each partition (with
            # a cold compile cache, most likely the seconds-long requests of
            # a machine's first call: docs/speakers.md).
            feats = self.model.cfg.preprocessor.get("features", 128)
            for r in self.rows:
                with torch.inference_mode(), self.autocast():
                    x = torch.zeros((r, self.pre_frames, feats), device=self.device)
                    xn = torch.full((r,), self.pre_frames, dtype=torch.long, device=self.device)
                    self.pre_encode(x, xn)
                    for length in self.lengths:
                        seq = torch.zeros((r, length, self.dim), device=self.device)
                        self.run_encoder(seq, torch.full((r,), length, dtype=torch.long, device=self.device))

        self.cache.warm(every_shape)
        if self.opts.cuda_graphs == "on" and self.cuda:
            self.capture_graphs()
        if self.cuda:
            # What the warm-up's largest shapes left cached, as the speech
            # encoder does: the partitions of a GPU share its memory.
            self.torch.cuda.empty_cache()
        mem = gpu_memory(self.device)
        log_info("diarize: sortformer encoder %s%s" % (self.describe(), "; " + mem if mem else ""))

    def capture_graphs(self, capture: Any = None) -> None:
        """cuda_graphs=on: every compiled shape captured as a CUDA graph
        (compiled.GraphedCall), all in one memory pool, largest first (the
        pool is sized by the first): the subsampling at each row bucket and
        the encoder at each row bucket and length, their inputs made as
        serving makes them (row-major inference tensors, as the warm-up's:
        no graph compiles again). Where a capture fails no shape keeps a
        graph, and the compiled kernels run launched one by one (logged).
        capture: the tests' stand-in for CUDA's."""
        torch, dev = self.torch, self.device
        feats = self.model.cfg.preprocessor.get("features", 128)
        pool = torch.cuda.graph_pool_handle() if capture is None else None
        start = time.perf_counter()
        try:
            with torch.inference_mode(), self.autocast():
                for r in reversed(self.rows):
                    for length in reversed(self.lengths):
                        inputs = [torch.zeros((r, length, self.dim), device=dev), torch.full((r,), length, dtype=torch.long, device=dev)]
                        self.graphs[("encoder", r, length)] = GraphedCall(self.compiled_encode, inputs, dev, pool, capture)
                    inputs = [torch.zeros((r, self.pre_frames, feats), device=dev),
                              torch.full((r,), self.pre_frames, dtype=torch.long, device=dev)]
                    self.graphs[("subsampling", r, self.pre_frames)] = GraphedCall(self.compiled_pre_encode, inputs, dev, pool, capture)
        except Exception as e:  # noqa: BLE001 - the compiled kernels still run, launched one by one
            self.graphs.clear()
            self.graph_note = "CUDA graph capture failed (%s), the compiled kernels run without graphs" % type(e).__name__
            log_info("diarize: %s: %s\n%s" % (self.graph_note, e, traceback.format_exc()))
            return
        self.graph_note = "%d CUDA graphs captured in %.1f s" % (len(self.graphs), time.perf_counter() - start)

    def autocast(self) -> Any:
        return self.torch.autocast(device_type="cuda" if self.cuda else "cpu", dtype=self.torch.bfloat16)

    def in_buckets(self, x: Tensor, n: Tensor, fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]],
                   kind: str) -> tuple[Tensor, Tensor]:
        """fn(x, n) over the rows in parts (bucket_parts), each padded to
        its bucket (rows of zeros, length 0), the padding cut from both
        outputs; a part replays the CUDA graph of its kind (subsampling or
        encoder) and shape where one was captured."""
        torch = self.torch
        outs, lens = [], []
        for at, rows, shape in bucket_parts(self.rows, x.shape[0], self.opts.row_parts == "fit"):
            part, pn = x[at:at + rows], n[at:at + rows]
            graph = self.graphs.get((kind, shape, x.shape[1]))
            if graph is not None:
                out, out_n = graph(part, pn)
                outs.append(out)
                lens.append(out_n)
                continue
            pad = shape - rows
            if pad:
                part = torch.nn.functional.pad(part, (0, 0, 0, 0, 0, pad))  # a row-major copy
                pn = torch.nn.functional.pad(pn, (0, pad))
            else:
                # Row-major, as the warm-up compiled it (a layout is part of
                # what a compiled graph is kept for): NeMo's streaming loader
                # hands a chunk over transposed, a view a part of exactly a
                # bucket's rows would otherwise keep. A no-op where it is.
                part = part.contiguous()
            out, out_n = fn(part, pn)
            outs.append(out[: out.shape[0] - pad])
            lens.append(out_n[: out_n.shape[0] - pad])
        if len(outs) == 1:
            return outs[0], lens[0]
        return torch.cat(outs), torch.cat(lens)

    def pre_encode(self, x: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        """The chunk's subsampling: compiled where the chunk is a one-step
        request's length, else eager (a longer request's steps)."""
        if self.pre_compiled is None or x.shape[1] != self.pre_frames:
            out: tuple[Tensor, Tensor] = self.model.encoder.pre_encode(x=x, lengths=n)
            return out
        return self.in_buckets(x, n, self.compiled_pre_encode, "subsampling")

    def compiled_pre_encode(self, x: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        out: tuple[Tensor, Tensor] = self.pre_compiled(x=x, lengths=n)
        return out

    def run_encoder(self, seq: Tensor, seq_len: Tensor) -> Tensor:
        """encode() over seq padded to the shortest of the lengths that
        holds it: compiled in the smallest row bucket that holds the rows
        (parts of the largest beyond), else eager."""
        torch = self.torch
        length = next((n for n in self.lengths if n >= seq.shape[1]), seq.shape[1])
        seq = torch.nn.functional.pad(seq, (0, 0, 0, length - seq.shape[1]))
        if not self.compiled:
            return encode(self.model, seq, seq_len)
        return self.in_buckets(seq, seq_len, self.compiled_encode, "encoder")[0]

    def compiled_encode(self, seq: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        """encode() through the compiled layers, and n (in_buckets' pair)."""
        for m, c in self.compiled:
            m.forward = c  # an instance attribute: the class's forward is untouched
        try:
            return encode(self.model, seq, n), n
        finally:
            for m, _ in self.compiled:
                del m.forward

    # -- serving

    def serve(self, asks: Mapping[int, Ask]) -> dict[int, Any]:
        """Each ask (an Ask) answered: a Reply, or the exception that
        fails that request alone. The chunks of all asks are one batch."""
        out: dict[int, Any] = {}
        streams: dict[int, Stream] = {}
        for i, a in asks.items():
            try:
                streams[i] = Stream.decode(a.raw, self.dim, self.sm.spkcache_len, self.sm.fifo_len)
            except StateError as e:
                out[i] = e
        chunks = [i for i in streams if asks[i].samples.size]
        turns: dict[int, list[Turn]] = {}
        if chunks:
            try:
                turns = self.step([asks[i].samples for i in chunks], [streams[i] for i in chunks], chunks)
            except Exception:  # noqa: BLE001 - one input broke the batch: each alone
                for i in chunks:
                    try:
                        turns.update(self.step([asks[i].samples], [streams[i]], [i]))
                    except Exception as e:  # noqa: BLE001
                        out[i] = failed(e)
        for i, st in streams.items():
            if i in out:
                continue
            a = asks[i]
            try:
                labels = self.finish(st, a.min_speakers, a.max_speakers) if a.finish else []
                out[i] = Reply(turns.get(i, []), st.encode(), labels)
            except StateError as e:
                out[i] = e
            except Exception as e:  # noqa: BLE001
                out[i] = failed(e)
        return out

    def finish(self, st: Stream, min_speakers: int, max_speakers: int) -> list[int]:
        return final_labels(st.speakers(), min_speakers, max_speakers, self.opts.max_speakers, 1.01, self.opts.min_talk)

    def step(self, chunks: list[F32], streams: list[Stream], keys: list[int]) -> dict[int, list[Turn]]:
        """Runs the chunks (one per recording) through the streaming steps
        from their streams, which it updates; returns each chunk's turns."""
        torch, sm, dev = self.torch, self.sm, self.device
        rows = len(chunks)
        state = self.batch_state(streams)
        steps: list[tuple[Tensor, list[int]]] = []  # each step's chunk probabilities, and each row's valid frames
        with torch.inference_mode():
            audio, lengths = self.upload(chunks)
            feats, feat_len = self.model.preprocessor(input_signal=audio, length=lengths)
            # The preprocessor pads the frames to a multiple of 16 (4,512 for
            # 4,500 at 45 s): cut to the longest row's, so a request of
            # chunk_seconds is one step, then pad to whole steps (one shape).
            step = sm.chunk_len * sm.subsampling_factor
            feats = feats[:, :, : int(feat_len.max())]
            feats = torch.nn.functional.pad(feats, (0, -feats.shape[2] % step))
            offset = torch.zeros((rows,), dtype=torch.long, device=dev)
            # Known on the host, no wait for the GPU: a batch whose rows all
            # start their recordings has empty caches and FIFOs in its first
            # step, which then runs at the first step's length.
            first = all(st.cache.shape[0] == 0 and st.fifo.shape[0] == 0 for st in streams)
            for i, (_, chunk, chunk_len, lo, ro) in enumerate(
                    sm.streaming_feat_loader(feat_seq=feats, feat_seq_length=feat_len, feat_seq_offset=offset)):
                with self.autocast():
                    emb, emb_len = self.pre_encode(chunk, chunk_len)
                    emb, emb_len = emb.float(), emb_len.to(torch.int64)
                    seq, seq_len = fast_concat(state, emb, emb_len, self.lengths[0] if first and i == 0 else self.total)
                    preds = self.run_encoder(seq, seq_len)
                preds = sm.apply_mask_to_preds(preds.float(), seq_len)
                lc, rc = round(lo / sm.subsampling_factor), math.ceil(ro / sm.subsampling_factor)
                state, chunk_preds = fast_update(sm, state, emb, emb_len, preds, lc, rc)
                steps.append((chunk_preds, (emb_len - lc).clamp(0, chunk_preds.shape[1]).tolist()))
            # One copy to the host a step, not one a row (each a wait for
            # the GPU), then each row's valid frames.
            host = [p.float().cpu().numpy() for p, _ in steps]
            probs = [np.concatenate([h[r, : valid[r]] for h, (_, valid) in zip(host, steps, strict=True)])
                     if steps else np.zeros((0, SPEAKERS), np.float32) for r in range(rows)]
            self.unbatch_state(state, streams)
        out: dict[int, list[Turn]] = {}
        for r, (key, st, c) in enumerate(zip(keys, streams, chunks, strict=True)):
            out[key] = self.turns(probs[r], c.size / SAMPLE_RATE, st)
            st.seconds += c.size / SAMPLE_RATE
        return out

    def upload(self, chunks: list[F32]) -> tuple[Tensor, Tensor]:
        """The chunks as one batch on the device, zeros past each row's
        length, each row scaled by its own loudest sample (NeMo scales a
        batch by its loudest clip), and their lengths. The rows go through a
        pinned host buffer kept between steps (a copy from pageable memory
        waits for the GPU and runs at a fraction of the bus) and are scaled
        on the device, not by the host that serves the partition."""
        x = self.staging(chunks)
        lengths = self.torch.tensor([c.size for c in chunks], dtype=self.torch.long).to(x.device, non_blocking=True)
        return x / (x.abs().amax(dim=1, keepdim=True) + 1e-3), lengths

    def turns(self, probs: F32, seconds: float, st: Stream) -> list[Turn]:
        """The chunk's turns from its frames' probabilities, and the
        stream's talk and first-heard times updated."""
        turns = chunk_turns(probs, seconds, self.opts.threshold, self.opts.min_gap, self.opts.min_turn)
        for t in turns:
            st.talk[t.speaker] += t.end - t.start
            if st.first[t.speaker] < 0:
                st.first[t.speaker] = st.seconds + t.start
        return turns

    def batch_state(self, streams: list[Stream]) -> Any:
        """NeMo's asynchronous streaming state of the rows' streams."""
        torch, sm, dev = self.torch, self.sm, self.device
        st = sm.init_streaming_state(batch_size=len(streams), async_streaming=True, device=dev)
        st.spkcache_preds = torch.zeros((len(streams), sm.spkcache_len, SPEAKERS), device=dev)
        st.fifo_preds = torch.zeros((len(streams), sm.fifo_len, SPEAKERS), device=dev)
        if all(not len(s.cache) and not len(s.fifo) and s.n_sil == 0 and not s.sil.any() for s in streams):
            return st  # every row starts its recording: NeMo's empty state, made on the device, nothing uploaded
        cache = np.zeros((len(streams), sm.spkcache_len, self.dim), np.float32)
        cache_preds = np.zeros((len(streams), sm.spkcache_len, SPEAKERS), np.float32)
        fifo = np.zeros((len(streams), sm.fifo_len, self.dim), np.float32)
        fifo_preds = np.zeros((len(streams), sm.fifo_len, SPEAKERS), np.float32)
        for r, s in enumerate(streams):
            cache[r, : len(s.cache)], cache_preds[r, : len(s.cache)] = s.cache, s.cache_preds
            fifo[r, : len(s.fifo)], fifo_preds[r, : len(s.fifo)] = s.fifo, s.fifo_preds
        st.spkcache, st.spkcache_preds = torch.from_numpy(cache).to(dev), torch.from_numpy(cache_preds).to(dev)
        st.fifo, st.fifo_preds = torch.from_numpy(fifo).to(dev), torch.from_numpy(fifo_preds).to(dev)
        st.spkcache_lengths = torch.tensor([len(s.cache) for s in streams], dtype=torch.long, device=dev)
        st.fifo_lengths = torch.tensor([len(s.fifo) for s in streams], dtype=torch.long, device=dev)
        st.mean_sil_emb = torch.from_numpy(np.stack([s.sil for s in streams])).to(dev)
        st.n_sil_frames = torch.tensor([s.n_sil for s in streams], dtype=torch.long, device=dev)
        return st

    def unbatch_state(self, st: Any, streams: list[Stream]) -> None:
        """The batch's state back into each row's stream (valid frames)."""
        cache, cache_preds = st.spkcache.float().cpu().numpy(), st.spkcache_preds.float().cpu().numpy()
        fifo, fifo_preds = st.fifo.float().cpu().numpy(), st.fifo_preds.float().cpu().numpy()
        nc, nf = st.spkcache_lengths.tolist(), st.fifo_lengths.tolist()
        sil, n_sil = st.mean_sil_emb.float().cpu().numpy(), st.n_sil_frames.tolist()
        for r, s in enumerate(streams):
            s.cache, s.cache_preds = cache[r, : nc[r]].copy(), cache_preds[r, : nc[r]].copy()
            s.fifo, s.fifo_preds = fifo[r, : nf[r]].copy(), fifo_preds[r, : nf[r]].copy()
            s.sil, s.n_sil = sil[r].copy(), int(n_sil[r])
