"""Where the encoder's GPU time goes, and what each way of running it
saves: NeMo's Parakeet-shaped model (the .nemo nemo_anchor.py saves)
through model.py's NemoEngine, one static shape (--rows x --seconds of
speech-like audio). For each variant:

  eager           the eager path (NeMo's preprocessor and encoder), NeMo's
                  own attention (encoder_attention=model): the reference
  regional        the compiled encoder (each conformer layer and the
                  subsampling compiled, static shapes: --rows and --small),
                  NeMo's own attention, as shipped before SDPA
  regional_dyn    the same regions compiled with the batch symbolic (torch's
                  automatic dynamic shapes: static at the first call, the
                  batch made symbolic at the second), no rows of padding
  regional_pre    the same with NeMo's feature extractor compiled as well
  regional_sdpa   the same with NeMo's SDPA path for its relative-position
                  attention (encoder_attention=sdpa, as shipped), and
                  eager_sdpa its eager time; the model's own convolutions
                  (shipped until pointwise served more)
  whole           the whole encoder function compiled as one graph
  pointwise       regional_sdpa with the conformer's kernel-1 convolutions
                  as matrix multiplies (pointwise_convs=matmul, as shipped
                  since it served 1.07-1.08x on an H100), and
                  eager_sdpa_mm its eager time; it changes the model, so
                  it runs after the variants above
  taps            regional_sdpa (with pointwise's change where it ran) with
                  the subsampling's convolutions by taps where compiled
                  (subsampling_convs=taps), and the subsampling alone
                  that way (pre_encode_taps)
  fp8             regional_sdpa (with pointwise's and taps' changes where
                  they ran) with the conformer layers' linear layers as FP8
                  matrix multiplies where compiled (linear_precision=fp8)
  bf16w           the encoder's weights held in bf16 (no cast of every
                  weight at every call), eagerly (eager_bf16w) and regional

the median time of --reps calls, the mean relative difference of its
output from eager's over the valid frames, the agreement of the tokens
NeMo's decoder reads from it with those it reads from eager's (1 - token
edit distance / tokens; with random weights, whose logits tie, it moves
as much between eager paths as between forms: the relative difference is
the numerics' measure), and a kernel profile: GPU time
by kind of kernel (matrix multiplies, convolutions, inductor's fused
kernels, elementwise, reductions, normalisation, softmax, FFT, copies) and
the longest kernels. Also the feature extractor's time alone. JSON to
--out, a line a variant on stdout; a variant that fails is recorded with
its error and the next one runs. Eager, regional and regional_dyn are
also timed at --small rows and at --odd rows (which regional pads to
--small), wall clock and GPU time: what padding a batch to its shape
costs, what a symbolic batch costs, and whether a small batch waits on
the host.

    python lab/bench/gpu/encoder_profile.py --nemo MODEL.nemo --cache DIR --out profile.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import encoder_study  # noqa: E402 - model.py's engines, speech-like clips, rel_diff
import standin  # noqa: E402
from gputime import median_time, sync  # noqa: E402

KINDS = [  # (kind, substrings of a kernel's name), first match wins
    ("fft", ("fft", "FFT")),
    ("copy", ("Memcpy", "Memset", "copy_kernel", "CatArrayBatched", "cat_")),
    ("matmul", ("gemm", "nvjet", "xmma", "cutlass", "s16816", "s1688", "Kernel2", "splitKreduce", "gemv", "dot_kernel")),
    ("attention", ("sdpa", "flash", "fmha", "attention", "efficient")),  # before cuDNN's convolutions: its attention is cudnn_..._sdpa_...
    ("convolution", ("conv", "cudnn", "implicit", "depthwise", "winograd")),
    ("softmax", ("softmax", "Softmax")),
    ("normalisation", ("layer_norm", "LayerNorm", "batch_norm", "BatchNorm", "welford", "norm_")),
    ("inductor", ("triton_",)),
    ("reduction", ("reduce_kernel", "reduce")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "index", "where", "fill")),
]


def kind(name: str) -> str:
    for k, subs in KINDS:
        if any(s in name for s in subs):
            return k
    return "other"


def kinds(prof: dict[str, Any], n: int = 6) -> str:
    """A kernel profile's n largest kinds of kernel, "kind ms, ..."."""
    return ", ".join("%s %.1f" % kv for kv in list(prof["by_kind_ms"].items())[:n])


def record_variant(out: dict[str, Any], name: str, path: str, width: int, measure: Callable[[], dict[str, Any]]) -> None:
    """What measure() gives as out's variant name, or its failure (recorded
    and printed: the next variant runs), and the JSON written to path (if
    any) after every variant, so a call cut short keeps what it measured."""
    try:
        v = measure()
    except Exception as e:  # noqa: BLE001 - recorded; the next variant runs
        v = {"error": "%s: %s" % (type(e).__name__, e), "trace": traceback.format_exc()[-3000:]}
        print("%-*s failed: %s" % (width, name, v["error"]), flush=True)
    out["variants"][name] = v
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def kernel_profile(fn: Callable[[], Any]) -> dict[str, Any]:
    """GPU time by kind of kernel and the 30 longest kernels (ms, count) of one call of fn."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    by_kind: defaultdict[str, float] = defaultdict(float)
    by_name: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.time_range.elapsed_us()
        by_kind[kind(e.name)] += us / 1000
        by_name[e.name][0] += us / 1000
        by_name[e.name][1] += 1
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:30]
    return {"gpu_ms": sum(by_kind.values()), "by_kind_ms": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "top": [{"name": n[:160], "ms": round(v[0], 3), "count": v[1], "kind": kind(n)} for n, v in top]}


class DynamicEngine:
    """The shipped regions compiled with the batch symbolic: no shapes, no
    padding; warmed at each of rows, so that the second makes the batch
    symbolic (torch's automatic dynamic shapes). Its attention is that of
    like, a NemoEngine of the same model."""

    def __init__(self, model: Any, regions: list[Any], rows: list[int], n: int, like: Any) -> None:
        self.model, self.rows, self.n = model, rows, n
        self.regions = [(m, torch.compile(m.forward)) for m in regions]
        self.compiled = self
        self.apply_attention = like.apply_attention

    def describe(self) -> tuple[str, str]:
        return "compiled_symbolic_batch", ""

    def warm(self, run: Callable[[int, int], None]) -> None:
        for rows in self.rows:
            run(self.n, rows)

    def transcribe(self, audio: list[npt.NDArray[np.float32]], _rows: int, _timestamps: bool, _verbose: bool) -> None:
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            self.encode(audio)

    def encode(self, audio: list[npt.NDArray[np.float32]]) -> tuple[Tensor, Tensor]:
        x = torch.from_numpy(np.stack(audio)).to("cuda")
        lens = torch.tensor([a.size for a in audio], device="cuda")
        for m, c in self.regions:
            m.forward = c
        try:
            features, n = self.model.preprocessor(input_signal=x, length=lens)
            return self.model.encoder.forward_internal(features, n)
        finally:
            for m, _ in self.regions:
                del m.forward


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nemo", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--seconds", type=float, default=45)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--small", type=int, default=8)
    ap.add_argument("--odd", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--variants", default="eager,regional,regional_dyn,regional_pre,regional_sdpa,whole,pointwise,taps,fp8,bf16w")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    device = "cuda"
    mod = encoder_study.shipped()
    from fleetscribe_asr import compiled

    model = mod.load_model(args.nemo, device)
    n = round(args.seconds * standin.SAMPLE_RATE)
    audio = encoder_study.clips(n, args.rows, 7 + args.rows)
    lengths = compiled.parse_buckets("%g" % args.seconds)
    out: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rows": args.rows,
                           "seconds": args.seconds, "variants": {}}
    # Every engine shares the model: each puts back its own attention
    # before it runs (encode).
    eager = mod.NemoEngine(model, device, "bf16", mod.EncoderOptions(attention="model"))

    def encode(engine: Any, part: list[npt.NDArray[np.float32]] = audio) -> tuple[Tensor, Tensor]:
        engine.apply_attention()
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            return engine.encode(part)

    ref, ref_frames = encode(eager)
    ref = ref.clone()

    def tokens(enc: Tensor, frames: Tensor) -> list[list[int]]:
        return encoder_study.decoded_tokens(model, enc, frames)

    ref_tokens = tokens(ref, ref_frames)

    def engine_with(name: str, regions_of: Callable[[Any], list[Any]] | None = None, whole: bool = False,
                    rows: tuple[int, ...] = (args.rows,), attention: str = "model") -> Any:
        """A NemoEngine whose compiled encoder has the regions regions_of(model) gives (or none: whole)."""
        o = mod.EncoderOptions(mode="compiled", lengths=lengths, rows=list(rows), cache_dir=args.cache, attention=attention)
        e = mod.NemoEngine(model, device, "bf16", o, source=args.nemo)
        if regions_of is not None or whole:
            key = "nemo-profile|%s|%s|%s" % (name, compiled.source_identity(args.nemo), torch.__version__)
            e.compiled = o.encoder(e.compiled.fn, device, key, [] if whole or regions_of is None else regions_of(model))
        return e

    def shipped_regions(m: Any) -> list[Any]:
        return [m.encoder.pre_encode, *m.encoder.layers]

    def sizes(name: str, engine: Any) -> None:
        """The encoder's time at --small and --odd rows (ms)."""
        got: dict[str, float] = {}
        for rows in (args.small, args.odd):

            def call(part: list[npt.NDArray[np.float32]] = audio[:rows]) -> tuple[Tensor, Tensor]:
                return encode(engine, part)

            call()
            got[str(rows)] = 1000 * median_time(call, args.reps)
            # The GPU's busy time beside the wall clock: where the two part,
            # the call waits on the host (launches, guards), not the GPU.
            got[str(rows) + "_gpu"] = kernel_profile(call)["gpu_ms"]
        out.setdefault("sizes_ms", {})[name] = got
        print("%-14s %s" % (name, ", ".join("%s rows %.1f ms (GPU %.1f)" % (r, got[str(r)], got[str(r) + "_gpu"])
                                            for r in (args.small, args.odd))), flush=True)

    def measure(name: str, engine: Any, more: Callable[[str, Any], None] | None = None) -> None:
        def figures() -> dict[str, Any]:
            t0 = time.perf_counter()
            engine.apply_attention()
            c = engine.compiled
            if c is not None:
                c.warm(lambda n_, rows: engine.transcribe([np.zeros(n_, dtype=np.float32)] * rows, rows, False, False))
            warm_s = time.perf_counter() - t0
            enc, frames = encode(engine)
            enc, frames = enc.clone(), frames.clone()
            diff = encoder_study.rel_diff(ref, enc, ref_frames, 2)
            agree, rows_differing = encoder_study.agreement(ref_tokens, tokens(enc, frames))
            ms = 1000 * median_time(lambda: encode(engine), args.reps)
            prof = kernel_profile(lambda: encode(engine))
            v = {"ms": ms, "warm_s": warm_s, "mean_rel_diff": diff, "token_agreement": agree, "rows_differing": rows_differing,
                 "path": engine.describe()[0], **prof}
            if more:
                more(name, engine)
            print("%-14s %7.1f ms (GPU %.1f ms; %s), rel diff %.4f, tokens %.4f (%d rows differ), warm %.0f s" % (
                name, ms, prof["gpu_ms"], kinds(prof), diff, agree, rows_differing, warm_s), flush=True)
            return v

        record_variant(out, name, args.out, 14, figures)

    want = set(args.variants.split(","))
    # The feature extractor alone, eagerly.
    x = torch.from_numpy(np.stack(audio)).to(device)
    lens = torch.full((args.rows,), n, device=device, dtype=torch.int64)

    def features() -> Any:
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            return model.preprocessor(input_signal=x, length=lens)

    out["features_eager_ms"] = 1000 * median_time(features, args.reps)
    out["features_profile"] = kernel_profile(features)
    print("features (eager) %.2f ms" % out["features_eager_ms"], flush=True)
    # The subsampling alone (NeMo's 8x depthwise-striding convolutions at
    # the feature rate), eagerly and compiled as the shipped region is:
    # its share of the encoder is the diarizer's front end too.
    feats, feat_n = features()
    pre = model.encoder.pre_encode

    def subsampling(name: str, f: Callable[..., Any]) -> None:
        def sub() -> Any:
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                return f(x=feats.transpose(1, 2), lengths=feat_n)

        try:
            sub()
            out[name + "_ms"] = 1000 * median_time(sub, args.reps)
            out[name + "_profile"] = kernel_profile(sub)
            print("%s %.2f ms (GPU %.2f ms)" % (name, out[name + "_ms"], out[name + "_profile"]["gpu_ms"]), flush=True)
        except Exception as e:  # noqa: BLE001 - recorded; the variants run
            out[name + "_error"] = "%s: %s" % (type(e).__name__, e)
            print("%s failed: %s" % (name, out[name + "_error"]), flush=True)

    subsampling("pre_encode_eager", pre)
    subsampling("pre_encode_compiled", torch.compile(pre.forward, dynamic=False))

    if "eager" in want:
        measure("eager", eager, more=sizes)
    if "regional" in want:
        measure("regional", engine_with("regional", shipped_regions, rows=(args.small, args.rows)), more=sizes)
    if "regional_dyn" in want:
        measure("regional_dyn", DynamicEngine(model, shipped_regions(model), [args.small, args.rows], n, eager), more=sizes)
    if "regional_pre" in want:
        measure("regional_pre", engine_with("regional_pre", lambda m: [m.preprocessor.featurizer, *shipped_regions(m)]))
    if "regional_sdpa" in want:
        measure("eager_sdpa", mod.NemoEngine(model, device, "bf16", mod.EncoderOptions(attention="sdpa")))
        measure("regional_sdpa", engine_with("regional_sdpa", shipped_regions, attention="sdpa"))
    if "whole" in want:
        measure("whole", engine_with("whole", whole=True))
    if "pointwise" in want:  # after every variant of the convolutions: it changes the model's modules
        measure("eager_sdpa_mm", mod.NemoEngine(model, device, "bf16", mod.EncoderOptions(attention="sdpa", pointwise_convs="matmul")))
        measure("regional_sdpa_mm", engine_with("regional_sdpa_mm", shipped_regions, attention="sdpa"))
    if "taps" in want:  # the same, the subsampling's convolutions by taps (subsampling_convs=taps)
        from fleetscribe_asr import convs

        convs.by_taps(pre)
        torch._dynamo.reset()  # the subsampling compiled above traced the convolutions
        subsampling("pre_encode_taps", torch.compile(pre.forward, dynamic=False))
        name = "regional_sdpa_mm_taps" if "pointwise" in want else "regional_sdpa_taps"
        measure(name, engine_with(name, shipped_regions, attention="sdpa"))
    if "fp8" in want:  # the linear layers in FP8 where compiled (linear_precision=fp8), over what ran above
        n_fp8 = compiled.linear_form(model.encoder, "fp8", device)
        torch._dynamo.reset()  # the layers compiled above: a changed class is not in their guards
        print("fp8: %d linear layers" % n_fp8, flush=True)
        name = "regional_sdpa" + ("_mm" if "pointwise" in want else "") + ("_taps" if "taps" in want else "") + "_fp8"
        measure(name, engine_with(name, shipped_regions, attention="sdpa"))
    if "bf16w" in want:  # last: it changes the model's weights
        model.encoder.to(torch.bfloat16)
        measure("eager_bf16w", eager)
        measure("bf16w", engine_with("bf16w", shipped_regions))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
