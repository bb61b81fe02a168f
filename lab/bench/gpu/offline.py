"""Reference points for the GPU benchmark, in one process with no server:
the stand-in's offline throughput on 45-second clips at each batch size with
CUDA-graph decoding (and eager decoding at some), where its time goes
(encoder against decode loop), its FLOPs per clip, and the GPU's measured
dense bf16 matrix rate. Writes JSON to --out."""
from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import standin
import torch
from gputime import mean_time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--clip-seconds", type=float, default=45)
    ap.add_argument("--batches", default="1,8,32,64,128,256")
    ap.add_argument("--eager-batches", default="1,8,32,128")
    args = ap.parse_args()
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True

    # Dense bf16 matrix rate: 8192^3 products, random data, after warm-up.
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sec = mean_time(lambda: a @ b, 10)
    tflops = 2 * 8192 ** 3 / sec / 1e12
    a = b = None  # the GPU memory back

    t0 = time.time()
    m = standin.build(standin.Config(), dev, torch.bfloat16)
    graph = standin.GreedyTDT(m.decoder, mode="cuda_graph", max_batch=256)
    eager = standin.GreedyTDT(m.decoder, mode="eager", max_batch=256)
    cal = standin.calibrate(m, graph)
    print("built and calibrated in %.1f s: %.0f decode steps, %.0f tokens per 45-s clip" % (
        time.time() - t0, cal["steps"], cal["tokens"]), flush=True)
    n = int(args.clip_seconds * standin.SAMPLE_RATE)
    clip = torch.from_numpy(standin.speech_like(np.random.default_rng(0), n))

    def batch(bs: int) -> tuple[torch.Tensor, torch.Tensor]:
        return clip.to(dev).unsqueeze(0).repeat(bs, 1), torch.full((bs,), n, device=dev)

    # FLOPs of one clip, counted by PyTorch's own counter (matmuls, convs,
    # attention) over the encoder and the whole decode loop (eagerly: a
    # graph's replay is not seen by the counter).
    audio, lengths = batch(1)
    flops = 0.0
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc:
            m.transcribe(audio, lengths, eager)
        flops = float(fc.get_total_flops())
    except Exception as e:  # noqa: BLE001
        print("flop counter failed:", e)

    out: dict[str, Any] = {"clip_seconds": args.clip_seconds, "matmul_tflops": tflops, "flops_per_clip": flops,
           "params": standin.parameters(m), "device": torch.cuda.get_device_name(0), "calibration": cal,
           "steps_per_replay": graph.steps_per_replay, "batches": {}, "eager": {}}
    best_bs, best_rate = 1, 0.0
    eager_batches = {int(x) for x in args.eager_batches.split(",") if x}
    for bs in [int(x) for x in args.batches.split(",")]:
        try:
            audio, lengths = batch(bs)
            steps = [0]

            def full(decode: standin.GreedyTDT) -> None:
                steps[0] = m.transcribe(audio, lengths, decode)[2]  # noqa: B023 (called in this iteration)
            full(graph)  # warm-up, graph capture
            enc_s = mean_time(lambda: m.encoder(audio, lengths), 3)  # noqa: B023 (called in this iteration)
            total = mean_time(lambda: full(graph), 3 if bs <= 64 else 2)
            row = {"clips_per_s": bs / total, "seconds": total, "encoder_s": enc_s, "decode_s": total - enc_s,
                   "decode_steps": steps[0]}
            out["batches"][str(bs)] = row
            line = "batch %4d: %7.1f clips/s  (%.0f ms: encoder %.0f ms, decode loop %.0f ms over %d steps)" % (
                bs, row["clips_per_s"], 1000 * total, 1000 * enc_s, 1000 * (total - enc_s), steps[0])
            if bs in eager_batches:
                full(eager)
                eager_s = mean_time(lambda: full(eager), 2)
                out["eager"][str(bs)] = {"clips_per_s": bs / eager_s, "seconds": eager_s, "decode_s": eager_s - enc_s}
                line += "; eager %.1f clips/s (decode loop %.0f ms)" % (bs / eager_s, 1000 * (eager_s - enc_s))
            print(line, flush=True)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            print("batch %d does not fit" % bs)
            break
        if row["clips_per_s"] > best_rate:
            best_bs, best_rate = bs, row["clips_per_s"]
        audio = lengths = None  # the GPU memory back
        torch.cuda.empty_cache()
    out["batch1_clips_per_s"] = out["batches"]["1"]["clips_per_s"]
    out["batch128_clips_per_s"] = out["batches"].get("128", {}).get("clips_per_s", 0)
    out["best_batch"], out["best_clips_per_s"] = best_bs, best_rate
    print("matmul %.0f TFLOP/s; %.3f TFLOP per clip; params %.0f M; FLOP bound %.0f clips/s" % (
        tflops, flops / 1e12, out["params"] / 1e6, tflops * 1e12 / flops if flops else 0))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
