"""The conformer layers' linear layers as FP8 matrix multiplies where
compiled (issue 53's lever "FP8 on Hopper"; model parameter
linear_precision=fp8, off: on an H100 it saved 6% of the encoder's GPU
time but moved its output 7% from eager's, docs/benchmarks.md).

On an H200 the encoder's matrix multiplies are 18.7 of its 43.5 GPU ms a
call (16 rows of 45 s), and a pre-quantised FP8 GEMM (torch._scaled_mm)
at these shapes is 1.4-1.6x the bf16 one; quantising the activation as a
step of its own ate the gain. Fp8Linear keeps each weight quantised once
(float8 e4m3, a scale per output channel, taken when the form is set,
after the checkpoint has loaded) and quantises the activation inside the
compiled region, a scale per row (its largest magnitude over 448), where
inductor can fuse the row's maximum and the cast into the kernel that
made the activation (a layer norm, an activation function). Eagerly (a
batch no compiled shape holds, encoder=eager) the layer runs as the
model's own linear layer, in the engine's precision.

The parameters keep their names and shapes and the quantised copies are
buffers outside the state dict, so a checkpoint loads either way. Needs a
GPU that runs FP8 matrix multiplies (compute capability 8.9 or later: L4,
L40S, H100, H200) or a CPU (the tests). Imports torch: only engines that
run a torch encoder import it."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

E4M3_MAX = 448.0
LINEAR_PRECISIONS = ("model", "fp8")


def quantise_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] as float8 e4m3 and a float32 scale per row [M, 1]:
    x ~= q * scale, each row's largest magnitude mapped to 448."""
    xf = x.float()
    scale = xf.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / E4M3_MAX
    return (xf / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


class Fp8Linear(nn.Linear):  # type: ignore[misc]
    """An nn.Linear whose compiled forward is an FP8 matrix multiply: the
    same parameters, and non-persistent buffers weight_fp8 [out, in] and
    weight_scale [1, out] made from them by quantise()."""

    weight_fp8: torch.Tensor
    weight_scale: torch.Tensor

    def quantise(self) -> None:
        """The weight's FP8 copy and per-channel scales, from the weight as
        it is now (call again after loading other weights)."""
        with torch.no_grad():
            q, scale = quantise_rows(self.weight.detach())
        self.register_buffer("weight_fp8", q, persistent=False)
        self.register_buffer("weight_scale", scale.view(1, -1).contiguous(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            return super().forward(x)
        kind = x.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype
        rows = x.reshape(-1, x.shape[-1])
        q, scale = quantise_rows(rows)
        # Row-wise scaled FP8 products come out in bf16 (with a bf16 bias).
        bias = self.bias.to(torch.bfloat16) if self.bias is not None else None
        out = torch._scaled_mm(q, self.weight_fp8.t(), scale_a=scale, scale_b=self.weight_scale, bias=bias, out_dtype=torch.bfloat16)
        return out.to(dtype).reshape(*x.shape[:-1], self.out_features)


def fits(m: nn.Module) -> bool:
    """Whether m is a plain nn.Linear (not a subclass) of the sizes FP8
    matrix multiplies take (each dimension a multiple of 16)."""
    return type(m) is nn.Linear and m.in_features % 16 == 0 and m.out_features % 16 == 0


def as_fp8(roots: Iterable[nn.Module]) -> int:
    """Every plain linear layer inside roots (the conformer layers) that
    fits made an Fp8Linear of its own parameters, its weight quantised;
    how many were."""
    n = 0
    for root in roots:
        for m in list(root.modules()):
            if fits(m):
                m.__class__ = Fp8Linear
                m.quantise()
                n += 1
    return n


def supported(device: str) -> bool:
    """Whether device runs FP8 matrix multiplies: a CPU, or a GPU of
    compute capability 8.9 or later."""
    d = torch.device(device)
    if d.type != "cuda":
        return bool(d.type == "cpu")
    return bool(torch.cuda.get_device_capability(d) >= (8, 9))
