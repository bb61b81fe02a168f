"""Reference points for the GPU benchmark, in one process with no server:
the stand-in model's offline throughput at batch 1 and at the largest batch
that fits (45-second clips), where its time goes (encoder against decode
loop), its FLOPs per clip, and the GPU's measured dense bf16 matrix rate.
Writes JSON to --out."""
import argparse
import json
import time

import torch

import model as stand_in


def timed(fn, reps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--clip-seconds", type=float, default=45)
    ap.add_argument("--batches", default="1,8,32,64,128,256")
    args = ap.parse_args()
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True

    # Dense bf16 matrix rate: 8192^3 products, random data, after warm-up.
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sec = timed(lambda: a @ b, 10)
    tflops = 2 * 8192 ** 3 / sec / 1e12
    del a, b

    m = stand_in.build(stand_in.Config(), dev, torch.bfloat16)
    n = int(args.clip_seconds * 16000)
    g = torch.Generator(device="cpu").manual_seed(0)

    def batch(bs):
        audio = (torch.randn(bs, n, generator=g) * 0.1).to(dev)
        return audio, torch.full((bs,), n, device=dev)

    # FLOPs of one clip, counted by PyTorch's own counter (matmuls, convs,
    # attention) over the encoder and the whole decode loop.
    audio, lengths = batch(1)
    flops = 0.0
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc:
            m.transcribe(audio, lengths)
        flops = float(fc.get_total_flops())
    except Exception as e:  # noqa: BLE001
        print("flop counter failed:", e)

    out = {"clip_seconds": args.clip_seconds, "matmul_tflops": tflops, "flops_per_clip": flops,
           "params": stand_in.parameters(m), "device": torch.cuda.get_device_name(0), "batches": {}}
    best_bs, best_rate = 1, 0.0
    for bs in [int(x) for x in args.batches.split(",")]:
        try:
            audio, lengths = batch(bs)
            m.transcribe(audio, lengths)  # warm-up
            m.encoder(audio, lengths)
            enc_s = timed(lambda: m.encoder(audio, lengths), 3)
            steps = [0]

            def full():
                steps[0] = m.transcribe(audio, lengths)[1]
            total = timed(full, 3 if bs <= 64 else 2)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            print("batch %d does not fit" % bs)
            break
        rate = bs / total
        out["batches"][str(bs)] = {"clips_per_s": rate, "seconds": total, "encoder_s": enc_s,
                                   "decode_s": total - enc_s, "decode_steps": steps[0]}
        print("batch %4d: %7.1f clips/s  (%.0f ms: encoder %.0f ms, decode loop %.0f ms over %d steps)" % (
            bs, rate, 1000 * total, 1000 * enc_s, 1000 * (total - enc_s), steps[0]), flush=True)
        if rate > best_rate:
            best_bs, best_rate = bs, rate
        del audio, lengths
        torch.cuda.empty_cache()
    out["batch1_clips_per_s"] = out["batches"]["1"]["clips_per_s"]
    out["batch128_clips_per_s"] = out["batches"].get("128", {}).get("clips_per_s", 0)
    out["best_batch"], out["best_clips_per_s"] = best_bs, best_rate
    print("matmul %.0f TFLOP/s; %.3f TFLOP per clip; params %.0f M" % (tflops, flops / 1e12, out["params"] / 1e6))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
