"""The compiled encoder: torch.compile (inductor) for a finite set of
static shapes, shared through one compile cache by every partition of a
host (see CompiledEncoder and EncoderOptions)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .common import SAMPLE_RATE, Audio, log_info
from .options import LINEAR_PRECISIONS, POINTWISE_CONVS, SUBSAMPLING_CONVS, EncoderParams, EncoderStudy, one_of, typed_options

# torch's types: torch is imported only where an encoder runs, and the type
# check runs without it.
Tensor = Any
Encoded = tuple[Tensor, Tensor]  # (frames, frame lengths)
EncoderFn = Callable[[Tensor, Tensor], Encoded]

DEFAULT_COMPILE_CACHE = "/tmp/fleetscribe-compile-cache"


def compiles_on(device: str) -> bool:
    """Whether an encoder compiles on device: a GPU (on CPU only where
    FLEETSCRIBE_COMPILE_CPU=1, which the tests of the compiled path set)."""
    return str(device).startswith("cuda") or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1"


def device_name(device: str) -> str:
    import torch

    return str(torch.cuda.get_device_name(device)) if str(device).startswith("cuda") else "cpu"


def gpu_memory(device: str) -> str:
    """What this process holds on its GPU once warm (PyTorch's reserved
    memory and the most it reserved), and what the GPU has free: the
    figures a plan of more partitions or instances needs. Empty off a GPU
    (or without torch, as the model's unit tests run)."""
    try:
        import torch
    except ImportError:
        return ""
    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return ""
    free, total = torch.cuda.mem_get_info(device)
    return "%.1f GiB reserved by this process (peak %.1f), %.1f of %.1f GiB free on the GPU" % (
        torch.cuda.memory_reserved(device) / 2**30, torch.cuda.max_memory_reserved(device) / 2**30, free / 2**30, total / 2**30)


def compile_cache_dir(folder: str = "") -> str:
    """Where compile artefacts go (the parameter compile_cache, else
    FLEETSCRIBE_COMPILE_CACHE, else the default): shared by every partition
    of a host."""
    return folder or os.environ.get("FLEETSCRIBE_COMPILE_CACHE") or DEFAULT_COMPILE_CACHE


def parse_buckets(value: str | None, default: str = "30") -> list[int]:
    """Length buckets in samples from seconds ("30,45"), ascending; the
    default is the worker's -chunk-seconds."""
    out = sorted({round(float(v) * SAMPLE_RATE) for v in (value or default).split(",") if v.strip()})
    if not out or out[0] <= 0:
        raise ValueError(f"length_buckets {value!r}: want positive seconds, comma-separated")
    return out


def parse_rows(value: str | None, max_batch: int) -> list[int]:
    """Row buckets of a compiled encoder from "4,8,16" (default: the powers
    of two up to max_batch), ascending, max_batch always among them so that
    every batch Triton forms has a shape."""
    if value:
        out = {int(v) for v in value.split(",") if v.strip()}
        if not out or min(out) < 1 or max(out) > max_batch:
            raise ValueError(f"batch_buckets {value!r}: want rows from 1 to max_batch_size {max_batch}, comma-separated")
    else:
        out = {1 << i for i in range(max_batch.bit_length()) if 1 << i <= max_batch}
    return sorted(out | {max_batch})


class EncoderOptions:
    """How an engine runs its encoder: the model parameters of
    options.EncoderParams (encoder, length_buckets, batch_buckets,
    encoder_attention, compile_cache, row_parts, pointwise_convs,
    subsampling_convs, linear_precision) and the lab's study knobs of
    options.EncoderStudy (graphs: CUDA graphs over each shape, experimental,
    see CompiledEncoder; casts; tuning), in the units the encoder uses
    (samples, rows)."""

    TUNINGS: ClassVar[dict[str, dict[str, bool]]] = {"default": {}, "autotune": {"max_autotune": True, "coordinate_descent_tuning": True}}
    ATTENTIONS = ("sdpa", "model", "flex")
    ROW_PARTS = ("one", "fit")

    def __init__(self, mode: str = "eager", lengths: Sequence[int] = (), rows: Sequence[int] = (), graphs: bool = False,
                 casts: str = "fused", cache_dir: str = DEFAULT_COMPILE_CACHE, tuning: str = "default", attention: str = "sdpa",
                 cudnn_attention: bool = False, row_parts: str = "fit", pointwise_convs: str = "model",
                 subsampling_convs: str = "model", linear_precision: str = "model") -> None:
        for name, value, allowed in [("row_parts", row_parts, self.ROW_PARTS), ("pointwise_convs", pointwise_convs, POINTWISE_CONVS),
                                     ("subsampling_convs", subsampling_convs, SUBSAMPLING_CONVS),
                                     ("linear_precision", linear_precision, LINEAR_PRECISIONS),
                                     ("encoder_tuning", tuning, tuple(self.TUNINGS)), ("encoder_attention", attention, self.ATTENTIONS)]:
            one_of(name, value, allowed)
        self.row_parts, self.pointwise_convs, self.subsampling_convs = row_parts, pointwise_convs, subsampling_convs
        self.linear_precision = linear_precision
        self.mode, self.lengths, self.rows, self.graphs, self.casts, self.cache_dir = mode, list(lengths), list(rows), graphs, casts, cache_dir
        self.cudnn_attention = cudnn_attention
        self.tuning, self.attention = tuning, attention

    @classmethod
    def from_typed(cls, params: EncoderParams, max_batch: int, study: EncoderStudy | None = None) -> EncoderOptions:
        """The options of an engine's typed encoder parameters, and the
        lab's study knobs where a study sets them (FLEETSCRIBE_ENCODER_STUDY)."""
        study = study or EncoderStudy()
        params.check()
        return cls(mode=params.encoder, lengths=parse_buckets(params.length_buckets), rows=parse_rows(params.batch_buckets, max_batch),
                   graphs=study.graphs, casts=study.casts, cache_dir=compile_cache_dir(params.compile_cache),
                   tuning=study.tuning, attention=params.encoder_attention, cudnn_attention=params.cudnn_attention,
                   row_parts=params.row_parts, pointwise_convs=params.pointwise_convs,
                   subsampling_convs=params.subsampling_convs, linear_precision=params.linear_precision)

    @classmethod
    def from_params(cls, params: Mapping[str, str], max_batch: int) -> EncoderOptions:
        """from_typed of string parameters (EncoderParams' keys only)."""
        return cls.from_typed(typed_options(EncoderParams, params, "asr"), max_batch, EncoderStudy.from_env())

    def cache_key(self, key: str, by_length: dict[int, list[int]]) -> str:
        """The compile cache's key for an engine's key and these options:
        what changes the compiled graphs changes it."""
        key = "%s|lengths %s|rows %s|graphs %s|casts %s" % (key, self.lengths, self.rows, self.graphs, self.casts)
        if self.tuning != "default":  # the keys of caches made before tuning existed stay as they were
            key += "|tuning %s" % self.tuning
        if any(r != self.rows for r in by_length.values()):
            key += "|rows by length %s" % sorted(by_length.items())
        if self.attention != "model":  # nor those made before the attention was chosen
            key += "|attention %s" % self.attention
        return key + conv_forms_key(self.pointwise_convs, self.subsampling_convs) + linear_key(self.linear_precision) + cudnn_key(
            self.cudnn_attention)

    def encoder(self, fn: EncoderFn, device: str, key: str, regions: Sequence[Any] = (),
                row_limit: Callable[[int], int] | None = None) -> CompiledEncoder:
        """fn compiled for these shapes (a CompiledEncoder), its compile
        cache keyed by key and the options; row_limit(n), where the engine
        gives one, is the most rows a compiled shape of n samples may hold
        (see rows_by_length)."""
        by_length = rows_by_length(self.lengths, self.rows, row_limit)
        return CompiledEncoder(fn, device, self.lengths, self.rows, self.cache_dir, self.cache_key(key, by_length), regions, self.graphs,
                               inductor={"emulate_precision_casts": self.casts == "eager", **self.TUNINGS[self.tuning]},
                               by_length=by_length, fit=self.row_parts == "fit")


class PinnedRows:
    """Rows of audio padded with zeros into one batch on a device, written
    once into a pinned host buffer kept between batches (a copy from
    pageable memory waits for the GPU and runs at a fraction of the bus).
    A batch's copy must have ended before the next is staged: the engines
    read each batch's results back to the host first."""

    def __init__(self, device: str) -> None:
        self.device, self.cuda = device, str(device).startswith("cuda")
        self.buffer: Tensor = None  # made by the first batch

    def __call__(self, audio: Sequence[Audio]) -> Tensor:
        import torch

        rows, n = len(audio), max(a.size for a in audio)
        if self.buffer is None or self.buffer.numel() < rows * n:
            self.buffer = torch.empty(rows * n, dtype=torch.float32, pin_memory=self.cuda)
        x = self.buffer[:rows * n].view(rows, n)
        host = x.numpy()
        for i, a in enumerate(audio):
            host[i, :a.size] = a
            host[i, a.size:] = 0
        return x.to(self.device, non_blocking=True) if self.cuda else x.clone()


def conv_forms(encoder: Any, pointwise_convs: str, subsampling_convs: str) -> tuple[int, int]:
    """The convolution forms of convs.py set on a NeMo conformer encoder
    (pointwise_convs=matmul: its layers' kernel-1 convolutions;
    subsampling_convs=taps: its pre_encode), before anything compiles:
    (pointwise convolutions replaced, subsampling convolutions by taps).
    Imports torch only where a form is asked for and the encoder has what
    it changes."""
    layers = getattr(encoder, "layers", None) or []
    pre = getattr(encoder, "pre_encode", None)
    pointwise_asked, taps_asked = pointwise_convs == "matmul" and len(layers) > 0, subsampling_convs == "taps" and pre is not None
    if not pointwise_asked and not taps_asked:
        return 0, 0
    from . import convs

    return (convs.as_matmul(layers) if pointwise_asked else 0), (convs.by_taps(pre) if taps_asked else 0)


def conv_forms_key(pointwise_convs: str, subsampling_convs: str) -> str:
    """The compile cache key's part for the convolution forms: graphs traced
    through them are not the model's (empty for the model's own, so the
    keys of caches made before stay as they were)."""
    return ("|pointwise %s" % pointwise_convs if pointwise_convs != "model" else "") + (
        "|subsampling %s" % subsampling_convs if subsampling_convs != "model" else "")


def linear_form(encoder: Any, linear_precision: str, device: str) -> int:
    """linear_precision=fp8 set on a NeMo conformer encoder's layers
    (fp8.py), after its weights have loaded and before anything compiles:
    how many linear layers run in FP8 where compiled. Refuses a device
    that has no FP8 matrix multiplies. Imports torch only where asked."""
    if linear_precision == "model":
        return 0
    from . import fp8

    if not fp8.supported(device):
        raise ValueError("model parameter linear_precision=fp8: this GPU has no FP8 matrix multiplies (compute capability 8.9 or "
                         "later: L4, L40S, H100, H200); use model")
    return fp8.as_fp8(getattr(encoder, "layers", None) or [])


def linear_key(linear_precision: str) -> str:
    """The compile cache key's part for the linear layers' precision (empty
    for the model's own)."""
    return "|linear %s" % linear_precision if linear_precision != "model" else ""


def set_cudnn_attention(on: bool, device: str) -> None:
    """Lets SDPA choose cuDNN's fused attention in this process, or not
    (PyTorch then takes its memory-efficient kernel, which takes the
    relative positions' additive mask too). Off by default: on an H100
    under MPS it failed intermittently while an encoder warmed
    (mha_graph.execute, then an illegal memory access, which ends every
    MPS client of the GPU), as PyTorch issue 190321 reports on an H200;
    disabling it is the known mitigation. Nothing on a CPU."""
    if not str(device).startswith("cuda"):
        return
    import torch

    torch.backends.cuda.enable_cudnn_sdp(on)


def cudnn_key(on: bool) -> str:
    """The compile cache key's part for the SDPA backend the graphs were
    traced with (caches made with cuDNN's, before it could be chosen, keep
    their keys)."""
    return "" if on else "|cudnn attention off"


def source_identity(source: str) -> str:
    """The model a source names, for the compile cache's key: a file by
    path, size and time, a model name as it is."""
    try:
        st = os.stat(source)
        return "%s:%d:%d" % (os.path.abspath(source), st.st_size, int(st.st_mtime))
    except OSError:
        return source


class CompileCache:
    """Compile artefacts shared by every partition of a host, for one key
    (the model file, torch, the GPU, the buckets, the batch, precision):
    the first partition to warm compiles under a lock in the folder while
    the others wait, then they warm in parallel, loading what it compiled
    (inductor's FX graph, AOTAutograd and kernel caches live in folder)."""

    def __init__(self, folder: str, key: str) -> None:
        self.folder = folder
        self.key = hashlib.sha256(key.encode()).hexdigest()[:16]
        os.makedirs(folder, exist_ok=True)
        self.cold: bool | None = None  # whether warm() compiled (True) or loaded (False)
        self.seconds = 0.0

    def warm(self, run: Callable[[], None]) -> None:
        """Runs run() (compiling or loading everything) once, under the
        lock unless this key was compiled before."""
        t0 = time.perf_counter()
        marker = os.path.join(self.folder, self.key + ".warm")
        self.cold = not os.path.exists(marker)
        if self.cold:
            with file_lock(os.path.join(self.folder, self.key + ".lock")):
                # Another partition may have compiled while this one waited:
                # then it loads outside the lock, beside the others.
                self.cold = not os.path.exists(marker)
                if self.cold:
                    run()
                    with open(marker + ".tmp", "w") as f:
                        f.write("compiled\n")
                    os.replace(marker + ".tmp", marker)
        if not self.cold:
            run()
        self.seconds = time.perf_counter() - t0


class CompiledEncoder:
    """An encoder fn(audio [rows, n] float32, lengths [rows]) -> (frames,
    frame lengths), compiled by torch.compile (inductor) for a finite set of
    static shapes: every length bucket (samples) times every row bucket.
    A batch is padded to the smallest shape that holds it (rows of zeros,
    zeros past each row's length, which the encoder masks), or with fit
    (row_parts=fit, the default) runs in two shapes where they pad fewer
    rows. Where the
    engine limits the rows of a length (by_length: NeMo's subsampling), a
    batch of more rows runs as parts, each in a shape of that length.

    Regional compilation: where the engine names regions (modules whose
    forward is most of the work: the conformer layers, the subsampling),
    each region's forward is compiled instead of the whole function; the 24
    layers share one code and so one compiled graph a shape, which took
    about 21 s a shape on an H200 where the whole encoder took 80-115 s
    (docs/benchmarks.md). The regions
    run compiled only inside this object's calls: the same model's eager
    path (a batch longer than every bucket, encoder=eager) stays eager and
    never compiles at serving time.

    With graphs (experimental, off by default), each shape is then captured
    once on a GPU as a CUDA graph (fn whole: the front end, the eager glue
    between regions and the compiled kernels), in one memory pool shared by
    every shape, and a batch is one copy into the graph's input and one
    replay: no per-kernel launches from a process that shares its CPUs with
    seven others. A graph's outputs are valid until the next call (the
    engine decodes them before it encodes again). Where capture fails the
    compiled kernels run without a graph (logged, encoder path
    compiled_nographs). Not the default: on an H200, NeMo's model hit a
    CUDA illegal memory access in every process that loaded its shapes from
    the compile cache and then captured them (at the second shape; the
    process that compiled them ran), and under MPS one client's fault ends
    every client of the GPU (docs/benchmarks.md, "Regional compilation").
    Each shape had then been loaded and captured after NeMo's decoder had
    captured its own graphs in the first shape's batch, the order NeMo's
    issue 15423 says breaks later loads; warm() now loads every shape,
    then captures every shape, and only then decodes (warm's encode).

    The artefacts go to a CompileCache in cache_dir: the first partition
    of a host compiles under a lock, the others load."""

    def __init__(self, fn: EncoderFn, device: str, lengths: Sequence[int], rows: Sequence[int], cache_dir: str, key: str,
                 regions: Sequence[Any] = (), graphs: bool = False, inductor: dict[str, bool] | None = None,
                 by_length: dict[int, list[int]] | None = None, fit: bool = False) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.lengths = sorted(lengths)
        self.rows = sorted(rows)
        self.by_length = by_length or rows_by_length(self.lengths, self.rows, None)
        self.fit = fit  # row_parts=fit: a batch in two shapes where they pad fewer rows than one
        self.cache = CompileCache(cache_dir, key)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cache_dir, "triton"))
        import torch._dynamo

        # Each code compiled keeps one entry a shape.
        shapes = sum(len(r) for r in self.by_length.values())
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, shapes + 8)
        self.fn = fn
        self.regions = [(m, torch.compile(m.forward, dynamic=False, options=inductor)) for m in regions]
        self.whole = None if self.regions else torch.compile(fn, dynamic=False, options=inductor)
        self.graphs_asked = graphs and self.device.type == "cuda"
        self.graphs_on = self.graphs_asked
        self.pool = torch.cuda.graph_pool_handle() if self.graphs_on else None
        self.shapes: dict[tuple[int, int], _Shape] = {}
        self.fell_back = False  # whether outside() has logged
        self.staging: Tensor = None  # pinned host rows, the largest shape's size
        self.staging_lengths: Tensor = None
        self.graphs = 0  # compiled graphs made or loaded by warm()
        self.defer_capture = False  # warm()'s first pass: shapes load, none is captured yet

    @property
    def cold(self) -> bool | None:
        return self.cache.cold

    @property
    def warm_seconds(self) -> float:
        return self.cache.seconds

    @property
    def path(self) -> str:
        """The encoder path the engine metric names: compiled (replayed as
        CUDA graphs where they were asked for), or compiled_nographs where
        graphs were asked for and their capture failed."""
        return "compiled_nographs" if self.graphs_asked and not self.graphs_on else "compiled"

    def summary(self) -> str:
        """The shapes and how warm() got them, for a log line (numbers only)."""
        fewer = ["%g s at most %d" % (n / SAMPLE_RATE, r[-1]) for n, r in sorted(self.by_length.items()) if r != self.rows]
        return "lengths %s s, rows %s%s%s: %d compiled graphs %s in %.0f s, CUDA graphs %s" % (
            ",".join("%g" % (b / SAMPLE_RATE) for b in self.lengths), ",".join(map(str, self.rows)),
            " (%s a shape, larger batches in parts)" % ", ".join(fewer) if fewer else "",
            " (row parts fit: a batch in two shapes where they pad fewer rows)" if self.fit else "", self.graphs,
            "compiled" if self.cold else "loaded from the cache", self.warm_seconds, "on" if self.graphs_on else "off")

    def encode(self, audio: list[Audio], eager: Callable[[list[Audio]], Encoded]) -> Encoded:
        """(frames, frame lengths) of the rows of audio: compiled where a
        shape holds them, else eager(audio), the first such batch logged."""
        out = self(audio)
        if out is None:
            self.outside(len(audio), max(a.size for a in audio))
            out = eager(audio)
        return out

    def outside(self, rows: int, n: int) -> None:
        """Logs the first batch that no shape holds (the engine runs it
        eagerly, as it will any other)."""
        if self.fell_back:
            return
        self.fell_back = True
        log_info("a batch of %d rows of %.1f-s audio fits no compiled shape (lengths %s s, rows %s): it runs eagerly, "
                 "as will any other; add its length to the model parameter length_buckets" % (
                     rows, n / SAMPLE_RATE, ",".join("%g" % (b / SAMPLE_RATE) for b in self.lengths), ",".join(map(str, self.rows))))

    def compiled_call(self, x: Tensor, lengths: Tensor) -> Encoded:
        """fn with its regions compiled (or fn compiled whole)."""
        if self.whole is not None:
            out: Encoded = self.whole(x, lengths)
            return out
        for m, c in self.regions:
            m.forward = c  # an instance attribute: the class's forward is untouched
        try:
            return self.fn(x, lengths)
        finally:
            for m, _ in self.regions:
                del m.forward

    def __call__(self, audio: list[Audio]) -> Encoded | None:
        """(frames, frame lengths) of the rows of audio (1-D float32 arrays),
        or None where no shape holds them; in parts where the length holds
        fewer rows a shape (plan), joined along the rows."""
        parts = plan(self.by_length, len(audio), max(a.size for a in audio), self.rows[-1], self.fit)
        if parts is None:
            return None
        if len(parts) == 1:
            return self.run_shape(audio, parts[0][1:])
        encs, lens, at = [], [], 0
        for rows, shape_rows, n in parts:  # one length: every part's frames have the same shape
            enc, enc_len = self.run_shape(audio[at:at + rows], (shape_rows, n), at)
            encs.append(enc.clone())  # a graph's outputs live until its next replay
            lens.append(enc_len.clone())
            at += rows
        return self.torch.cat(encs), self.torch.cat(lens)

    def run_shape(self, audio: list[Audio], shape: tuple[int, int], at: int = 0) -> Encoded:
        """The rows of audio through the compiled shape (rows, samples)
        that holds them, staged from row at of the pinned host buffer (a
        batch's parts each have their own rows there: a part's copy to the
        GPU may not have run when the next part is staged)."""
        s = self.shapes.get(shape) or self._make(*shape)
        if self.graphs_on and s.graph is None and not self.defer_capture:
            self._capture(s)
        rows, n = len(audio), shape[1]
        staged = self.staging[at * n:(at + rows) * n].view(rows, n)
        staged_lengths = self.staging_lengths[at:at + rows]
        host = staged.numpy()
        lens = staged_lengths.numpy()
        for i, a in enumerate(audio):
            host[i, :a.size] = a
            host[i, a.size:] = 0
            lens[i] = a.size
        cuda = self.device.type == "cuda"
        s.x[:rows].copy_(staged, non_blocking=cuda)
        s.x[rows:].zero_()
        s.lengths[:rows].copy_(staged_lengths, non_blocking=cuda)
        s.lengths[rows:].fill_(n)
        if s.graph is not None and s.out is not None:
            s.graph.replay()
            enc, enc_len = s.out
        else:
            enc, enc_len = self.compiled_call(s.x, s.lengths)
        return enc[:rows], enc_len[:rows]

    def _make(self, rows: int, n: int) -> _Shape:
        """A shape's static input tensors (its graph, where asked for, is
        captured by _capture)."""
        torch = self.torch
        if self.staging is None:
            most = max(self.rows) * max(self.lengths)
            pin = self.device.type == "cuda"
            self.staging = torch.empty(most, dtype=torch.float32, pin_memory=pin)
            self.staging_lengths = torch.empty(max(self.rows), dtype=torch.int64, pin_memory=pin)
        x = torch.zeros(rows, n, dtype=torch.float32, device=self.device)
        lengths = torch.full((rows,), n, dtype=torch.int64, device=self.device)
        s = _Shape(x, lengths)
        self.shapes[(rows, n)] = s
        return s

    def _capture(self, s: _Shape) -> None:
        """The shape's CUDA graph (capture_graph: fn's first runs compile
        or load the shape's graphs, where warm() has not). Where capture
        fails, no shape keeps a graph."""
        torch = self.torch
        try:
            s.graph, s.out = capture_graph(lambda: self.compiled_call(s.x, s.lengths), self.device, self.pool)
        except Exception as e:  # noqa: BLE001 - the compiled kernels still run, launched one by one
            self.graphs_on = False
            for other in self.shapes.values():
                other.graph = other.out = None
            log_info("encoder CUDA graph capture failed (%s: %s): the compiled encoder runs without graphs\n%s" % (
                type(e).__name__, e, traceback.format_exc()))
        free, total = torch.cuda.mem_get_info(self.device)
        rows, n = s.x.shape
        log_info("encoder shape %d x %.1f s captured: %.1f GiB reserved by this process, %.1f of %.1f GiB free on the GPU" % (
            rows, n / SAMPLE_RATE, torch.cuda.memory_reserved(self.device) / 2**30, free / 2**30, total / 2**30))

    def warm(self, run: Callable[[int, int], None], encode: Callable[[int, int], None] | None = None) -> None:
        """Compiles (or loads), captures and warms every shape, largest
        first (the graphs' shared pool is sized by the first):
        run(n, rows) puts one batch through the whole model. With CUDA
        graphs, encode(n, rows) puts one through the encoder alone (this
        object, under the engine's autocast), in three passes: every shape
        loaded (or compiled), then every shape captured, then run, whose
        first batch captures the decoder's graphs: nothing is loaded or
        captured after the decoder's capture (without encode, each shape
        is loaded, captured and decoded in turn)."""
        from torch._dynamo.utils import counters

        before = counters["stats"]["unique_graphs"]
        shapes = [(n, rows) for n in reversed(self.lengths) for rows in reversed(self.by_length[n])]

        def every_shape() -> None:
            if self.graphs_on and encode is not None:
                self.defer_capture = True
                try:
                    for n, rows in shapes:
                        encode(n, rows)
                finally:
                    self.defer_capture = False
                for n, rows in shapes:
                    encode(n, rows)
            for n, rows in shapes:
                run(n, rows)

        self.cache.warm(every_shape)
        self.graphs = counters["stats"]["unique_graphs"] - before
        if self.device.type == "cuda":
            # What the warm-up runs left cached (the graphs keep their own
            # pool): eight partitions of a GPU would otherwise each hold it.
            self.torch.cuda.empty_cache()


def capture_graph(fn: Callable[[], Any], device: Any, pool: Any) -> tuple[Any, Any]:
    """fn() captured as a CUDA graph in the memory pool pool: (the graph,
    fn's outputs, which each replay overwrites). fn runs twice first on a
    side stream (lazy initialisation, cuBLAS workspaces, inductor's first
    calls), all under the caller's autocast with its weight cache off (a
    cast cached outside the graph would be freed under it)."""
    import torch

    kind = torch.device(device).type
    on, dtype = torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)
    with torch.autocast(kind, dtype=dtype, enabled=on, cache_enabled=False):
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool, capture_error_mode="thread_local"):
            out = fn()
    return g, out


class GraphedCall:
    """fn over static input tensors, captured once as a CUDA graph
    (capture_graph, or capture where given: the tests' stand-in) and
    replayed. A call copies its arguments into the first rows of the
    static inputs, zeros past them (a row bucket's padding rows: zero
    samples, length 0, as an uncaptured call pads them), replays, and
    returns copies of fn's outputs with the padding rows cut: a graph's
    outputs are overwritten by its next replay, which a batch in parts of
    one bucket makes before its parts are joined."""

    def __init__(self, fn: Callable[..., Any], inputs: Sequence[Tensor], device: Any, pool: Any,
                 capture: Callable[[Callable[[], Any], Any, Any], tuple[Any, Any]] | None = None) -> None:
        self.inputs = list(inputs)
        self.graph, self.out = (capture or capture_graph)(lambda: fn(*self.inputs), device, pool)

    def __call__(self, *args: Tensor) -> tuple[Tensor, ...]:
        rows = args[0].shape[0]
        for static, a in zip(self.inputs, args, strict=True):
            static[:rows].copy_(a)
            static[rows:].zero_()
        self.graph.replay()
        out = self.out if isinstance(self.out, tuple) else (self.out,)
        return tuple(o[:rows].clone() for o in out)


class _Shape:
    """One static shape's input tensors and, on a GPU, its CUDA graph and
    the graph's output tensors."""

    def __init__(self, x: Tensor, lengths: Tensor) -> None:
        self.x, self.lengths = x, lengths
        self.graph: Tensor = None
        self.out: Encoded | None = None


def rows_by_length(lengths: Sequence[int], rows: Sequence[int], limit: Callable[[int], int] | None) -> dict[int, list[int]]:
    """The row buckets compiled at each length: every bucket, but where
    limit(n) says a shape of n samples holds fewer rows, only the buckets
    up to it (at least one row). A batch of more rows at that length runs
    as several parts (plan)."""
    out = {}
    for n in lengths:
        most = max(1, limit(n)) if limit is not None else max(rows)
        out[n] = [r for r in rows if r <= most] or [most]
    return out


def plan(by_length: dict[int, list[int]], rows: int, n: int, most: int, fit: bool = False) -> list[tuple[int, int, int]] | None:
    """How a batch of rows rows of at most n samples runs: parts of (real
    rows, the shape's rows, the shape's samples), in order; one part where
    a shape holds the whole batch, several where its length holds fewer
    rows (each as large as the length allows, the last the smallest shape
    that holds what is left); None where no length holds n samples or the
    batch has more than most rows (the row buckets' largest). With fit
    (model parameter row_parts=fit), a part that one shape would pad runs
    as two where they pad fewer rows (fit_rows)."""
    length = next((b for b in sorted(by_length) if n <= b), None)
    if length is None or rows > most:
        return None
    return [(real, shape_rows, length) for real, shape_rows in row_parts(by_length[length], rows, fit)]


def row_parts(buckets: Sequence[int], rows: int, fit: bool) -> list[tuple[int, int]]:
    """rows rows in row buckets (ascending) as (real rows, shape rows)
    parts, in order: parts of the largest bucket, each in the smallest
    bucket that holds it, or with fit as fit_rows splits it. The speech
    encoder's plan and the diarizer's in_buckets both run batches so."""
    parts: list[tuple[int, int]] = []
    while rows > 0:
        take = min(rows, buckets[-1])
        parts.extend(fit_rows(buckets, take) if fit else [(take, next(b for b in buckets if b >= take))])
        rows -= take
    return parts


def fit_rows(buckets: Sequence[int], rows: int) -> list[tuple[int, int]]:
    """rows rows (at most the largest bucket) as (real rows, shape rows)
    parts: the smallest bucket that holds them, or the largest bucket below
    them and the smallest that holds the rest where those two pad fewer
    rows (12 of buckets 1,2,4,8,16: 8 and 4, not 16 with 4 rows of zeros;
    13: 16, as 8 and 8 pad as many)."""
    one = next(b for b in buckets if b >= rows)
    below = max((b for b in buckets if b < rows), default=0)
    if one == rows or below == 0:
        return [(rows, one)]
    rest = rows - below
    rest_shape = next(b for b in buckets if b >= rest)
    if rest_shape - rest < one - rows:
        return [(below, below), (rest, rest_shape)]
    return [(rows, one)]


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """An exclusive lock on path across processes (flock), held for the block."""
    import fcntl

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
