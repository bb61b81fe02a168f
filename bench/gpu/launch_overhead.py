"""What limits the stand-in's decode loop on this machine: the cost of one
eager kernel launch, of one decode step at batch 1 and 32, and of the same
tiny kernels replayed from a CUDA graph (launch cost removed)."""
import json
import sys
import time

import torch

import model as stand_in


def per_call(fn, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def main():
    dev = "cuda"
    x = torch.randn(640, device=dev)
    out = {"eager_add_us": 1e6 * per_call(lambda: x.add_(1.0), 2000)}
    # 30 tiny kernels, eagerly and from a graph.
    def thirty():
        for _ in range(30):
            x.mul_(1.0001)
    out["eager_30_kernels_us"] = 1e6 * per_call(thirty, 200)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        thirty()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        thirty()
    out["graph_30_kernels_us"] = 1e6 * per_call(g.replay, 200)
    flag = torch.zeros(1, device=dev, dtype=torch.bool)
    out["sync_us"] = 1e6 * per_call(lambda: bool(flag.any()), 2000)
    m = stand_in.build(stand_in.Config(), dev, torch.bfloat16)
    for bs in (1, 32):
        n = 45 * 16000
        audio = torch.randn(bs, n, device=dev) * 0.1
        lengths = torch.full((bs,), n, device=dev)
        enc, frames = m.encoder(audio, lengths)
        m.decoder.greedy(enc, frames)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        _, steps = m.decoder.greedy(enc, frames)
        torch.cuda.synchronize()
        out["decode_step_ms_batch%d" % bs] = 1000 * (time.perf_counter() - t0) / steps
    print(json.dumps(out, indent=2))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
