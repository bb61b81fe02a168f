"""Where a streaming Sortformer step's time goes, batched across recordings.

Preparation for serving NVIDIA's streaming Sortformer (4 speakers, v2) on the
partitions: builds NeMo's own SortformerEncLabelModel in the shape of its
4spk-v2 streaming configuration (a 17-layer Fast Conformer of 512 and an
18-layer Transformer of 192, 128 mel features, 8x subsampling) with random
weights, in asynchronous streaming mode (each row of a batch is another
recording, at its own speaker-cache and FIFO fill), and for each operating
point (chunk, FIFO, speaker cache, update period) and batch size walks
recordings chunk by chunk through NeMo's own step, timing its parts:

  pre_encode   the chunk's subsampling convolutions
  concat       speaker cache + FIFO + chunk, each row at its own lengths
  encode       the Fast Conformer and the Transformer over that sequence
  update       the cache and FIFO update (NeMo's, a Python loop per row)

eager in bf16 autocast, then (--compile) with the encoder and transformer
compiled over a sequence padded to its fixed maximum (cache + FIFO + chunk
with its context), which makes every step one shape. It reports what the
steps serve (audio-s/s: rows x chunk seconds / step time, once every row's
cache is full) and the state a recording carries between steps, and writes
JSON.

    python lab/bench/gpu/sortformer_study.py --out sortformer.json [--compile]
    python lab/bench/gpu/sortformer_study.py --tiny --device cpu   # a check of the walk
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

# The served engine's fast concatenation and update, from the shipped package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "deploy", "triton", "models", "asr", "1"))
from fleetscribe_asr.sortformer import encode, fast_concat, fast_update

FRAME_S = 0.08  # one encoder frame: 10-ms features, 8x subsampling

# (chunk, fifo, speaker cache, update period) in encoder frames.
POINTS = {
    "low-latency": (124, 124, 188, 124),
    "issue-27s": (340, 40, 188, 300),
    "long-chunk": (752, 188, 188, 376),
}


def config(point: tuple[int, int, int, int], tiny: bool) -> Any:
    """The model's configuration: the 4spk-v2 streaming shape (tiny: two
    layers of each, for a check on a CPU)."""
    from omegaconf import OmegaConf

    chunk, fifo, cache, period = point
    fc, tf = 512, 192
    return OmegaConf.create({
        "sample_rate": 16000, "max_num_of_spks": 4, "streaming_mode": True, "async_streaming": True,
        "pil_weight": 0.5, "ats_weight": 0.5,
        "model_defaults": {"fc_d_model": fc, "tf_d_model": tf},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01, "sample_rate": 16000,
            "window": "hann", "features": 128, "n_fft": 512, "frame_splicing": 1, "dither": 0.0,
        },
        "sortformer_modules": {
            "_target_": "nemo.collections.asr.modules.sortformer_modules.SortformerModules",
            "num_spks": 4, "dropout_rate": 0.0, "fc_d_model": fc, "tf_d_model": tf,
            "spkcache_len": cache, "fifo_len": fifo, "chunk_len": chunk, "spkcache_update_period": period,
            "chunk_left_context": 1, "chunk_right_context": 1,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 128, "feat_out": -1, "n_layers": 2 if tiny else 17, "d_model": fc,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 256,
            "causal_downsampling": False, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
            "n_heads": 8, "att_context_size": [-1, -1], "att_context_style": "regular", "xscaling": True,
            "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
            "dropout": 0.0, "dropout_pre_encoder": 0.0, "dropout_emb": 0.0, "dropout_att": 0.0,
        },
        "transformer_encoder": {
            "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
            "num_layers": 2 if tiny else 18, "hidden_size": tf, "inner_size": 768, "num_attention_heads": 8,
            "attn_score_dropout": 0.0, "attn_layer_dropout": 0.0, "ffn_dropout": 0.0, "hidden_act": "relu",
            "pre_ln": False, "pre_ln_final_layer_norm": True,
        },
        "loss": {"_target_": "nemo.collections.asr.losses.bce_loss.BCELoss", "weight": None, "reduction": "mean"},
    })


def build(point: tuple[int, int, int, int], tiny: bool, device: str) -> Any:
    from nemo.collections.asr.models import SortformerEncLabelModel

    model = SortformerEncLabelModel(cfg=config(point, tiny)).to(device).eval()
    return model


def speechlike(rows: int, seconds: float, seed: int) -> Tensor:
    """Rows of noise shaped like speech: bursts of a second or two with
    pauses, a different loudness each (the model's weights are random, so
    only the shapes and lengths matter)."""
    g = torch.Generator().manual_seed(seed)
    n = int(seconds * 16000)
    x = torch.randn(rows, n, generator=g) * 0.05
    env = (torch.rand(rows, n // 16000 + 1, generator=g) > 0.3).float().repeat_interleave(16000, dim=1)[:, :n]
    gain = 0.2 + torch.rand(rows, 1, generator=g)
    return x * env * gain


class Timer:
    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self.parts: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        if self.cuda:
            torch.cuda.synchronize()
        self.parts[name] = self.parts.get(name, 0.0) + time.perf_counter() - t
        return out


def pad_to(x: Tensor, n: int) -> Tensor:
    """x (rows, frames, dim) padded with zeros to n frames."""
    return torch.nn.functional.pad(x, (0, 0, 0, n - x.shape[1]))


def walk(model: Any, rows: int, seconds: float, device: str, warm_steps: int, compiled: Callable[..., Any] | None = None,
         pre: Callable[..., Any] | None = None, fast: bool = False) -> tuple[dict[str, float], int, float, float, Any, float | None]:
    """Walks rows recordings of seconds through the streaming steps (the
    encoder compiled where compiled is given, the chunk's pre-encode where
    pre is, and fast's concatenation and update instead of NeMo's); returns
    the steady steps' times by part, the steps timed and the chunk seconds."""
    sm = model.sortformer_modules
    audio = speechlike(rows, seconds, seed=rows).to(device)
    lengths = torch.full((rows,), audio.shape[1], dtype=torch.long, device=device)
    # Each row's loudness on its own (NeMo's batch scaling by the batch's
    # loudest clip is for offline mode; streaming rows stay as they are).
    audio = audio / (audio.abs().amax(dim=1, keepdim=True) + 1e-3)
    with torch.inference_mode():
        feats, feat_len = model.preprocessor(input_signal=audio, length=lengths)
    state = sm.init_streaming_state(batch_size=rows, async_streaming=True, device=device)
    full = sm.spkcache_len + sm.fifo_len + (sm.chunk_len + sm.chunk_left_context + sm.chunk_right_context)
    timer, steps, total = Timer(device), 0, 0.0
    pad_diff: float | None = None
    offset = torch.zeros((rows,), dtype=torch.long, device=device)
    loader = sm.streaming_feat_loader(feat_seq=feats, feat_seq_length=feat_len, feat_seq_offset=offset)
    autocast = torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=torch.bfloat16)
    for i, (_, chunk, chunk_len, lo, ro) in enumerate(loader):
        if chunk.shape[1] < (sm.chunk_len + 2) * sm.subsampling_factor // 2:
            break  # the recording's short last chunk: another shape, not the steady state
        steady = i >= warm_steps
        t = Timer(device) if steady else timer
        start = time.perf_counter()
        with torch.inference_mode(), autocast:
            emb, emb_len = t("pre_encode", model.encoder.pre_encode if pre is None else pre, x=chunk, lengths=chunk_len)
            emb_len = emb_len.to(torch.int64)
            if fast:
                seq, seq_len = t("concat", fast_concat, state, emb.float(), emb_len, full)
            else:
                seq, seq_len = t("concat", sm.concat_and_pad,
                                 [state.spkcache, state.fifo, emb], [state.spkcache_lengths, state.fifo_lengths, emb_len])
            if compiled is not None:
                seq = pad_to(seq, full)
                preds = t("encode", compiled, seq, seq_len)
            else:
                preds = t("encode", encode, model, seq, seq_len)
                if steady and pad_diff is None:
                    # The compiled mode's one shape: the sequence padded to
                    # its maximum gives the same predictions where it is valid.
                    padded = encode(model, pad_to(seq, full), seq_len)[:, : preds.shape[1]]
                    valid = torch.arange(preds.shape[1], device=device)[None, :, None] < seq_len[:, None, None]
                    pad_diff = float(((padded.float() - preds.float()).abs() * valid).max())
            preds = sm.apply_mask_to_preds(preds.float(), seq_len)
            update = functools.partial(fast_update, sm) if fast else sm.streaming_update_async
            new_state, _ = t("update", update,
                             streaming_state=state, chunk=emb.float(), chunk_lengths=emb_len, preds=preds,
                             lc=round(lo / sm.subsampling_factor), rc=math.ceil(ro / sm.subsampling_factor))
        state = new_state
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if steady:
            for k, v in t.parts.items():
                timer.parts["steady_" + k] = timer.parts.get("steady_" + k, 0.0) + v
            total += time.perf_counter() - start
            steps += 1
    return timer.parts, steps, total, sm.chunk_len * FRAME_S, state, pad_diff


def check_update(sm: Any, device: str, steps: int = 30, rows: int = 6, seed: int = 1) -> float:
    """fast_concat and fast_update against NeMo's on the same inputs, rows of
    different fills (some recordings ending: shorter and empty chunks).
    Returns the largest difference in any state tensor or prediction."""
    g = torch.Generator().manual_seed(seed)
    lc, rc, c = sm.chunk_left_context, sm.chunk_right_context, sm.chunk_len
    state = sm.init_streaming_state(batch_size=rows, async_streaming=True, device=device)
    worst = 0.0
    for step in range(steps):
        chunk = torch.randn(rows, lc + c + rc, sm.fc_d_model, generator=g).to(device)
        n = torch.full((rows,), lc + c + rc, dtype=torch.long)
        n[0] = int(torch.randint(0, lc + c + rc, (1,), generator=g))  # a recording's last, short chunk
        if step % 5 == 4:
            n[1] = 0  # a row with nothing this step
        n = n.to(device)
        total = sm.spkcache_len + sm.fifo_len + lc + c + rc
        seq, seq_len = sm.concat_and_pad([state.spkcache, state.fifo, chunk], [state.spkcache_lengths, state.fifo_lengths, n])
        fseq, fseq_len = fast_concat(state, chunk, n, total)
        worst = max(worst, float((fseq[:, : seq.shape[1]] - seq).abs().max()), float((fseq_len - seq_len).abs().max()))
        preds = torch.sigmoid(torch.randn(rows, total, sm.n_spk, generator=g)).to(device)
        mask = torch.arange(total, device=device)[None, :, None] < seq_len[:, None, None]
        preds = preds * mask
        ref_in = copy_state(state)
        fast, fast_preds = fast_update(sm, copy_state(state), chunk, n, preds, lc, rc)
        ref, ref_preds = sm.streaming_update_async(streaming_state=ref_in, chunk=chunk, chunk_lengths=n, preds=preds, lc=lc, rc=rc)
        worst = max(worst, float((fast_preds - ref_preds).abs().max()))
        for name in ("spkcache", "spkcache_lengths", "spkcache_preds", "fifo", "fifo_lengths", "mean_sil_emb", "n_sil_frames"):
            a, b = getattr(fast, name), getattr(ref, name)
            worst = max(worst, float((a.float() - b.float()).abs().max()))
        state = ref
    return worst


def copy_state(state: Any) -> Any:
    from nemo.collections.asr.modules.sortformer_modules import StreamingSortformerState

    out = StreamingSortformerState()
    for name in ("spkcache", "spkcache_lengths", "spkcache_preds", "fifo", "fifo_lengths", "fifo_preds", "mean_sil_emb", "n_sil_frames", "spk_perm"):
        v = getattr(state, name)
        setattr(out, name, None if v is None else v.clone())
    return out


def state_bytes(state: Any) -> int:
    total = 0
    for name in ("spkcache", "spkcache_lengths", "spkcache_preds", "fifo", "fifo_lengths", "mean_sil_emb", "n_sil_frames"):
        t = getattr(state, name)
        if t is not None:
            total += t[0].numel() * t.element_size()
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--compile", action="store_true", help="also with the encoder and transformer compiled (static length)")
    ap.add_argument("--points", default=",".join(POINTS))
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--seconds", type=float, default=240.0, help="each recording's length")
    ap.add_argument("--compile-batches", default="16,64")
    ap.add_argument("--compile-points", default="issue-27s", help="points also run compiled (a compile per batch size)")
    ap.add_argument("--check", action="store_true", help="first check the fast concatenation and update against NeMo's")
    ap.add_argument("--save", default="", help="only build the full-size model (random weights) of --points' first point and save it as this .nemo")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.save:
        model = build(POINTS[args.points.split(",")[0]], args.tiny, "cpu")
        model.save_to(args.save)
        print(json.dumps({"saved": args.save, "params": sum(p.numel() for p in model.parameters())}), flush=True)
        return
    results: list[dict[str, Any]] = []
    for name in args.points.split(","):
        point = POINTS[name]
        model = build(point, args.tiny, args.device)
        sm = model.sortformer_modules
        # Steps before every row's cache and FIFO are full are not timed.
        warm = math.ceil((sm.spkcache_len + sm.fifo_len) / sm.chunk_len) + 1
        modes: list[tuple[str, dict[str, Any], list[int]]] = [("eager", {}, [int(b) for b in args.batches.split(",")])]
        if args.compile and name in args.compile_points.split(","):
            cb = [int(b) for b in args.compile_batches.split(",")]
            fn = torch.compile(functools.partial(encode, model), dynamic=False)
            modes.append(("compiled", {"compiled": fn}, cb))
            modes.append(("compiled+fast", {"compiled": fn, "fast": True}, cb))
        if args.check:
            with torch.inference_mode():
                diff = check_update(sm, args.device)
            print(json.dumps({"point": name, "fast_vs_nemo_update_max_abs": diff}), flush=True)
            results.append({"point": name, "fast_vs_nemo_update_max_abs": diff})
        for mode, kw, batches in modes:
            for rows in batches:
                t0 = time.perf_counter()
                parts, steps, total, chunk_s, state, pad_diff = walk(model, rows, args.seconds, args.device, warm, **kw)
                if steps == 0:
                    print(f"{name} {mode} b{rows}: no steady step in {args.seconds} s", file=sys.stderr)
                    continue
                r = {
                    "point": name, "chunk_frames": point[0], "fifo_frames": point[1], "spkcache_frames": point[2],
                    "update_period": point[3], "mode": mode, "rows": rows, "steps": steps,
                    "step_ms": 1000 * total / steps, "audio_s_per_s": rows * chunk_s * steps / total,
                    "parts_ms": {k.removeprefix("steady_"): 1000 * v / steps for k, v in parts.items() if k.startswith("steady_")},
                    "state_bytes_per_recording": state_bytes(state), "padded_vs_unpadded_max_abs": pad_diff,
                    "wall_s": time.perf_counter() - t0,
                }
                results.append(r)
                print(json.dumps(r), flush=True)
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    out = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
           "torch": torch.__version__, "tiny": args.tiny, "results": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
