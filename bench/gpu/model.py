"""A stand-in with the compute shape of NVIDIA Parakeet TDT 0.6B, for
measuring the serving system. It is NOT a recogniser: its weights are
random and its "text" is token ids.

Shape: a FastConformer-like encoder (log-mel 128 features, 8x depthwise
separable conv subsampling, 24 layers of d_model 1024 with macaron
feed-forward 4096, 8-head self-attention and a depthwise conv module,
about 600 M parameters) and a greedy TDT decode loop (a 2-layer LSTM
prediction network of 640, a joint network with 8,193 token and 5 duration
outputs) that steps frame by frame with duration skips. That loop of small
kernels, with a host sync per step, is why one request leaves most SMs idle.

The joint network's blank and duration biases are set so the loop takes
the number of steps a real model takes on speech (most steps blank with a
skip of 2-4 frames, about 2.5 tokens per second of audio); the decisions
still depend on the input, as a real model's do.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SAMPLE_RATE = 16000
HOP = 160  # 10 ms
WIN = 400  # 25 ms
N_FFT = 512
DURATIONS = (0, 1, 2, 3, 4)


class Config:
    def __init__(self, d_model=1024, layers=24, heads=8, ff=4096, conv_kernel=9, mels=128,
                 sub_channels=256, pred_hidden=640, pred_layers=2, joint_hidden=640, vocab=8192):
        self.d_model, self.layers, self.heads, self.ff = d_model, layers, heads, ff
        self.conv_kernel, self.mels, self.sub_channels = conv_kernel, mels, sub_channels
        self.pred_hidden, self.pred_layers, self.joint_hidden, self.vocab = pred_hidden, pred_layers, joint_hidden, vocab

    @staticmethod
    def tiny():
        return Config(d_model=64, layers=2, heads=4, ff=128, sub_channels=16, pred_hidden=32, joint_hidden=32, vocab=100)


def mel_filterbank(n_mels, n_fft=N_FFT, sr=SAMPLE_RATE):
    """Triangular filters on the mel scale (HTK formula)."""
    def hz_to_mel(f):
        return 2595 * math.log10(1 + f / 700)

    def mel_to_hz(m):
        return 700 * (10 ** (m / 2595) - 1)

    mels = torch.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2)
    hz = torch.tensor([mel_to_hz(m.item()) for m in mels])
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    fb = torch.zeros(n_mels, n_fft // 2 + 1)
    for i in range(n_mels):
        lo, mid, hi = hz[i], hz[i + 1], hz[i + 2]
        up = (bins - lo) / (mid - lo)
        down = (hi - bins) / (hi - mid)
        fb[i] = torch.clamp(torch.minimum(up, down), min=0)
    return fb


class Frontend(nn.Module):
    def __init__(self, mels):
        super().__init__()
        self.register_buffer("window", torch.hann_window(WIN), persistent=False)
        self.register_buffer("fb", mel_filterbank(mels), persistent=False)

    def forward(self, audio):  # [B, N] float32
        spec = torch.stft(audio, N_FFT, hop_length=HOP, win_length=WIN, window=self.window,
                          center=True, return_complex=True)
        power = spec.real ** 2 + spec.imag ** 2  # [B, F, T]
        mel = torch.matmul(self.fb, power)  # [B, mels, T]
        return torch.log(mel + 1e-6)


class Subsampling(nn.Module):
    """8x: a strided conv, then two depthwise-separable strided convs."""

    def __init__(self, cfg):
        super().__init__()
        c = cfg.sub_channels
        self.conv = nn.Sequential(
            nn.Conv2d(1, c, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c), nn.Conv2d(c, c, 1), nn.ReLU(),
            nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c), nn.Conv2d(c, c, 1), nn.ReLU(),
        )
        self.out = nn.Linear(c * math.ceil(cfg.mels / 8), cfg.d_model)

    def forward(self, mel):  # [B, mels, T]
        x = self.conv(mel.unsqueeze(1))  # [B, C, mels/8, T/8]
        b, c, f, t = x.shape
        return self.out(x.permute(0, 3, 1, 2).reshape(b, t, c * f))


class FeedForward(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        return self.down(F.silu(self.up(self.norm(x))))


class ConvModule(nn.Module):
    def __init__(self, d, k):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Linear(d, 2 * d)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Linear(d, d)

    def forward(self, x, pad_mask):  # pad_mask [B, T] True where padding
        y = F.glu(self.pw1(self.norm(x)), dim=-1)
        if pad_mask is not None:
            y = y.masked_fill(pad_mask.unsqueeze(-1), 0)
        y = self.dw(y.transpose(1, 2))
        y = F.silu(self.bn(y)).transpose(1, 2)
        return self.pw2(y)


def attention(q, k, v, mask):
    """Scaled dot-product attention; mask [B,1,1,T] True where attended."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # older PyTorch (CPU tests)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


class ConformerLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.ff1, self.ff2 = FeedForward(d, cfg.ff), FeedForward(d, cfg.ff)
        self.att_norm = nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.heads = cfg.heads
        self.conv = ConvModule(d, cfg.conv_kernel)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x, attn_mask, pad_mask):
        x = x + 0.5 * self.ff1(x)
        b, t, d = x.shape
        q, k, v = self.qkv(self.att_norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = attention(q, k, v, attn_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.conv(x, pad_mask)
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x)


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.frontend = Frontend(cfg.mels)
        self.sub = Subsampling(cfg)
        self.layers = nn.ModuleList(ConformerLayer(cfg) for _ in range(cfg.layers))

    def forward(self, audio, lengths):
        """audio [B, N] (rows padded with zeros past lengths); returns
        encoded frames [B, T, d] and valid frames per row [B]."""
        mel = self.frontend(audio.float()).to(next(self.sub.parameters()).dtype)
        x = self.sub(mel)
        t = x.shape[1]
        frames = torch.clamp((lengths // HOP + 1 + 7) // 8, min=1, max=t)
        pad_mask = torch.arange(t, device=x.device).unsqueeze(0) >= frames.unsqueeze(1)
        attn_mask = None
        if bool(pad_mask.any()):
            attn_mask = ~pad_mask[:, None, None, :]
        else:
            pad_mask = None
        for layer in self.layers:
            x = layer(x, attn_mask, pad_mask)
        return x, frames


class TDTDecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.vocab = cfg.vocab
        self.blank = cfg.vocab
        self.embed = nn.Embedding(cfg.vocab + 1, cfg.pred_hidden)
        self.lstm = nn.LSTM(cfg.pred_hidden, cfg.pred_hidden, num_layers=cfg.pred_layers, batch_first=True)
        self.enc_proj = nn.Linear(cfg.d_model, cfg.joint_hidden)
        self.pred_proj = nn.Linear(cfg.pred_hidden, cfg.joint_hidden)
        self.out = nn.Linear(cfg.joint_hidden, cfg.vocab + 1 + len(DURATIONS))
        self.register_buffer("durations", torch.tensor(DURATIONS), persistent=False)

    def calibrate(self, enc_dim, samples=4096):
        """Set the blank and duration biases so random-weight decisions look
        like a real model's on speech: blank on ~60% of steps, skipping 2-4
        frames; tokens mostly without a skip."""
        with torch.no_grad():
            p = next(self.parameters())
            f = torch.randn(samples, self.enc_proj.out_features, device=p.device, dtype=p.dtype)  # standardised frames
            # Prediction states as decoding meets them: the start state (held
            # through every blank) and states after random tokens.
            toks = torch.randint(0, self.vocab, (samples, 1), device=p.device)
            toks[: samples // 2] = self.blank
            g = self.pred_proj(self.lstm(self.embed(toks))[0][:, 0])
            z = self.out(F.relu(f + g)).float()
            tok = z[:, :self.vocab]
            # blank wins when its logit beats the best token's ~60% of the time
            best = tok.max(dim=1).values
            self.out.bias[self.blank] += float(torch.quantile(best - z[:, self.blank], 0.6))
            dur = z[:, self.vocab + 1:]
            spread = float(dur.std())
            # Preference order for durations: 2, 3, 1, 4, 0 (mean skip ~2).
            for i, b in zip(range(len(DURATIONS)), (-1.0, 0.5, 2.0, 1.5, 0.0)):
                self.out.bias[self.vocab + 1 + i] += b * spread * 2

    def lstm_step(self, x, state):
        """One time step of the prediction LSTM with its own weights, as a
        few plain kernels: cuDNN's RNN call costs far more host time per
        step than the step's arithmetic, which would make the stand-in's
        loop slower than a real decoder's."""
        if not hasattr(self, "_cells"):
            self._cells = []
            for k in range(self.lstm.num_layers):
                w = torch.cat([getattr(self.lstm, "weight_ih_l%d" % k), getattr(self.lstm, "weight_hh_l%d" % k)], dim=1).t().contiguous()
                bias = getattr(self.lstm, "bias_ih_l%d" % k) + getattr(self.lstm, "bias_hh_l%d" % k)
                self._cells.append((w, bias))
        h, c = state
        hs, cs = [], []
        for k, (w, bias) in enumerate(self._cells):
            gates = torch.addmm(bias, torch.cat([x, h[k]], dim=1), w)
            i, f, gg, o = gates.chunk(4, dim=1)
            ck = torch.sigmoid(f) * c[k] + torch.sigmoid(i) * torch.tanh(gg)
            x = torch.sigmoid(o) * torch.tanh(ck)
            hs.append(x)
            cs.append(ck)
        return x, (torch.stack(hs), torch.stack(cs))

    @torch.no_grad()
    def greedy(self, enc, frames, max_symbols=10):
        """Greedy TDT decoding, batched: one joint evaluation per step for
        every row still inside its frames; returns token lists and the
        number of steps taken."""
        b = enc.shape[0]
        dev = enc.device
        f_all = self.enc_proj(enc)  # [B, T, J]
        # Random weights make neighbouring frames nearly alike; standardising
        # each row over its valid frames restores frame-to-frame variety, so
        # decisions vary with the input as a trained model's do.
        valid = (torch.arange(f_all.shape[1], device=dev).unsqueeze(0) < frames.unsqueeze(1)).unsqueeze(-1)
        n = frames.view(-1, 1, 1).to(f_all.dtype)
        mean = (f_all * valid).sum(1, keepdim=True) / n
        var = (((f_all - mean) * valid) ** 2).sum(1, keepdim=True) / n
        f_all = (f_all - mean) / torch.sqrt(var + 1e-5)
        rows = torch.arange(b, device=dev)
        t = torch.zeros(b, dtype=torch.long, device=dev)
        symbols = torch.zeros(b, dtype=torch.long, device=dev)
        last = torch.full((b, 1), self.blank, dtype=torch.long, device=dev)
        out, state = self.lstm(self.embed(last))
        g = self.pred_proj(out[:, 0])
        emitted = []
        steps = 0
        active = t < frames
        while bool(active.any()):  # a host sync per step, as real greedy decoders do
            steps += 1
            f = f_all[rows, torch.minimum(t, frames - 1)]
            z = self.out(F.relu(f + g))
            tok = z[:, :self.vocab + 1].argmax(dim=1)
            dur = self.durations[z[:, self.vocab + 1:].argmax(dim=1)]
            is_blank = tok == self.blank
            dur = torch.where(is_blank & (dur == 0), torch.ones_like(dur), dur)
            symbols = torch.where(dur == 0, symbols + 1, torch.zeros_like(symbols))
            dur = torch.where(symbols >= max_symbols, torch.ones_like(dur), dur)
            emit = active & ~is_blank
            emitted.append(torch.where(emit, tok, torch.full_like(tok, -1)))
            # The prediction network advances only for rows that emitted.
            new_out, new_state = self.lstm_step(self.embed(tok), state)
            m = emit.view(1, b, 1)
            state = (torch.where(m, new_state[0], state[0]), torch.where(m, new_state[1], state[1]))
            g = torch.where(emit.unsqueeze(1), self.pred_proj(new_out), g)
            t = t + dur * active
            active = t < frames
        if not emitted:
            return [[] for _ in range(b)], 0
        toks = torch.stack(emitted, dim=1).cpu()
        return [[int(x) for x in row if x >= 0] for row in toks], steps


class StandIn(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.decoder = TDTDecoder(cfg)
        self.cfg = cfg

    @torch.no_grad()
    def transcribe(self, audio, lengths):
        enc, frames = self.encoder(audio, lengths)
        return self.decoder.greedy(enc, frames)


def build(cfg, device, dtype, seed=0):
    torch.manual_seed(seed)
    if hasattr(torch, "get_default_device"):
        with torch.device(device):  # initialise on the GPU: seconds, not a minute on the CPU
            m = StandIn(cfg)
    else:
        m = StandIn(cfg)
    m = m.to(device=device, dtype=dtype).eval()
    m.encoder.frontend.float()  # features in fp32, as NeMo does
    m.decoder.lstm.flatten_parameters()  # one contiguous weight block for cuDNN, not a copy per step
    m.decoder.calibrate(cfg.d_model)
    return m


def parameters(m):
    return sum(p.numel() for p in m.parameters())
