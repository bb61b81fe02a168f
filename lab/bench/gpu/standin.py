"""A stand-in with the compute shape of NVIDIA Parakeet TDT 0.6B V2, for
measuring the serving system where NeMo is not installed. It is NOT a
recogniser: its weights are random and its "words" are token ids.

Shape (the FastConformer-TDT configuration Parakeet TDT 0.6B V2 uses):
NeMo's log-mel front end (pre-emphasis, 128 mel features, per-feature
normalisation), 8x depthwise-separable conv subsampling, 24 Conformer layers
of d_model 1024 (macaron feed-forward 4096, 8-head self-attention with
relative positions, a depthwise conv module), about 600 M parameters; a TDT
decoder: a 2-layer LSTM prediction network of 640 and a joint network with
1,025 token and 5 duration outputs (durations 0-4 frames of 80 ms).

Decoding is greedy TDT, as NeMo's greedy_batch: a blank moves the frame on
by its duration without touching the prediction network, a token emits and
advances the prediction network, at most max_symbols tokens per frame.
Two ways to run the same loop (identical results):

  cuda_graph  what NeMo does by default on a GPU (use_cuda_graph_decoder):
              the loop's kernels are captured into CUDA graphs once per
              batch-size bucket and replayed, steps_per_replay decode steps
              a replay, one host sync a replay
  eager       one kernel launch per operation and a host sync per step,
              NeMo with use_cuda_graph_decoder=False (and the stand-in the
              benchmark used before): kept so the difference stays visible

The joint network's blank and duration biases are calibrated at build time
by decoding speech-like audio until a 45-s clip takes the decode steps and
emits the tokens Parakeet does on speech (about 240 steps and 90 tokens):
the decisions still depend on the input, as a trained model's do.

As a Triton engine (deploy/triton/models/asr/1/model.py, engine "module"),
load() builds it from the model's parameters; see lab/bench/gpu/gpubench.
"""
from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

# The contract's rate, from the shipped model's package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "deploy", "triton", "models", "asr", "1"))
from fleetscribe_asr.common import SAMPLE_RATE as SAMPLE_RATE  # re-exported: the studies read it here

HOP = 160  # 10 ms
WIN = 400  # 25 ms
N_FFT = 512
SUBSAMPLING = 8
FRAME_SECONDS = HOP * SUBSAMPLING / SAMPLE_RATE  # 80 ms per encoder frame
DURATIONS = (0, 1, 2, 3, 4)

# What Parakeet TDT 0.6B V2 does with a 45-s clip of speech (the
# calibration targets), per second of audio.
STEPS_PER_SECOND = 240 / 45
TOKENS_PER_SECOND = 90 / 45


class Config:
    def __init__(self, d_model: int = 1024, layers: int = 24, heads: int = 8, ff: int = 4096, conv_kernel: int = 9, mels: int = 128,
                 sub_channels: int = 256, pred_hidden: int = 640, pred_layers: int = 2, joint_hidden: int = 640, vocab: int = 1024) -> None:
        self.d_model, self.layers, self.heads, self.ff = d_model, layers, heads, ff
        self.conv_kernel, self.mels, self.sub_channels = conv_kernel, mels, sub_channels
        self.pred_hidden, self.pred_layers, self.joint_hidden, self.vocab = pred_hidden, pred_layers, joint_hidden, vocab

    @staticmethod
    def tiny() -> Config:
        return Config(d_model=64, layers=2, heads=4, ff=128, sub_channels=16, pred_hidden=32, joint_hidden=32, vocab=100)


def mel_filterbank(n_mels: int, n_fft: int = N_FFT, sr: int = SAMPLE_RATE) -> Tensor:
    """Triangular filters on the mel scale (HTK formula), area-normalised."""
    def hz_to_mel(f: float) -> float:
        return 2595 * math.log10(1 + f / 700)

    def mel_to_hz(m: float) -> float:
        return 700 * (10 ** (m / 2595) - 1)

    mels = torch.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2)
    hz = torch.tensor([mel_to_hz(m.item()) for m in mels])
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    fb = torch.zeros(n_mels, n_fft // 2 + 1)
    for i in range(n_mels):
        lo, mid, hi = hz[i], hz[i + 1], hz[i + 2]
        up = (bins - lo) / (mid - lo)
        down = (hi - bins) / (hi - mid)
        fb[i] = torch.clamp(torch.minimum(up, down), min=0) * 2 / (hi - lo)
    return fb


class Frontend(nn.Module):
    """NeMo's AudioToMelSpectrogramPreprocessor as Parakeet configures it:
    pre-emphasis 0.97, 25 ms Hann windows every 10 ms, power spectrum, 128
    mel filters, log, each feature normalised over the row's valid frames."""

    def __init__(self, mels: int) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(WIN), persistent=False)
        self.register_buffer("fb", mel_filterbank(mels), persistent=False)

    def forward(self, audio: Tensor, lengths: Tensor) -> Tensor:  # [B, N] float32, [B]
        x = torch.cat([audio[:, :1], audio[:, 1:] - 0.97 * audio[:, :-1]], dim=1)
        spec = torch.stft(x, N_FFT, hop_length=HOP, win_length=WIN, window=self.window,
                          center=True, return_complex=True)
        power = spec.real ** 2 + spec.imag ** 2  # [B, F, T]
        mel = torch.log(torch.matmul(self.fb, power) + 2 ** -24)  # [B, mels, T]
        frames = lengths // HOP + 1
        valid = (torch.arange(mel.shape[2], device=mel.device).unsqueeze(0) < frames.unsqueeze(1)).unsqueeze(1)
        n = frames.view(-1, 1, 1).to(mel.dtype)
        mean = (mel * valid).sum(2, keepdim=True) / n
        std = torch.sqrt((((mel - mean) * valid) ** 2).sum(2, keepdim=True) / (n - 1).clamp(min=1)) + 1e-5
        return ((mel - mean) / std) * valid


class Subsampling(nn.Module):
    """8x: a strided conv, then two depthwise-separable strided convs."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        c = cfg.sub_channels
        self.conv = nn.Sequential(
            nn.Conv2d(1, c, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c), nn.Conv2d(c, c, 1), nn.ReLU(),
            nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c), nn.Conv2d(c, c, 1), nn.ReLU(),
        )
        self.out = nn.Linear(c * math.ceil(cfg.mels / 8), cfg.d_model)

    def forward(self, mel: Tensor) -> Tensor:  # [B, mels, T]
        # The first conv's output has B*C*(mels/2)*(T/2) elements; past 2^31
        # (batch 128 of 45 s) convolution kernels fail, so large batches go
        # through in pieces (as NeMo's conv_chunking_factor does).
        b, m, t = mel.shape
        rows = max(1, (2 ** 31 - 1) // (self.conv[0].out_channels * ((m + 1) // 2) * ((t + 1) // 2)))
        x = torch.cat([self.conv(part.unsqueeze(1)) for part in mel.split(rows)])  # [B, C, mels/8, T/8]
        b, c, f, t = x.shape
        return self.out(x.permute(0, 3, 1, 2).reshape(b, t, c * f))


class FeedForward(nn.Module):
    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.up(self.norm(x))))


class ConvModule(nn.Module):
    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Linear(d, 2 * d)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Linear(d, d)

    def forward(self, x: Tensor, pad_mask: Tensor | None) -> Tensor:  # pad_mask [B, T] True where padding
        y = F.glu(self.pw1(self.norm(x)), dim=-1)
        if pad_mask is not None:
            y = y.masked_fill(pad_mask.unsqueeze(-1), 0)
        y = self.dw(y.transpose(1, 2))
        y = F.silu(self.bn(y)).transpose(1, 2)
        return self.pw2(y)


def relative_positions(t: int, d: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Sinusoidal encodings of the relative positions t-1 down to -(t-1)."""
    pos = torch.arange(t - 1, -t, -1, device=device, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(2 * t - 1, d, device=device)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.to(dtype).unsqueeze(0)  # [1, 2t-1, d]


def rel_shift(x: Tensor) -> Tensor:
    """[B, H, T, 2T-1] scores by relative position -> [B, H, T, T] by key
    position (Transformer-XL's shift)."""
    b, h, t, p = x.shape
    x = F.pad(x, (1, 0)).view(b, h, p + 1, t)[:, :, 1:].reshape(b, h, t, p)
    return x[..., :t]


class RelPosAttention(nn.Module):
    """Self-attention with relative positions (Transformer-XL, as
    FastConformer's rel_pos): content scores q+u against keys, position
    scores q+v against projected relative encodings, summed."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.dk = heads, d // heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.pos = nn.Linear(d, d, bias=False)
        self.u = nn.Parameter(torch.zeros(heads, self.dk))
        self.v = nn.Parameter(torch.zeros(heads, self.dk))

    def forward(self, x: Tensor, pos_emb: Tensor, key_mask: Tensor | None) -> Tensor:  # key_mask [B, 1, 1, T] True where attended
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.dk).permute(2, 0, 3, 1, 4)  # [B, H, T, dk]
        p = self.pos(pos_emb).view(1, -1, self.heads, self.dk).transpose(1, 2)  # [1, H, 2T-1, dk]
        bd = rel_shift(torch.matmul(q + self.v.unsqueeze(1), p.transpose(-1, -2))) / math.sqrt(self.dk)
        if key_mask is not None:
            bd = bd.masked_fill(~key_mask, torch.finfo(bd.dtype).min)
        a = F.scaled_dot_product_attention(q + self.u.unsqueeze(1), k, v, attn_mask=bd)
        return self.proj(a.transpose(1, 2).reshape(b, t, d))


class ConformerLayer(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        d = cfg.d_model
        self.ff1, self.ff2 = FeedForward(d, cfg.ff), FeedForward(d, cfg.ff)
        self.att_norm = nn.LayerNorm(d)
        self.att = RelPosAttention(d, cfg.heads)
        self.conv = ConvModule(d, cfg.conv_kernel)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x: Tensor, pos_emb: Tensor, key_mask: Tensor | None, pad_mask: Tensor | None) -> Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.att(self.att_norm(x), pos_emb, key_mask)
        x = x + self.conv(x, pad_mask)
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x)


class Encoder(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.frontend = Frontend(cfg.mels)
        self.sub = Subsampling(cfg)
        self.layers = nn.ModuleList(ConformerLayer(cfg) for _ in range(cfg.layers))

    def forward(self, audio: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """audio [B, N] (rows padded with zeros past lengths); returns
        encoded frames [B, T, d] and valid frames per row [B]."""
        mel = self.frontend(audio.float(), lengths).to(next(self.sub.parameters()).dtype)
        x = self.sub(mel) * math.sqrt(self.d_model)  # xscaling
        t = x.shape[1]
        frames = encoded_frames(lengths, t)
        pad_mask = torch.arange(t, device=x.device).unsqueeze(0) >= frames.unsqueeze(1)
        key_mask = ~pad_mask[:, None, None, :]
        pos_emb = relative_positions(t, self.d_model, x.device, x.dtype)
        for layer in self.layers:
            x = layer(x, pos_emb, key_mask, pad_mask)
        return x, frames


def encoded_frames(lengths: Tensor, limit: int) -> Tensor:
    """Encoder frames of inputs of lengths samples: 10 ms features, 8x."""
    return torch.clamp((lengths // HOP + 1 + SUBSAMPLING - 1) // SUBSAMPLING, min=1, max=limit)


class TDTDecoder(nn.Module):
    """Prediction and joint networks of a TDT model (blank is the last token)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.vocab = cfg.vocab
        self.blank = cfg.vocab
        self.embed = nn.Embedding(cfg.vocab + 1, cfg.pred_hidden, padding_idx=cfg.vocab)  # blank as pad
        self.lstm = nn.LSTM(cfg.pred_hidden, cfg.pred_hidden, num_layers=cfg.pred_layers, batch_first=True)
        self.enc_proj = nn.Linear(cfg.d_model, cfg.joint_hidden)
        self.pred_proj = nn.Linear(cfg.pred_hidden, cfg.joint_hidden)
        self.out = nn.Linear(cfg.joint_hidden, cfg.vocab + 1 + len(DURATIONS))
        self.register_buffer("durations", torch.tensor(DURATIONS), persistent=False)

    def cells(self) -> list[tuple[Tensor, Tensor]]:
        """The LSTM's weights as one (input+hidden) x 4*hidden matrix and one
        bias per layer, for a step of plain kernels (cuDNN's RNN call costs
        more host time per step than the step's arithmetic)."""
        if not hasattr(self, "_cells"):
            self._cells: list[tuple[Tensor, Tensor]] = []
            for k in range(self.lstm.num_layers):
                w = torch.cat([getattr(self.lstm, "weight_ih_l%d" % k), getattr(self.lstm, "weight_hh_l%d" % k)], dim=1).t().contiguous()
                bias = getattr(self.lstm, "bias_ih_l%d" % k) + getattr(self.lstm, "bias_hh_l%d" % k)
                self._cells.append((w, bias))
        return self._cells

    def lstm_step(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One time step of the prediction LSTM; h, c [layers, B, H]."""
        hs, cs = [], []
        for k, (w, bias) in enumerate(self.cells()):
            gates = torch.addmm(bias, torch.cat([x, h[k]], dim=1), w)
            i, f, gg, o = gates.chunk(4, dim=1)
            ck = torch.sigmoid(f) * c[k] + torch.sigmoid(i) * torch.tanh(gg)
            x = torch.sigmoid(o) * torch.tanh(ck)
            hs.append(x)
            cs.append(ck)
        return x, torch.stack(hs), torch.stack(cs)

    def start_state(self) -> tuple[Tensor, Tensor, Tensor]:
        """Prediction network state and projected output after the start
        symbol (blank): h, c [layers, 1, H], g [1, J]."""
        p = next(self.parameters())
        layers, hidden = self.lstm.num_layers, self.lstm.hidden_size
        h = torch.zeros(layers, 1, hidden, device=p.device, dtype=p.dtype)
        x, h, c = self.lstm_step(self.embed(torch.full((1,), self.blank, device=p.device)), h, torch.zeros_like(h))
        return h, c, self.pred_proj(x)

    def project(self, enc: Tensor, frames: Tensor) -> Tensor:
        """The joint's encoder projection of every frame, standardised per
        row over its valid frames: random weights make neighbouring frames
        nearly alike, and standardising restores frame-to-frame variety, so
        decisions vary with the input as a trained model's do."""
        f = self.enc_proj(enc)  # [B, T, J]
        valid = (torch.arange(f.shape[1], device=f.device).unsqueeze(0) < frames.unsqueeze(1)).unsqueeze(-1)
        n = frames.view(-1, 1, 1).to(f.dtype)
        mean = (f * valid).sum(1, keepdim=True) / n
        var = (((f - mean) * valid) ** 2).sum(1, keepdim=True) / n
        return (f - mean) / torch.sqrt(var + 1e-5)


class LoopState:
    """The decode loop's tensors for batches of up to rows rows and frames
    frames. Every step writes them in place, so a CUDA graph captured over
    steps replays on them."""

    def __init__(self, dec: TDTDecoder, rows: int, frames: int, max_tokens: int) -> None:
        p = next(dec.parameters())
        dev, dt = p.device, p.dtype
        layers, hidden = dec.lstm.num_layers, dec.lstm.hidden_size
        self.rows, self.frames_cap, self.max_tokens = rows, frames, max_tokens
        self.f = torch.zeros(rows * frames, dec.enc_proj.out_features, device=dev, dtype=dt)
        self.row_base = torch.arange(rows, device=dev) * frames
        self.frames = torch.zeros(rows, dtype=torch.long, device=dev)
        self.last = torch.zeros_like(self.frames)
        self.t = torch.zeros_like(self.frames)
        self.symbols = torch.zeros_like(self.frames)
        self.count = torch.zeros_like(self.frames)
        self.active = torch.zeros(rows, dtype=torch.bool, device=dev)
        self.any_active = torch.zeros((), dtype=torch.bool, device=dev)
        self.steps = torch.zeros((), dtype=torch.long, device=dev)
        self.h = torch.zeros(layers, rows, hidden, device=dev, dtype=dt)
        self.c = torch.zeros_like(self.h)
        self.g = torch.zeros(rows, dec.pred_proj.out_features, device=dev, dtype=dt)
        self.tokens = torch.zeros(rows, max_tokens, dtype=torch.long, device=dev)
        self.token_frames = torch.zeros_like(self.tokens)

    def load(self, start: tuple[Tensor, Tensor, Tensor], f_all: Tensor, frames: Tensor) -> None:
        """Resets the state for a new batch: f_all [n, T, J], frames [n]."""
        n, t, _ = f_all.shape
        self.f.view(self.rows, self.frames_cap, -1)[:n, :t].copy_(f_all)
        self.frames.zero_()
        self.frames[:n].copy_(frames)
        torch.clamp(self.frames - 1, min=0, out=self.last)
        for x in (self.t, self.symbols, self.count, self.steps):
            x.zero_()
        torch.lt(self.t, self.frames, out=self.active)
        torch.any(self.active, out=self.any_active)
        h, c, g = start
        self.h.copy_(h.expand_as(self.h))
        self.c.copy_(c.expand_as(self.c))
        self.g.copy_(g.expand_as(self.g))


class GreedyTDT:
    """Greedy TDT decoding of a TDTDecoder, batched, in CUDA graphs or eagerly."""

    def __init__(self, dec: TDTDecoder, mode: str = "cuda_graph", max_symbols: int = 10, steps_per_replay: int = 16,
                 max_batch: int = 128, max_seconds: float = 60) -> None:
        if mode not in ("cuda_graph", "eager"):
            raise ValueError("decoder mode %r: want cuda_graph or eager" % mode)
        self.dec, self.mode, self.max_symbols = dec, mode, max_symbols
        self.steps_per_replay, self.max_batch = steps_per_replay, max_batch
        self.frames_cap = math.ceil(max_seconds / FRAME_SECONDS)
        self.states: dict[int, LoopState] = {}
        self.graphs: dict[int, Any] = {}
        self.start = dec.start_state()
        self.graph_captures = 0

    def bucket(self, n: int) -> int:
        """The batch-size bucket of n rows: the next power of two."""
        return 1 << max(0, (n - 1).bit_length())

    def state(self, rows: int, t: int) -> LoopState:
        if t > self.frames_cap:  # a longer input than any before: larger buffers, new graphs
            self.frames_cap = int(math.ceil(t / 250) * 250)
            self.states, self.graphs = {}, {}
        s = self.states.get(rows)
        if s is None:
            s = self.states[rows] = LoopState(self.dec, rows, self.frames_cap, 2 * self.frames_cap)
        return s

    def step(self, s: LoopState) -> None:
        """One decode step of every row: one joint evaluation; a blank moves
        the row's frame on by its duration, a token is recorded and
        advances the row's prediction network."""
        dec, vocab = self.dec, self.dec.vocab
        safe_t = torch.minimum(s.t, s.last)
        f = s.f.index_select(0, s.row_base + safe_t)
        z = dec.out(F.relu(f + s.g))
        tok = z[:, :vocab + 1].argmax(dim=1)
        dur = dec.durations[z[:, vocab + 1:].argmax(dim=1)]
        blank = tok == dec.blank
        dur = torch.where(blank & (dur == 0), torch.ones_like(dur), dur)  # a blank always advances
        symbols = torch.where(dur == 0, s.symbols + 1, torch.zeros_like(dur))
        forced = symbols >= self.max_symbols  # max_symbols tokens on one frame: move on
        dur = torch.where(forced, torch.ones_like(dur), dur)
        emit = s.active & ~blank
        pos = torch.clamp(s.count, max=s.max_tokens - 1).unsqueeze(1)
        s.tokens.scatter_(1, pos, torch.where(emit.unsqueeze(1), tok.unsqueeze(1), s.tokens.gather(1, pos)))
        s.token_frames.scatter_(1, pos, torch.where(emit.unsqueeze(1), safe_t.unsqueeze(1), s.token_frames.gather(1, pos)))
        s.count.add_(emit.long())
        out, h, c = dec.lstm_step(dec.embed(tok), s.h, s.c)
        m = emit.view(1, -1, 1)
        s.h.copy_(torch.where(m, h, s.h))
        s.c.copy_(torch.where(m, c, s.c))
        s.g.copy_(torch.where(emit.unsqueeze(1), dec.pred_proj(out), s.g))
        s.steps.add_(s.any_active.long())
        s.symbols.copy_(torch.where(forced, torch.zeros_like(symbols), symbols))
        s.t.add_(dur * s.active)
        torch.lt(s.t, s.frames, out=s.active)
        torch.any(s.active, out=s.any_active)

    def graph(self, rows: int, s: LoopState) -> Any:
        g = self.graphs.get(rows)
        if g is not None:
            return g
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the capture, as PyTorch asks
            for _ in range(2):
                self.step(s)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(self.steps_per_replay):
                self.step(s)
        self.graphs[rows] = g
        self.graph_captures += 1
        return g

    def warm(self, max_batch: int) -> None:
        """Captures the graph of every batch-size bucket up to max_batch."""
        if self.mode != "cuda_graph":
            return
        rows = 1
        while rows <= self.bucket(max_batch):
            s = self.state(rows, 1)
            s.load(self.start, s.f.new_zeros(0, 1, s.f.shape[1]), s.frames[:0])
            self.graph(rows, s)
            rows *= 2

    @torch.no_grad()
    def __call__(self, f_all: Tensor, frames: Tensor) -> tuple[list[list[int]], list[list[int]], int]:
        """Decodes f_all [B, T, J] (projected encoder frames) with frames [B]
        valid each; returns (tokens, token frames) per row and the steps taken."""
        n, t, _ = f_all.shape
        if n > self.max_batch:
            a = self(f_all[:self.max_batch], frames[:self.max_batch])
            b = self(f_all[self.max_batch:], frames[self.max_batch:])
            return a[0] + b[0], a[1] + b[1], max(a[2], b[2])
        rows = self.bucket(n)
        s = self.state(rows, t)
        s.load(self.start, f_all, frames)
        if self.mode == "cuda_graph":
            g = self.graph(rows, s)
            s.load(self.start, f_all, frames)  # capture ran steps on it
            while bool(s.any_active):  # one host sync per replay
                g.replay()
        else:
            while bool(s.any_active):  # one host sync per step
                self.step(s)
        count = s.count[:n].clamp(max=s.max_tokens).cpu().tolist()
        toks, tfr = s.tokens[:n].cpu(), s.token_frames[:n].cpu()
        return ([toks[i, :count[i]].tolist() for i in range(n)],
                [tfr[i, :count[i]].tolist() for i in range(n)], int(s.steps))


class StandIn(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.encoder = Encoder(cfg)
        self.decoder = TDTDecoder(cfg)
        self.cfg = cfg

    @torch.no_grad()
    def transcribe(self, audio: Tensor, lengths: Tensor, decode: GreedyTDT) -> tuple[list[list[int]], list[list[int]], int]:
        """audio [B, N] on the model's device, lengths [B]; decode a GreedyTDT."""
        enc, frames = self.encoder(audio, lengths)
        return decode(self.decoder.project(enc, frames), frames)


def speech_like(rng: np.random.Generator, n: int) -> npt.NDArray[np.float32]:
    """Words of 0.2-0.7 s of noise between pauses of about 0.05-1 s of near
    silence (lab/kit/synth's SpeechLike)."""
    x = np.zeros(n, dtype=np.float32)
    i = 0
    while i < n:
        word = int((0.2 + 0.5 * rng.random()) * SAMPLE_RATE)
        x[i:i + word] = 0.3 * rng.standard_normal(min(word, n - i))
        i += word
        pause = int((0.05 + 0.3 * rng.exponential()) * SAMPLE_RATE)
        x[i:i + pause] = 0.003 * rng.standard_normal(max(0, min(pause, n - i)))
        i += pause
    return x


def calibrate(model: StandIn, decode: GreedyTDT, seconds: float = 45, clips: int = 4, iterations: int = 10,
              log: Callable[[dict[str, float]], None] | None = None) -> dict[str, float]:
    """Sets the joint's blank and duration biases so that speech-like clips
    take the decode steps and emit the tokens Parakeet does per second of
    speech (STEPS_PER_SECOND, TOKENS_PER_SECOND). First from the joint's
    decisions on sampled frames and prediction states: blank wins about 60%
    of them, durations prefer 2, 3, 1, 4, 0 frames (a mean advance of about
    two frames); then the blank bias is bisected on decoded clips until
    they emit the wanted tokens. Returns the last measurement."""
    dec = model.decoder
    p = next(model.parameters())
    rng = np.random.default_rng(7)
    n = int(seconds * SAMPLE_RATE)
    audio = torch.from_numpy(np.stack([speech_like(rng, n) for _ in range(clips)])).to(p.device)
    lengths = torch.full((clips,), n, device=p.device)
    with torch.no_grad():
        enc, frames = model.encoder(audio, lengths)
        f_all = dec.project(enc, frames)
        # Decisions on frames of these clips against prediction states as
        # decoding meets them: the start state (held through every blank)
        # and states after random tokens.
        samples = 4096
        f = f_all[:, :int(frames.min())].reshape(-1, f_all.shape[-1])
        f = f[torch.randint(0, f.shape[0], (samples,), device=p.device)]
        toks = torch.randint(0, dec.vocab, (samples, 1), device=p.device)
        toks[: samples // 2] = dec.blank
        h0 = torch.zeros(dec.lstm.num_layers, samples, dec.lstm.hidden_size, device=p.device, dtype=p.dtype)
        x, _, _ = dec.lstm_step(dec.embed(toks[:, 0]), h0, torch.zeros_like(h0))
        z = dec.out(F.relu(f + dec.pred_proj(x))).float()
        best = z[:, :dec.vocab].max(dim=1).values
        dec.out.bias[dec.blank] += float(torch.quantile(best - z[:, dec.blank], 0.6))
        spread = float(z[:, dec.vocab + 1:].std())
        for i, b in enumerate((-1.0, 0.5, 2.0, 1.5, 0.0)):
            dec.out.bias[dec.vocab + 1 + i] += b * spread * 2
        # Bisect the blank bias (more blank, fewer tokens) on decoded clips.
        want = TOKENS_PER_SECOND * seconds
        base = float(dec.out.bias[dec.blank])
        lo, hi = -4.0 * spread, 4.0 * spread
        got: dict[str, float] = {}
        for _ in range(iterations):
            mid = (lo + hi) / 2
            dec.out.bias[dec.blank] = base + mid
            toks, _, _ = decode(f_all, frames)
            tokens = sum(len(t) for t in toks) / clips
            got = {"tokens": tokens, "blank_bias": mid}
            if log:
                log(got)
            if abs(tokens - want) < 0.02 * want:
                break
            if tokens > want:
                lo = mid
            else:
                hi = mid
        got["steps"] = per_row_steps(decode, f_all, frames)
        return got


def per_row_steps(decode: GreedyTDT, f_all: Tensor, frames: Tensor) -> float:
    """Mean decode steps of one row decoded alone (a batch takes the most of
    its rows')."""
    return sum(decode(f_all[i:i + 1], frames[i:i + 1])[2] for i in range(f_all.shape[0])) / f_all.shape[0]


def build(cfg: Config, device: torch.device, dtype: torch.dtype, seed: int = 0) -> StandIn:
    torch.manual_seed(seed)
    if hasattr(torch, "get_default_device"):
        with torch.device(device):  # initialise on the GPU: seconds, not a minute on the CPU
            m = StandIn(cfg)
    else:
        m = StandIn(cfg)
    m = m.to(device=device, dtype=dtype).eval().requires_grad_(False)  # inference only: no autograd graph
    m.encoder.frontend.float()  # features in fp32, as NeMo does
    return m


def parameters(m: Any) -> int:
    return sum(p.numel() for p in m.parameters())


class Hypothesis:
    """A result shaped as NeMo's, as the Triton model's contract code reads
    it: text, and word timings in timestamp["word"]."""

    def __init__(self, text: str, words: list[dict[str, Any]]) -> None:
        self.text = text
        self.timestamp = {"word": words}


class Engine:
    """The stand-in behind the Triton model's contract code: NeMo's
    transcribe signature over a list of 16 kHz float32 arrays. With a
    compiled encoder (model.py's CompiledEncoder, as the Parakeet engine
    uses) a batch is padded to its static shape."""

    def __init__(self, model: StandIn, decode: GreedyTDT, log_every: int = 0, compiled: Any = None) -> None:
        self.model, self.decode, self.compiled = model, decode, compiled
        self.device = next(model.parameters()).device
        self.staging = torch.empty(0)
        self.log_every, self.calls, self.spent = log_every, 0, [0.0] * 4

    def describe(self) -> tuple[str, str]:
        """(encoder path, decoder mode), as model.py's engine metric says them."""
        return (self.compiled.path if self.compiled is not None else "eager",
                "cuda_graph" if self.decode.mode == "cuda_graph" else "no_graphs")

    def encode(self, audio: list[npt.NDArray[np.float32]]) -> tuple[Tensor, Tensor]:
        """Encoder frames and valid frames of audio (only the real rows):
        compiled where a static shape holds the batch, else eagerly."""
        return self.compiled.encode(audio, self.encode_eagerly) if self.compiled is not None else self.encode_eagerly(audio)

    def encode_eagerly(self, audio: list[npt.NDArray[np.float32]]) -> tuple[Tensor, Tensor]:
        x = self.batch(audio)
        return self.model.encoder(x, torch.tensor([a.size for a in audio], device=self.device))

    def batch(self, audio: list[npt.NDArray[np.float32]]) -> Tensor:
        """The rows padded into one tensor on the model's device: written
        once into a pinned staging buffer (kept between batches), then
        copied to the GPU without waiting."""
        rows, n = len(audio), max(a.size for a in audio)
        if self.staging.numel() < rows * n:
            self.staging = torch.empty(rows * n, dtype=torch.float32, pin_memory=self.device.type == "cuda")
        x = self.staging[:rows * n].view(rows, n)
        host = x.numpy()
        for i, a in enumerate(audio):
            host[i, :a.size] = a
            host[i, a.size:] = 0
        return x.to(self.device, non_blocking=True) if self.device.type == "cuda" else x.clone()

    def mark(self, i: int, t0: float) -> float:
        """With log_timings, adds the time since t0 to part i (after the
        GPU's work so far) and returns now."""
        if not self.log_every:
            return t0
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        self.spent[i] += now - t0
        return now

    def transcribe(self, audio: list[npt.NDArray[np.float32]], batch_size: int, timestamps: bool, verbose: bool) -> list[Hypothesis]:  # noqa: ARG002 - NeMo's signature
        t = time.perf_counter()
        with torch.no_grad():
            enc, frames = self.encode(audio)  # input and encoder
            f_all = self.model.decoder.project(enc, frames)
        t = self.mark(1, t)
        toks, tframes, _ = self.decode(f_all, frames)
        t = self.mark(2, t)
        out = []
        for row, frs in zip(toks, tframes, strict=False):
            words = [{"word": "t%d" % t, "start": round(f * FRAME_SECONDS, 3), "end": round((f + 1) * FRAME_SECONDS, 3)}
                     for t, f in zip(row, frs, strict=False)] if timestamps else []
            out.append(Hypothesis(" ".join("t%d" % t for t in row), words))
        self.mark(3, t)
        self.calls += 1
        if self.log_every and self.calls % self.log_every == 0:
            print("stand-in timings over %d batches, per batch: input %.1f ms, input and encoder %.1f ms, decode %.1f ms, words %.1f ms" % (
                self.log_every, *(1000 * v / self.log_every for v in self.spent)), flush=True)
            self.spent = [0.0] * 4
        return out


def load(params: dict[str, str], device: str, compiler: Callable[..., Any] | None = None) -> Engine:
    """A calibrated stand-in as a Triton engine. Model parameters:
    decoder (cuda_graph or eager), steps_per_replay (16), size (full or
    tiny), max_batch (the model's max_batch_size), graph_seconds (longest
    input the captured graphs hold before they are captured again: 60);
    compiler is model.py's (a CompiledEncoder for the model parameters
    encoder, length_buckets, batch_buckets and encoder_graphs, as the
    Parakeet engine takes them, in the shared compile cache; it gives None
    where the encoder runs eagerly)."""
    size = params.get("size") or "full"
    cfg = Config.tiny() if size == "tiny" else Config()
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = build(cfg, dev, dtype)
    mode = params.get("decoder") or "cuda_graph"
    if dev.type != "cuda":  # CUDA graphs need a GPU: the same loop, eagerly
        mode = "eager"
    max_batch = int(params.get("max_batch") or 128)
    decode = GreedyTDT(model.decoder, mode=mode, steps_per_replay=int(params.get("steps_per_replay") or 16),
                       max_batch=max_batch, max_seconds=float(params.get("graph_seconds") or 60))
    decode.warm(max_batch)
    calibrate(model, decode)
    compiled = None
    if compiler is not None:
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        enc = model.encoder
        compiled = compiler(enc.forward, "standin|%s|%s|%s" % (size, torch.__version__, name), [enc.sub, *enc.layers])
    engine = Engine(model, decode, int(params.get("log_timings") or 0), compiled)
    if compiled is not None:
        def run(n: int, rows: int) -> None:
            engine.transcribe([np.zeros(n, dtype=np.float32)] * rows, rows, True, False)

        def encode(n: int, rows: int) -> None:
            with torch.no_grad():
                engine.encode([np.zeros(n, dtype=np.float32)] * rows)
        t0 = time.perf_counter()
        compiled.warm(run, encode)
        print("stand-in encoder ready in %.0f s: %s" % (time.perf_counter() - t0, compiled.summary()), flush=True)
    return engine
