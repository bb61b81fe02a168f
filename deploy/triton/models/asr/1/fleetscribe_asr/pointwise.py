"""The conformer's pointwise convolutions run as matrix multiplies.

A conformer layer's convolution module holds two Conv1d layers of kernel
1 (NeMo's pointwise_conv1 and pointwise_conv2): matrix multiplies over
the channels, but run as cuDNN convolutions. On an H200 cuDNN ran them as
NHWC implicit GEMMs and converted every output back to NCHW (48
conversions a call of the speech encoder, 1.4 of its 43.5 GPU ms,
docs/benchmarks.md). As_matmul puts the same weights behind F.linear on
the channels-last view the module had a step before (NeMo transposes
(B, T, C) to (B, C, T) just to convolve), so the compiler sees a matrix
multiply and two views. The numbers are the same product's; the
parameters keep their names and shapes, so a checkpoint loads either way.

Imports torch: only engines that run a torch encoder import it."""

from __future__ import annotations

from collections.abc import Iterable

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

