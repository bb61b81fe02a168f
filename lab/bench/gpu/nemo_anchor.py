"""Real NeMo as the calibration anchor of the stand-in (standin.py).

Builds a model of NVIDIA Parakeet TDT 0.6B V2's shape from NeMo's own
classes and its FastConformer-TDT configuration (EncDecRNNTBPEModel: a
24-layer FastConformer of d_model 1024 with relative-position attention,
8x depthwise-separable subsampling, a 2-layer LSTM prediction network of
640, a TDT joint with durations 0-4 over a 1,024-token SentencePiece
vocabulary), with random weights: nothing is downloaded, and it produces
no words. Its joint's blank and duration biases are calibrated as the
stand-in's are, so a 45-s clip of speech-like audio takes about the decode
steps and emits about the tokens Parakeet does on speech.

Then it times NeMo's own transcribe() on 45-s clips at each batch size, with
greedy_batch decoding and CUDA graphs (NeMo's default) and without them,
beside the model's forward pass and decoding called directly (what the
Triton model does), and writes the figures as JSON. --save writes the model
as a .nemo file, for serving through deploy/triton/models/asr/1/model.py.

    python lab/bench/gpu/nemo_anchor.py --out anchor.json [--save model.nemo]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import standin  # noqa: E402 - the shared targets and speech-like audio
from gputime import mean_time, sync  # noqa: E402


def train_tokenizer(folder: str, vocab: int) -> str:
    """A SentencePiece BPE model of vocab pieces, trained on made-up words."""
    import sentencepiece as spm

    rng = random.Random(0)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(4000)]
    text = os.path.join(folder, "text.txt")
    with open(text, "w") as f:
        for _ in range(20000):
            f.write(" ".join(rng.choice(words) for _ in range(12)) + "\n")
    spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(folder, "tokenizer"), vocab_size=vocab,
                                   model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(folder, "tokenizer.model"))
    with open(os.path.join(folder, "vocab.txt"), "w") as f:  # NeMo registers it beside the model
        for i in range(sp.get_piece_size()):
            f.write(sp.id_to_piece(i) + "\n")
    return folder


def config(tokenizer_dir: str, size: str) -> Any:
    """EncDecRNNTBPEModel configuration of Parakeet TDT 0.6B V2's shape
    ("tiny": the same kinds of module, small, for a CPU check)."""
    from omegaconf import OmegaConf

    full = size == "full"
    d_model, layers, heads = (1024, 24, 8) if full else (64, 2, 4)
    pred, joint = (640, 640) if full else (32, 32)
    durations = [0, 1, 2, 3, 4]
    return OmegaConf.create({
        "sample_rate": standin.SAMPLE_RATE,
        "model_defaults": {"enc_hidden": d_model, "pred_hidden": pred, "joint_hidden": joint,
                           "tdt_durations": durations, "num_tdt_durations": len(durations)},
        "tokenizer": {"dir": tokenizer_dir, "type": "bpe"},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": standin.SAMPLE_RATE, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": 128, "n_fft": 512, "log": True, "frame_splicing": 1, "dither": 0.0,
            "pad_to": 0, "pad_value": 0.0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 128, "feat_out": -1, "n_layers": layers, "d_model": d_model,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 256 if full else 16,
            "causal_downsampling": False, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
            "n_heads": heads, "att_context_size": [-1, -1], "att_context_style": "regular", "xscaling": True,
            "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
            "conv_context_size": None, "dropout": 0.1, "dropout_pre_encoder": 0.1, "dropout_emb": 0.0,
            "dropout_att": 0.1,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
            "random_state_sampling": False, "blank_as_pad": True,
            "prednet": {"pred_hidden": pred, "pred_rnn_layers": 2, "t_max": None, "dropout": 0.2},
        },
        "joint": {
            "_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None, "preserve_memory": False,
            "fuse_loss_wer": False, "fused_batch_size": 4,
            "jointnet": {"joint_hidden": joint, "activation": "relu", "dropout": 0.2},
            "num_extra_outputs": len(durations),
        },
        "decoding": {"strategy": "greedy_batch", "model_type": "tdt", "durations": durations,
                     "greedy": {"max_symbols": 10, "loop_labels": True, "use_cuda_graph_decoder": True}},
        "loss": {"loss_name": "tdt", "tdt_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0, "durations": durations,
                                                    "sigma": 0.02, "omega": 0.1}},
        "optim": None, "train_ds": None, "validation_ds": None, "test_ds": None,
    })


def build(device: str, size: str = "full", seed: int = 0, vocab: int = 1024) -> Any:
    from nemo.collections.asr.models import EncDecRNNTBPEModel

    torch.manual_seed(seed)
    folder = train_tokenizer(tempfile.mkdtemp(prefix="nemo-tokenizer-"), vocab if size == "full" else 128)
    model = EncDecRNNTBPEModel(cfg=config(folder, size))
    return model.to(device).eval()


def set_cuda_graphs(model: Any, on: bool) -> None:
    from omegaconf import open_dict

    cfg = model.cfg.decoding
    with open_dict(cfg):
        cfg.greedy.use_cuda_graph_decoder = on
        cfg.compute_timestamps = False
    model.change_decoding_strategy(cfg, verbose=False)


def graphs_mode(model: Any) -> str:
    """Which of NeMo's CUDA-graph modes its decoder runs in."""
    computer = getattr(model.decoding.decoding, "decoding_computer", None)
    mode = getattr(computer, "cuda_graphs_mode", None)
    return str(mode) if mode is not None else "none"


class StepCounter:
    """Counts joint evaluations (decode steps) of NeMo's eager label loop."""

    def __init__(self, joint: Any) -> None:
        self.joint, self.calls = joint, 0
        self.inner = joint.joint_after_projection

    def __enter__(self) -> StepCounter:
        def counted(*a: Any, **k: Any) -> Any:
            self.calls += 1
            return self.inner(*a, **k)
        self.joint.joint_after_projection = counted
        return self

    def __exit__(self, *exc: object) -> None:
        del self.joint.joint_after_projection


def encode(model: Any, audio: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    with torch.inference_mode():
        enc, enc_len = model.forward(input_signal=audio, input_signal_length=lengths)
    return enc, enc_len


def decode_direct(model: Any, enc: Tensor, enc_len: Tensor) -> list[Any]:
    with torch.inference_mode():
        return model.decoding.rnnt_decoder_predictions_tensor(enc, enc_len, return_hypotheses=True)


def hyp_tokens(h: Any) -> int:
    return len(h.y_sequence) if hasattr(h, "y_sequence") else 0


def calibrate(model: Any, seconds: float = 45, clips: int = 4, iterations: int = 10,
              log: Callable[[dict[str, float]], None] | None = None) -> dict[str, float]:
    """The stand-in's calibration on NeMo's joint: blank wins about 60% of
    sampled decisions, durations prefer 2, 3, 1, 4, 0, then the blank bias
    is bisected until decoded clips emit the wanted tokens. Decode steps
    are counted in NeMo's eager loop (one per joint evaluation)."""
    set_cuda_graphs(model, False)
    dev = next(model.parameters()).device
    rng = np.random.default_rng(7)
    n = int(seconds * standin.SAMPLE_RATE)
    audio = torch.from_numpy(np.stack([standin.speech_like(rng, n) for _ in range(clips)])).to(dev)
    lengths = torch.full((clips,), n, device=dev)
    enc, enc_len = encode(model, audio, lengths)
    joint, dec = model.joint, model.decoder
    out = joint.joint_net[-1]  # the Linear of relu -> dropout -> linear
    vocab = joint.num_classes_with_blank - 1 - joint.num_extra_outputs  # blank is index vocab
    with torch.inference_mode():
        samples = 4096
        frames = enc.transpose(1, 2)[:, :int(enc_len.min())].reshape(-1, enc.shape[1])
        f = joint.project_encoder(frames[torch.randint(0, frames.shape[0], (samples,), device=dev)])
        toks = torch.randint(0, vocab, (samples, 1), device=dev)
        toks[: samples // 2] = vocab
        g, _, *_ = dec.predict(toks, None, add_sos=False, batch_size=samples)
        g = joint.project_prednet(g)[:, 0]
        z = joint.joint_after_projection(f.unsqueeze(1), g.unsqueeze(1)).float()[:, 0, 0]
    best = z[:, :vocab].max(dim=1).values
    bias = out.bias.detach()
    with torch.no_grad():
        bias[vocab] += float(torch.quantile(best - z[:, vocab], 0.6))
        spread = float(z[:, vocab + 1:].std())
        for i, b in enumerate((-1.0, 0.5, 2.0, 1.5, 0.0)):
            bias[vocab + 1 + i] += b * spread * 2
    want = standin.TOKENS_PER_SECOND * seconds
    base = float(bias[vocab])
    lo, hi = -4.0 * spread, 4.0 * spread
    got: dict[str, float] = {}
    for _ in range(iterations):
        mid = (lo + hi) / 2
        with torch.no_grad():
            bias[vocab] = base + mid
        tokens = sum(hyp_tokens(h) for h in decode_direct(model, enc, enc_len)) / clips
        got = {"tokens": tokens, "blank_bias": mid}
        if log:
            log(got)
        if abs(tokens - want) < 0.02 * want:
            break
        lo, hi = (mid, hi) if tokens > want else (lo, mid)
    steps = 0
    for i in range(clips):
        with StepCounter(joint) as c:
            decode_direct(model, enc[i:i + 1, :, :int(enc_len[i])], enc_len[i:i + 1])
        steps += c.calls
    got["steps"] = steps / clips
    got["frames"] = float(enc_len.float().mean())
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--save", default="", help="also write the calibrated model to this .nemo file")
    ap.add_argument("--size", default="full", choices=["full", "tiny"])
    ap.add_argument("--clip-seconds", type=float, default=45)
    ap.add_argument("--batches", default="1,8,32,64,128")
    ap.add_argument("--eager-batches", default="8,128")
    ap.add_argument("--amp", default="bf16", choices=["bf16", "none"])
    ap.add_argument("--served-batches", default="",
                    help="also time forward and decoding as the shipped model.py configures them (word timestamps on) at these batches")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.time()
    model = build(dev, args.size)
    params = sum(p.numel() for p in model.parameters())
    print("built %s NeMo model: %.0f M parameters in %.0f s" % (type(model).__name__, params / 1e6, time.time() - t0), flush=True)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if args.amp == "bf16" and dev == "cuda" else torch.autocast("cpu", enabled=False)
    with amp:
        cal = calibrate(model, log=lambda g: print("  calibration", g, flush=True))
    print("calibrated: %.0f decode steps, %.0f tokens per %.0f-s clip" % (cal["steps"], cal["tokens"], 45), flush=True)
    if args.save:
        model.save_to(args.save)
        print("saved", args.save, flush=True)
    import nemo

    out: dict[str, Any] = {"nemo_version": nemo.__version__, "torch": torch.__version__, "params": params, "calibration": cal,
           "clip_seconds": args.clip_seconds, "amp": args.amp, "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
           "transcribe": {}, "direct": {}, "eager": {}}
    n = int(args.clip_seconds * standin.SAMPLE_RATE)
    rng = np.random.default_rng(0)
    clip = standin.speech_like(rng, n)
    for mode, batches in (("cuda_graph", args.batches), ("eager", args.eager_batches)):
        set_cuda_graphs(model, mode == "cuda_graph")
        for bs in [int(b) for b in batches.split(",") if b]:
            audio = [clip.copy() for _ in range(bs)]
            try:
                with amp:
                    model.transcribe(audio, batch_size=bs, verbose=False, timestamps=False)  # warm-up, graph capture
                    sec = mean_time(lambda: model.transcribe(audio, batch_size=bs, verbose=False, timestamps=False), 3 if bs <= 32 else 2)  # noqa: B023 (called in this iteration)
                    row: dict[str, Any] = {"clips_per_s": bs / sec, "seconds": sec, "graphs_mode": graphs_mode(model)}
                    if mode == "cuda_graph":
                        x = torch.from_numpy(np.stack(audio)).to(dev)
                        lengths = torch.full((bs,), n, device=dev)
                        enc_s = mean_time(lambda: encode(model, x, lengths), 2)  # noqa: B023 (called in this iteration)
                        enc, enc_len = encode(model, x, lengths)
                        dec_s = mean_time(lambda: decode_direct(model, enc, enc_len), 2)  # noqa: B023 (called in this iteration)
                        out["direct"][str(bs)] = {"clips_per_s": bs / (enc_s + dec_s), "encoder_s": enc_s, "decode_s": dec_s}
                        del x, enc, enc_len
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                print("batch %d does not fit" % bs, flush=True)
                break
            out["transcribe" if mode == "cuda_graph" else "eager"][str(bs)] = row
            d = out["direct"].get(str(bs), {})
            print("%-10s batch %4d: transcribe %7.1f clips/s (%s)%s" % (
                mode, bs, row["clips_per_s"], row["graphs_mode"],
                "; direct %.1f clips/s (encoder %.0f ms, decode %.0f ms)" % (d["clips_per_s"], 1000 * d["encoder_s"], 1000 * d["decode_s"])
                if d and mode == "cuda_graph" else ""), flush=True)
            if dev == "cuda":
                torch.cuda.empty_cache()
    if args.served_batches:
        out["served_decoding"] = served(model, amp, clip, n, dev, [int(b) for b in args.served_batches.split(",") if b])
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)


def served(model: Any, amp: Any, clip: npt.NDArray[np.float32], n: int, dev: str, batches: list[int]) -> dict[str, Any]:
    """Forward and decoding as model.py's NemoEngine runs them: decoding
    configured once with compute_timestamps (word times), CUDA graphs asked
    for, then the timestamps worked out of the hypotheses. Timed with the
    timestamps flag off and on, to see what word times cost."""
    from nemo.collections.asr.parts.utils.timestamp_utils import process_timestamp_outputs
    from omegaconf import open_dict

    rows: dict[str, Any] = {}
    for ts in (False, True):
        cfg = model.cfg.decoding
        with open_dict(cfg):
            cfg.greedy.use_cuda_graph_decoder = True
            cfg.compute_timestamps = ts
        model.change_decoding_strategy(cfg, verbose=False)
        for bs in batches:
            x = torch.from_numpy(np.stack([clip] * bs)).to(dev)
            lengths = torch.full((bs,), n, device=dev)

            def once() -> list[Any]:
                with torch.inference_mode(), amp:
                    enc, enc_len = model.forward(input_signal=x, input_signal_length=lengths)  # noqa: B023 (called in this iteration)
                    hyps = model.decoding.rnnt_decoder_predictions_tensor(enc, enc_len, return_hypotheses=True)
                if ts:  # noqa: B023 (called in this iteration)
                    hyps = process_timestamp_outputs(hyps, model.encoder.subsampling_factor, model.cfg.preprocessor.window_stride)
                return hyps

            once()
            sec = mean_time(once, 3)
            key = "%s/%d" % ("timestamps" if ts else "text", bs)
            rows[key] = {"clips_per_s": bs / sec, "seconds": sec, "graphs_mode": graphs_mode(model)}
            print("served decoding, %-10s batch %4d: %7.1f clips/s (%.0f ms a batch; %s)" % (
                "timestamps" if ts else "text only", bs, bs / sec, 1000 * sec, graphs_mode(model)), flush=True)
            x = None  # the GPU memory back
    # As a server sees them: after a warm-up at the largest batch, batches
    # of changing sizes one after another (the graphs were captured for
    # the warm-up's size).
    mixed = [max(batches), 8, 6, 9, 7, 8, 6, 9, 7]
    xs = {bs: torch.from_numpy(np.stack([clip] * bs)).to(dev) for bs in set(mixed)}
    times = []
    for i, bs in enumerate(mixed):
        lengths = torch.full((bs,), n, device=dev)
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode(), amp:
            enc, enc_len = model.forward(input_signal=xs[bs], input_signal_length=lengths)
            model.decoding.rnnt_decoder_predictions_tensor(enc, enc_len, return_hypotheses=True)
        sync()
        if i > 0:
            times.append({"batch": bs, "ms": 1000 * (time.perf_counter() - t0)})
    print("served decoding, changing batch sizes after a warm-up at %d: %s" % (
        max(batches), ", ".join("%d: %.0f ms" % (t["batch"], t["ms"]) for t in times)), flush=True)
    rows["changing_sizes"] = times
    return rows


if __name__ == "__main__":
    main()
