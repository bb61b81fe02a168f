"""The compiled encoder against eager, offline, through the engines the
shipped model.py serves: NeMo's Parakeet-shaped model (the .nemo that
nemo_anchor.py saves, --nemo) or the stand-in (--standin). Each batch size
of --batches is one static shape of each length bucket, as model.py's
batch_buckets makes them. For each, on speech-like clips filling the bucket:

  - the encoder's time eagerly (NeMo's model: with its own attention, as
    NeMo runs it, and through SDPA), compiled as shipped (regional compile,
    static shapes, SDPA attention unless --attention model) and compiled
    without CUDA graphs where they are on (the same kernels launched one by
    one); with --variants modelattn also compiled with the model's own
    attention; at the first batch size also with the other rule of bf16
    rounding (--casts);
  - at the first batch size: the compiled output's mean relative
    difference from eager's over the valid frames; the decoded tokens'
    agreement with eager's (1 - token edit distance / eager's tokens) and
    how many rows differ at all; the same for a control, eager's output
    with noise of the compiled difference's size (random weights make
    decisions near ties: the control says how many flips a difference that
    small causes by itself), for the other rule of bf16 rounding inside
    fused kernels (--casts: fused or eager), and against eager in fp32;
    the whole batch (encoder and decoder) eager and compiled, as clips/s.

The compiled encoder is model.py's CompiledEncoder in the shared compile
cache (--cache): the first use of each shape compiles (cold) or loads it
(warm), and is timed; --warm-only runs just that, in a fresh process, for
the time a restarted partition takes to load its compiled shapes. JSON to
--out; a line per point on stdout.

    python lab/bench/gpu/encoder_study.py --nemo MODEL.nemo --cache DIR --buckets 45 --batches 16,64 --out study.json
    python lab/bench/gpu/encoder_study.py --standin --cache DIR --out study.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_PY = os.path.join(HERE, "..", "..", "..", "deploy", "triton", "models", "asr", "1", "model.py")
sys.path.insert(0, HERE)
import standin  # noqa: E402 - speech-like audio, and the stand-in itself
from gputime import median_time, sync  # noqa: E402


def shipped() -> Any:
    """The shipped engines' code (model.py's package fleetscribe_asr): the
    compiled encoder and the Parakeet engine, as one namespace."""
    import types

    sys.path.insert(0, os.path.dirname(MODEL_PY))
    from fleetscribe_asr import compiled, parakeet

    return types.SimpleNamespace(EncoderOptions=compiled.EncoderOptions, parse_buckets=compiled.parse_buckets,
                                 NemoEngine=parakeet.NemoEngine, load_model=parakeet.load_model)


def edit_distance(a: Sequence[int], b: Sequence[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def agreement(ref: list[list[int]], got: list[list[int]]) -> tuple[float, int]:
    """1 - summed token edit distance / summed reference tokens, and rows that differ."""
    dist = sum(edit_distance(r, g) for r, g in zip(ref, got, strict=False))
    total = sum(len(r) for r in ref)
    return 1 - dist / max(1, total), sum(r != g for r, g in zip(ref, got, strict=False))


def decoded_tokens(model: Any, enc: Tensor, frames: Tensor) -> list[list[int]]:
    """The token ids NeMo's decoder reads from each row's encoder frames
    (inference mode, bf16 autocast on a GPU)."""
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=torch.cuda.is_available()):
        hyps = model.decoding.rnnt_decoder_predictions_tensor(enc, frames, return_hypotheses=True)
    return [h.y_sequence.tolist() if hasattr(h.y_sequence, "tolist") else list(h.y_sequence) for h in hyps]


def rel_diff(ref: Tensor, got: Tensor, frames: Tensor, time_dim: int) -> float:
    """Mean |got - ref| / mean |ref| over each row's valid frames."""
    num = den = 0.0
    for i, n in enumerate(frames.tolist()):
        r = ref[i].narrow(time_dim - 1, 0, n).float()
        g = got[i].narrow(time_dim - 1, 0, n).float()
        num += float((g - r).abs().sum())
        den += float(r.abs().sum())
    return num / max(den, 1e-30)


class NemoSide:
    """NeMo's model behind model.py's NemoEngine: eagerly and with each
    compiled variant (options: name -> model.py's EncoderOptions), all on
    one copy of the model (the compiled regions run compiled only inside
    their own calls)."""

    def __init__(self, mod: Any, path: str, options: dict[str, Any], device: str) -> None:
        self.torch_model = mod.load_model(path, device)
        # The reference: eager, the attention as the model file says (NeMo's default).
        self.eager = mod.NemoEngine(self.torch_model, device, "bf16", mod.EncoderOptions(attention="model"))
        self.eager_sdpa = mod.NemoEngine(self.torch_model, device, "bf16", mod.EncoderOptions(attention="sdpa"))
        self.variants = {name: mod.NemoEngine(self.torch_model, device, "bf16", o, source=path) for name, o in options.items()}
        self.time_dim = 2  # [B, D, T]

    def ctx(self) -> tuple[Any, Any]:
        return torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=torch.cuda.is_available())

    def encode(self, engine: Any, audio: list[npt.NDArray[np.float32]]) -> tuple[Tensor, Tensor]:
        engine.apply_attention()  # the engines share one model
        a, b = self.ctx()
        with a, b:
            return engine.encode(audio)

    def encode_fp32(self, audio: list[npt.NDArray[np.float32]]) -> tuple[Tensor, Tensor] | None:
        """Eager's output without autocast: the reference both bf16 paths
        are measured against."""
        self.eager.apply_attention()
        with torch.inference_mode():
            return self.eager.encode(audio)

    def tokens(self, enc: Tensor, frames: Tensor) -> list[list[int]]:
        return decoded_tokens(self.torch_model, enc, frames)

    def whole(self, engine: Any, audio: list[npt.NDArray[np.float32]]) -> None:
        engine.apply_attention()
        engine.transcribe(audio, len(audio), False, False)

    def encoder_only(self, engine: Any, audio: list[npt.NDArray[np.float32]]) -> None:
        """The batch through the engine's encoder alone, as a batch runs
        (the compiled encoder's warm() loads and captures with it)."""
        engine.apply_attention()
        with engine.inference():
            engine.encode(audio)


class StandinSide:
    """The stand-in behind its Engine, eagerly and with each compiled
    variant."""

    def __init__(self, mod: Any, options: dict[str, Any], device: str) -> None:  # noqa: ARG002 (the engines' signature)
        dev = torch.device(device)
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        cfg = standin.Config() if dev.type == "cuda" else standin.Config.tiny()
        self.model = standin.build(cfg, dev, dtype)
        mode = "cuda_graph" if dev.type == "cuda" else "eager"
        most = max(max(o.rows) for o in options.values())
        self.decode = standin.GreedyTDT(self.model.decoder, mode=mode, max_batch=max(most, 256))
        standin.calibrate(self.model, self.decode)
        key = "standin|study|%s|%s" % (torch.__version__, dev.type)
        enc = self.model.encoder
        self.eager = self.eager_sdpa = standin.Engine(self.model, self.decode)
        self.variants = {name: standin.Engine(self.model, self.decode, compiled=o.encoder(enc.forward, device, key, [enc.sub, *enc.layers]))
                         for name, o in options.items()}
        self.time_dim = 1  # [B, T, D]

    def encode(self, engine: Any, audio: list[npt.NDArray[np.float32]]) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            return engine.encode(audio)

    def encode_fp32(self, audio: list[npt.NDArray[np.float32]]) -> tuple[Tensor, Tensor] | None:  # noqa: ARG002
        return None  # the stand-in is built in bf16: it has no fp32 path

    def tokens(self, enc: Tensor, frames: Tensor) -> list[list[int]]:
        with torch.no_grad():
            toks, _, _ = self.decode(self.model.decoder.project(enc, frames), frames)
        return toks

    def whole(self, engine: Any, audio: list[npt.NDArray[np.float32]]) -> None:
        engine.transcribe(audio, len(audio), False, False)

    def encoder_only(self, engine: Any, audio: list[npt.NDArray[np.float32]]) -> None:
        with torch.no_grad():
            engine.encode(audio)


def clips(n: int, count: int, seed: int) -> list[npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    return [standin.speech_like(rng, n) for _ in range(count)]


def warm_only(args: argparse.Namespace, mod: Any, device: str) -> None:
    """A restarted partition: load the model and its compiled shapes."""
    t0 = time.perf_counter()
    side = make_side(args, mod, device, only="compiled")
    loaded = time.perf_counter() - t0
    engine = side.variants["compiled"]
    c = engine.compiled

    def run(n: int, rows: int) -> None:
        side.whole(engine, [np.zeros(n, dtype=np.float32)] * rows)

    c.warm(run, lambda n, rows: side.encoder_only(engine, [np.zeros(n, dtype=np.float32)] * rows))
    sync()
    print(json.dumps({"load_s": loaded, "compiled_s": c.warm_seconds, "total_s": time.perf_counter() - t0, "cold": c.cold, "graphs": c.graphs}), flush=True)


def options(args: argparse.Namespace, mod: Any) -> dict[str, Any]:
    """The compiled variants: the shipped one (CUDA graphs, args.casts),
    the same kernels launched one by one (nographs), and the other casts
    rule at the first batch size (othercasts)."""
    lengths = mod.parse_buckets(args.buckets)
    batches = [int(x) for x in args.batches.split(",") if x]
    other = "eager" if args.casts == "fused" else "fused"

    def o(rows: list[int], graphs: bool = True, casts: str = args.casts, tuning: str = "default", attention: str = args.attention) -> Any:
        return mod.EncoderOptions(mode="compiled", lengths=lengths, rows=rows, graphs=graphs, casts=casts, cache_dir=args.cache,
                                  tuning=tuning, attention=attention)

    return {"compiled": o(batches, graphs=args.graphs == "on"), "nographs": o(batches, graphs=False),
            "othercasts": o(batches[:1], graphs=args.graphs == "on", casts=other),
            "autotune": o(batches, graphs=args.graphs == "on", tuning="autotune"),
            "modelattn": o(batches, graphs=args.graphs == "on", attention=other_attention(args))}


def other_attention(args: argparse.Namespace) -> str:
    """The attention the modelattn variant runs: the one not shipped."""
    return "model" if args.attention == "sdpa" else "sdpa"


def make_side(args: argparse.Namespace, mod: Any, device: str, only: str | None = None) -> NemoSide | StandinSide:
    want = {only} if only else {"compiled", *args.variants.split(",")}
    opts = {k: v for k, v in options(args, mod).items() if k in want}
    if args.standin:
        return StandinSide(mod, opts, device)
    return NemoSide(mod, args.nemo, opts, device)


def numerics(side: NemoSide | StandinSide, audio: list[npt.NDArray[np.float32]], p: dict[str, Any]) -> None:
    """Fills p with the compiled encoder's closeness to eager's at one
    batch: the outputs' mean relative difference over the valid frames, the
    decoded tokens' agreement with eager's and how many rows differ; the
    same for a control (eager's output with noise of the compiled
    difference's size: random weights make the joint's decisions near ties,
    and the control says how many flips a difference that small causes by
    itself); each compiled variant's agreement; and against eager without
    autocast (fp32), where the model has an fp32 path."""
    eo, ef = side.encode(side.eager, audio)
    ref = side.tokens(eo, ef)
    p["tokens_per_row"] = sum(len(r) for r in ref) / max(1, len(ref))
    for name in ("compiled", "othercasts"):
        if name not in side.variants:
            continue
        co, cf = side.encode(side.variants[name], audio)
        co, cf = co.clone(), cf.clone()  # a CUDA graph's outputs live until its next replay
        pre = "" if name == "compiled" else name + "_"
        p[pre + "mean_rel_diff"] = rel_diff(eo, co, ef, side.time_dim)
        p[pre + "token_agreement"], p[pre + "rows_differing"] = agreement(ref, side.tokens(co, cf))
        if name == "compiled":
            compiled_out, compiled_frames = co, cf
    diff = p["mean_rel_diff"]
    g = torch.Generator(device=eo.device).manual_seed(1)
    noise = torch.randn(eo.shape, generator=g, device=eo.device, dtype=torch.float32)
    scale = diff * float(eo.float().abs().mean()) / float(noise.abs().mean())
    po = (eo.float() + scale * noise).to(eo.dtype)
    p["control_rel_diff"] = rel_diff(eo, po, ef, side.time_dim)
    p["control_token_agreement"], p["control_rows_differing"] = agreement(ref, side.tokens(po, ef))
    # Where the bf16 eager path agrees with fp32 no better than the compiled
    # one does, agreement with eager is not what says the compiled encoder
    # is right: closeness to fp32 is.
    fp = side.encode_fp32(audio)
    if fp is not None:
        fo, ff = fp
        ref32 = side.tokens(fo.to(eo.dtype), ff)
        p["fp32_rel_diff_eager"] = rel_diff(fo, eo, ff, side.time_dim)
        p["fp32_rel_diff_compiled"] = rel_diff(fo, compiled_out, ff, side.time_dim)
        p["eager_vs_fp32_token_agreement"], _ = agreement(ref32, ref)
        p["compiled_vs_fp32_token_agreement"], _ = agreement(ref32, side.tokens(compiled_out, compiled_frames))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nemo", default="", help="the Parakeet-shaped .nemo (nemo_anchor.py --save)")
    ap.add_argument("--standin", action="store_true", help="study the stand-in instead")
    ap.add_argument("--cache", required=True, help="the compile cache (shared with the served partitions)")
    ap.add_argument("--buckets", default="30", help="length buckets, seconds (model.py's length_buckets)")
    ap.add_argument("--batches", default="16,64", help="batch sizes, each a compiled shape (model.py's batch_buckets)")
    ap.add_argument("--casts", default="fused", choices=["fused", "eager"], help="the shipped encoder_casts")
    ap.add_argument("--graphs", default="off", choices=["on", "off"], help="the shipped encoder_graphs (on: experimental)")
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "model"], help="the shipped encoder_attention")
    ap.add_argument("--variants", default="compiled,nographs,othercasts")
    ap.add_argument("--out", default="")
    ap.add_argument("--warm-only", action="store_true")
    ap.add_argument("--no-warm", action="store_true", help="skip the second process's warm start")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mod = shipped()
    if args.warm_only:
        warm_only(args, mod, device)
        return
    t0 = time.perf_counter()
    side = make_side(args, mod, device)
    out = {"model": "standin" if args.standin else "nemo", "attention": args.attention, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
           "load_s": time.perf_counter() - t0, "casts": args.casts, "buckets": {}, "variants": {}, "warm": None}
    # Compile (or load) and capture every shape of every variant, as a
    # partition does before it is ready, timing each.
    from torch._dynamo.utils import counters

    for name, engine in side.variants.items():
        c = engine.compiled
        g0, t = counters["stats"]["unique_graphs"], time.perf_counter()
        c.warm(lambda n, rows: side.whole(engine, [np.zeros(n, dtype=np.float32)] * rows),  # noqa: B023 - called at once
               lambda n, rows: side.encoder_only(engine, [np.zeros(n, dtype=np.float32)] * rows))  # noqa: B023 - called at once
        sync()
        out["variants"][name] = {"seconds": time.perf_counter() - t, "graphs": counters["stats"]["unique_graphs"] - g0,
                                 "cold": c.cold, "path": c.path, "rows": c.rows}
        print("%s: %s" % (name, c.summary()), flush=True)
    comp = side.variants["compiled"].compiled
    for b in comp.lengths:
        sec = b / standin.SAMPLE_RATE
        row = {"compile_s": out["variants"]["compiled"]["seconds"], "points": {}}
        out["buckets"]["%g" % sec] = row
        for i, bs in enumerate(comp.rows):
            audio = clips(b, bs, 7 + bs)
            eager_s = median_time(lambda: side.encode(side.eager, audio))  # noqa: B023
            comp_s = median_time(lambda: side.encode(side.variants["compiled"], audio))  # noqa: B023
            p = {"encoder_eager_ms": 1000 * eager_s, "encoder_compiled_ms": 1000 * comp_s, "speedup": eager_s / comp_s, "rows": bs}
            if side.eager_sdpa is not side.eager:
                p["encoder_eager_sdpa_ms"] = 1000 * median_time(lambda: side.encode(side.eager_sdpa, audio))  # noqa: B023
            if "modelattn" in side.variants:
                p["encoder_modelattn_ms"] = 1000 * median_time(lambda: side.encode(side.variants["modelattn"], audio))  # noqa: B023
            if "nographs" in side.variants:
                p["encoder_nographs_ms"] = 1000 * median_time(lambda: side.encode(side.variants["nographs"], audio))  # noqa: B023
            if i == 0 and "othercasts" in side.variants:  # compiled at the first batch size only
                p["encoder_othercasts_ms"] = 1000 * median_time(lambda: side.encode(side.variants["othercasts"], audio))  # noqa: B023
            if "autotune" in side.variants:
                p["encoder_autotune_ms"] = 1000 * median_time(lambda: side.encode(side.variants["autotune"], audio))  # noqa: B023
            line = "bucket %g s batch %3d: encoder eager %.1f ms%s, compiled %.1f ms (%.2fx)%s%s%s" % (
                sec, bs, 1000 * eager_s, " (SDPA %.1f ms)" % p["encoder_eager_sdpa_ms"] if "encoder_eager_sdpa_ms" in p else "",
                1000 * comp_s, eager_s / comp_s,
                ", compiled with %s attention %.1f ms (%.2fx)" % (
                    other_attention(args), p["encoder_modelattn_ms"], 1000 * eager_s / p["encoder_modelattn_ms"])
                if "encoder_modelattn_ms" in p else "",
                ", without CUDA graphs %.1f ms" % p["encoder_nographs_ms"] if "encoder_nographs_ms" in p else "",
                ", autotuned %.1f ms (%.2fx)" % (p["encoder_autotune_ms"], 1000 * eager_s / p["encoder_autotune_ms"])
                if "encoder_autotune_ms" in p else "")
            if "encoder_othercasts_ms" in p:
                line += ", casts %s %.1f ms (%.2fx)" % ("eager" if args.casts == "fused" else "fused", p["encoder_othercasts_ms"],
                                                       1000 * eager_s / p["encoder_othercasts_ms"])
            if i == 0:
                numerics(side, audio, p)
                p["whole_eager_clips_per_s"] = bs / median_time(lambda: side.whole(side.eager, audio), 2)  # noqa: B023
                p["whole_compiled_clips_per_s"] = bs / median_time(lambda: side.whole(side.variants["compiled"], audio), 2)  # noqa: B023
                line += "; mean rel diff %.4f; tokens %.4f agree (%d of %d rows differ); control (eager + noise of rel %.4f): %.4f agree (%d rows differ)" % (
                    p["mean_rel_diff"], p["token_agreement"], p["rows_differing"], bs, p["control_rel_diff"], p["control_token_agreement"],
                    p["control_rows_differing"])
                if "othercasts_token_agreement" in p:
                    line += "; casts %s: rel diff %.4f, tokens %.4f agree" % (
                        "eager" if args.casts == "fused" else "fused", p["othercasts_mean_rel_diff"], p["othercasts_token_agreement"])
                line += "; whole batch %.1f -> %.1f clips/s (%.1f tokens a row)" % (
                    p["whole_eager_clips_per_s"], p["whole_compiled_clips_per_s"], p["tokens_per_row"])
            row["points"][str(bs)] = p
            print(line, flush=True)
            if "fp32_rel_diff_eager" in p:
                print("  against eager fp32: rel diff eager bf16 %.4f, compiled %.4f; tokens agree eager bf16 %.4f, compiled %.4f" % (
                    p["fp32_rel_diff_eager"], p["fp32_rel_diff_compiled"], p["eager_vs_fp32_token_agreement"],
                    p["compiled_vs_fp32_token_agreement"]), flush=True)
            if args.out:  # as it goes: a later point that fails loses only itself
                with open(args.out, "w") as f:
                    json.dump(out, f, indent=2)
            if device == "cuda":
                torch.cuda.empty_cache()
    if not args.no_warm:
        cmd = [sys.executable, os.path.abspath(__file__), "--warm-only", "--cache", args.cache, "--buckets", args.buckets,
               "--batches", args.batches, "--casts", args.casts, "--graphs", args.graphs,
               "--attention", args.attention] + (["--standin"] if args.standin else ["--nemo", args.nemo])
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        out["warm"] = json.loads(lines[-1]) if lines else {"error": r.stderr[-2000:]}
        print("a second process, the compile cache warm:", json.dumps(out["warm"]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
