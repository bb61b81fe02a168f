"""The conformer's convolutions in other forms for the compiler, the
same weights and numbers (issue 53's lever "the convolutions"; model
parameters pointwise_convs and subsampling_convs). On an H100 the
pointwise form served 1.07-1.08x, and is the speech model's default (the
diarize model's stays off, not yet served); taps ran the subsampling 2.3x
slower and stay off (docs/benchmarks.md).

Pointwise (as_matmul): a conformer layer's convolution module holds two
Conv1d layers of kernel 1 (NeMo's pointwise_conv1 and pointwise_conv2):
matrix multiplies over the channels, run as cuDNN convolutions. On an
H200 cuDNN ran them as NHWC implicit GEMMs and converted every output
back to NCHW (48 conversions a call of the speech encoder, 1.4 of its
43.5 GPU ms, docs/benchmarks.md). PointwiseMatmul puts the same weights
behind F.linear on the channels-last view the module had a step before
(NeMo transposes (B, T, C) to (B, C, T) just to convolve).

Subsampling (by_taps): NeMo's 8x depthwise-striding subsampling runs a
convolution of one input channel into 256 at half the feature rate (on
an H200 a generic cuDNN kernel, 1.6 ms for 16 rows of 45 s), then
depthwise and 1x1 convolutions, masking the padded frames before every
layer. Compiled, by_taps writes each convolution as what it is: a 3x3
kernel of one channel (or one a channel) is nine strided slices times a
weight each, which inductor can fuse with the masks and activations around
it; a 1x1 convolution is a matrix multiply. Eagerly (a batch no compiled
shape holds, encoder=eager) the module runs as NeMo wrote it.

The parameters keep their names and shapes, so a checkpoint loads either
way. Imports torch: only engines that run a torch encoder import it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


class PointwiseMatmul(nn.Module):  # type: ignore[misc]
    """A kernel-1 Conv1d's weight ([out, in, 1]) and bias as a matrix
    multiply: x [B, in, T] -> [B, out, T], as the convolution gives."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        self.weight = conv.weight
        self.bias = conv.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x.transpose(1, 2), self.weight.squeeze(-1), self.bias).transpose(1, 2)


def is_pointwise(m: nn.Module) -> bool:
    """Whether m is a plain Conv1d that only mixes channels (kernel 1, no
    stride, padding, dilation or groups); subclasses (NeMo's causal
    convolutions) are not."""
    return (type(m) is nn.Conv1d and m.kernel_size == (1,) and m.stride == (1,) and m.padding in ((0,), "valid")
            and m.dilation == (1,) and m.groups == 1 and m.padding_mode == "zeros")


def as_matmul(roots: Iterable[nn.Module]) -> int:
    """Every pointwise Conv1d inside roots (the conformer layers) replaced
    by a PointwiseMatmul of its own parameters; how many were."""
    n = 0
    for root in roots:
        for parent in list(root.modules()):
            for name, child in list(parent.named_children()):
                if is_pointwise(child):
                    setattr(parent, name, PointwiseMatmul(child))
                    n += 1
    return n


# ---- the subsampling ---------------------------------------------------------


def _plain_conv2d(m: nn.Module) -> bool:
    return (type(m) is nn.Conv2d and m.dilation == (1, 1) and m.padding_mode == "zeros" and isinstance(m.padding, tuple)
            and m.bias is not None)


def is_taps(m: nn.Module) -> bool:
    """A Conv2d by_taps writes as slices: one weight plane per output
    channel (one input channel, or depthwise)."""
    return _plain_conv2d(m) and m.groups == m.in_channels and (m.in_channels == 1 or m.out_channels == m.in_channels)


def is_1x1(m: nn.Module) -> bool:
    return _plain_conv2d(m) and m.kernel_size == (1, 1) and m.stride == (1, 1) and m.padding == (0, 0) and m.groups == 1


def taps(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """conv(x) as a sum over its kernel's taps of strided slices of x
    (padded) times that tap's weight of each channel, in fp32."""
    (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
    h, w = x.shape[2], x.shape[3]
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    xp = nn.functional.pad(x.float(), (pw, pw, ph, ph))
    weight = conv.weight.float()
    out = conv.bias.float().view(1, -1, 1, 1)
    for i in range(kh):
        for j in range(kw):
            piece = xp[:, :, i: i + sh * (ho - 1) + 1: sh, j: j + sw * (wo - 1) + 1: sw]
            out = out + piece * weight[:, 0, i, j].view(1, -1, 1, 1)
    return out


def one_by_one(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """A 1x1 Conv2d as a matrix multiply over the channels."""
    y = nn.functional.linear(x.permute(0, 2, 3, 1), conv.weight[:, :, 0, 0], conv.bias)
    return y.permute(0, 3, 1, 2)


def _autocast_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a convolution's output has here: autocast's where it is
    on (as the convolution by_taps replaces would give), else x's."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


def taps_forward(seq: nn.Sequential, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NeMo's MaskedConvSequential.forward (x [B, T, F], lengths) with
    its convolutions by taps and 1x1 matrix multiplies: the same masks
    before every layer and at the end, the same lengths."""
    x = x.unsqueeze(1)
    current = lengths.clone().float()

    def mask(t: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return (torch.arange(t.shape[2], device=t.device).unsqueeze(0) < n.long().unsqueeze(1)).to(t.dtype)[:, None, :, None]

    m = mask(x, current)
    for layer in seq:
        x = x * m.to(x.dtype)
        if is_taps(layer):
            x = taps(layer, x).to(_autocast_dtype(x) if x.dtype == torch.float32 else x.dtype)
        elif is_1x1(layer):
            x = one_by_one(layer, x)
        else:
            x = layer(x)
        if hasattr(layer, "stride") and layer.stride != (1, 1):
            pad = layer.padding
            current = (current + pad[0] + pad[1] - layer.kernel_size[0]) // layer.stride[0] + 1
            m = mask(x, current)
    return x * m.to(x.dtype), current.long()


_TAPPED: dict[type, type] = {}


def _forward(self: Any, x: torch.Tensor, lengths: torch.Tensor) -> Any:
    if torch.compiler.is_compiling():
        return taps_forward(self, x, lengths)
    return self.eager_forward(x, lengths)


def by_taps(pre_encode: nn.Module) -> int:
    """NeMo's subsampling (pre_encode, a ConvSubsampling whose conv is a
    MaskedConvSequential of plain convolutions and activations) set to
    run by taps when compiled; how many convolutions that covers (0:
    another subsampling, left as it is)."""
    seq = getattr(pre_encode, "conv", None)
    if seq is None or type(seq).__name__ not in ("MaskedConvSequential", "TapsMaskedConvSequential"):
        return 0
    convs = [m for m in seq if isinstance(m, nn.Conv2d)]
    if not convs or not all(is_taps(m) or is_1x1(m) for m in convs) or any(isinstance(m, nn.Conv1d) for m in seq):
        return 0
    cls = type(seq)
    if cls not in _TAPPED.values():
        sub = _TAPPED.get(cls)
        if sub is None:
            sub = _TAPPED[cls] = type("Taps" + cls.__name__, (cls,), {"forward": _forward, "eager_forward": cls.forward})
        seq.__class__ = sub
    return len(convs)
