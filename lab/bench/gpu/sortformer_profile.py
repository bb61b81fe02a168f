"""Where a served Sortformer step's GPU time goes: the diarize model's own
engine (model.py's SortformerDiarizer, as a partition runs it) on NeMo's
Sortformer-shaped model (the .nemo sortformer_study.py --save writes),
one batch of --rows recordings, each row's speaker cache and FIFO filled
by a first chunk, then a chunk of --seconds each (one streaming step at
the shipped chunk_seconds); with --step first, that chunk is each
recording's first (cache and FIFO empty: the shorter sequence a 45-s
clip runs). For each variant, a fresh engine over its
own copy of the model:

  shipped     the diarize model's parameters as shipped (compiled)
  pointwise   pointwise_convs=matmul
  sdpa        transformer_attention=sdpa
  both        pointwise_convs=matmul, transformer_attention=sdpa
  convs       pointwise_convs=matmul, subsampling_convs=taps
  flex        conformer_attention=flex
  all         pointwise_convs=matmul, transformer_attention=sdpa,
              conformer_attention=flex
  graphs      cuda_graphs=on: the compiled shapes replayed as CUDA graphs
  eager       encoder=eager: what compiling gives
  unaligned   align_frames=1: NeMo's lengths (793 frames, not the
              shipped 800, at 45 s; a first step 565, not 568)

it records the median wall time of --reps steps (and the host CPU time
they took, every thread of the process), each served as a
partition serves it (engine.serve: the rows' states decoded from the bytes a
request carries, the step, the turns, the states encoded back), the audio
seconds a second that makes, and a kernel
profile of one step (GPU time by kind of kernel, the 30 longest kernels:
encoder_profile.kernel_profile; the gap between the wall time and the GPU
time is the step's host work, and the host's own profile names where it
goes: the operators with the most CPU time of their own, and the Python
functions with the most time of their own), and the share of the chunk's speaker-frames
(each speaker, talking or not, each 80-ms frame: the turns the job gets)
on which a variant agrees with the first. JSON to --out, a line a variant
on stdout; a variant that fails is recorded and the next one runs.

    python lab/bench/gpu/sortformer_profile.py --nemo sortformer.nemo --out sortformer-profile.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "..", "deploy", "triton", "models", "asr", "1"))
import encoder_profile  # noqa: E402 - after the path
from fleetscribe_asr import sortformer  # noqa: E402 - after the path
from fleetscribe_asr.common import SAMPLE_RATE  # noqa: E402 - after the path
from fleetscribe_asr.diarize import Ask, Reply  # noqa: E402 - after the path
from gputime import median_time  # noqa: E402 - after the path

VARIANTS = {
    "shipped": {},
    "pointwise": {"pointwise_convs": "matmul"},
    "sdpa": {"transformer_attention": "sdpa"},
    "both": {"pointwise_convs": "matmul", "transformer_attention": "sdpa"},
    "convs": {"pointwise_convs": "matmul", "subsampling_convs": "taps"},
    "flex": {"conformer_attention": "flex"},
    "all": {"pointwise_convs": "matmul", "transformer_attention": "sdpa", "conformer_attention": "flex"},
    "graphs": {"cuda_graphs": "on"},
    "eager": {"encoder": "eager"},
    "unaligned": {"align_frames": "1"},
}


def speech_like(rows: int, seconds: float, seed: int) -> list[npt.NDArray[np.float32]]:
    """Rows of noise shaped like speech in loudness (bursts and pauses),
    a different recording each."""
    rng = np.random.default_rng(seed)
    n = round(seconds * SAMPLE_RATE)
    out = []
    for _ in range(rows):
        envelope = np.repeat(rng.uniform(0, 1, n // 1600 + 1) > 0.3, 1600)[:n]
        out.append((rng.standard_normal(n) * 0.1 * envelope).astype(np.float32))
    return out


def host_profile(fn: Any, top: int = 25) -> list[dict[str, Any]]:
    """The host's side of one call of fn: the operators and functions with
    the most CPU time of their own (ms, calls), where a step's wall clock
    beyond its GPU time goes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    return [{"name": e.key[:160], "self_ms": round(e.self_cpu_time_total / 1000, 3), "calls": e.count} for e in rows]


def python_profile(fn: Any, top: int = 20) -> list[dict[str, Any]]:
    """The Python functions of one call of fn with the most time of their
    own (ms, calls): the host's work that the operator profile above does
    not see (the turns, the states' encoding, the engine's own loops)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(fn)
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [{"name": "%s:%d(%s)" % (os.path.basename(f), line, name), "self_ms": round(tt * 1000, 3), "calls": nc}
            for (f, line, name), (_, nc, tt, _, _) in rows]


def speaking(turns: list[Any], seconds: float) -> npt.NDArray[np.bool_]:
    """Whether each speaker talks in each 80-ms frame of a chunk, from its
    turns: what the job gets, compared across variants."""
    frames = round(seconds / sortformer.FRAME_S)
    out = np.zeros((sortformer.SPEAKERS, frames), dtype=bool)
    for t in turns:
        out[t.speaker, round(t.start / sortformer.FRAME_S):round(t.end / sortformer.FRAME_S)] = True
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemo", required=True, help="the Sortformer-shaped .nemo")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=45.0, help="each chunk (chunk_seconds: one step)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--step", choices=("later", "first"), default="later",
                    help="later: every row's cache and FIFO filled by a first chunk (a long recording's step); first: "
                         "empty (a recording's first step, each 45-s clip of run.sh's sortformer points)")
    ap.add_argument("--variants", default="shipped,pointwise,sdpa,both", help="of " + ",".join(VARIANTS))
    ap.add_argument("--params", default="", help="diarize model parameters over every variant's (k=v,...)")
    ap.add_argument("--cache", default="", help="the compile cache folder")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    base = {"model": args.nemo, "chunk_seconds": "%g" % args.seconds, "batch_buckets": str(args.rows)}
    if args.cache:
        base["compile_cache"] = args.cache
    base.update(dict(kv.split("=", 1) for kv in args.params.split(",") if kv))
    first = speech_like(args.rows, args.seconds, 1)
    chunk = speech_like(args.rows, args.seconds, 2)
    out: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                           "rows": args.rows, "seconds": args.seconds, "step": args.step, "base_params": base, "variants": {}}
    reference: npt.NDArray[np.bool_] | None = None
    for name in args.variants.split(","):

        def figures(name: str = name) -> dict[str, Any]:
            nonlocal reference
            t0 = time.perf_counter()
            opts = sortformer.SortformerOptions.from_params({**base, **VARIANTS[name]})
            engine = sortformer.SortformerDiarizer(opts, device)
            load_s = time.perf_counter() - t0
            streams = [sortformer.Stream.empty(engine.dim) for _ in range(args.rows)]
            if args.step == "later":
                engine.step(first, streams, list(range(args.rows)))  # every row's cache and FIFO filled
            # Each step is served as a partition serves it (engine.serve):
            # the rows' states as their requests carry them, decoded, the
            # step, the turns, the states encoded back.
            raws = [st.encode() if args.step == "later" else b"" for st in streams]
            masks: list[npt.NDArray[np.bool_]] = []

            def step() -> None:
                replies = engine.serve({r: Ask(chunk[r], raws[r]) for r in range(args.rows)})
                for r in range(args.rows):
                    if not isinstance(replies[r], Reply):
                        raise replies[r]
                masks[:] = [speaking(replies[r].turns, args.seconds) for r in range(args.rows)]

            step()
            # The host's CPU a step (this process, every thread), over the
            # same steps as the wall time (median_time's untimed first call
            # and its reps): with the GPU's time, what a partition's diarize
            # process spends of its CPU on a step.
            cpu0 = time.process_time()
            ms = 1000 * median_time(step, args.reps)
            cpu_ms = 1000 * (time.process_time() - cpu0) / (args.reps + 1)
            # (a CPU, for a check of the script: no kernel profile)
            prof: dict[str, Any] = encoder_profile.kernel_profile(step) if device == "cuda" else {"gpu_ms": 0.0, "by_kind_ms": {}, "top": []}
            prof["host_top"] = host_profile(step)
            prof["python_top"] = python_profile(step)
            got = np.stack(masks)
            agree = float((got == reference).mean()) if reference is not None else 1.0
            if reference is None:
                reference = got
            v = {"ms": ms, "cpu_ms": cpu_ms, "audio_s_per_s": args.rows * args.seconds / (ms / 1000), "load_and_compile_s": load_s,
                 "speech_agreement_vs_first": agree, "describe": engine.describe(), **prof}
            print("%-8s %7.1f ms a step (GPU %.1f ms; %s; host CPU %.1f ms), %.0f audio-s/s, %.4f of speaker-frames as the first says, "
                  "ready in %.0f s" % (name, ms, prof["gpu_ms"], encoder_profile.kinds(prof), cpu_ms, v["audio_s_per_s"], agree, load_s),
                  flush=True)
            return v

        encoder_profile.record_variant(out, name, args.out, 8, figures)


if __name__ == "__main__":
    main()
