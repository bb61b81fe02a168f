"""NeMo's Fast Conformer attention with relative positions
(multi_head_attention.RelPositionMultiHeadAttention) through PyTorch's
FlexAttention where compiled: the diarize model's parameter
conformer_attention=flex, the speech model's encoder_attention=flex.

With NeMo's use_pytorch_sdpa the layer writes the positions' scores
(rows x heads x frames x 2 frames), shifts them into a frames x frames
matrix, scales and masks it, writes that and hands it to SDPA as an
additive mask, which takes PyTorch's memory-efficient kernel (the only one
with an arbitrary mask). On an H100 a 16-row, 45-s Sortformer step spent
about 12 of its 50 GPU ms there: the shifted, masked copy 3.5 ms and the
attention 5.0 ms, at about 36 TFLOP/s. FlexAttention reads the positions'
scores where the shift puts them (row i, column j: j - i + frames - 1) and
NeMo's mask inside one generated kernel, so the shifted matrix is never
written. Same scale (one over the square root of the head size, on both
terms), same masked value (NeMo's -10000), rows with every key masked
zeroed after, as NeMo does.

Only a layer being compiled takes this path: FlexAttention run eagerly
writes every score, so an eager layer (a batch no compiled shape holds,
encoder=eager, a CPU) runs NeMo's forward. So does a layer with a cache
(NeMo's cache-aware streaming) or positions of another length than
2 x frames - 1. The parameters keep their names: a checkpoint loads either
way. Imports torch: only the NeMo engines import it (the Sortformer's with
conformer_attention=flex, the speech model's whenever its model has these
layers, to set or undo the swap)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

MASKED = -10000.0  # NeMo's INF_VAL, what its layers fill masked scores with


def _flex_forward(self: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                  pos_emb: torch.Tensor, cache: torch.Tensor | None = None) -> Any:
    frames = query.shape[1]
    base: Any = type(self).__bases__[0]  # NeMo's class: the swapped one's base
    nemo = base.forward
    if (cache is not None or self.training or not torch.compiler.is_compiling() or key.shape[1] != frames
            or pos_emb.shape[1] != 2 * frames - 1):
        return nemo(self, query, key, value, mask, pos_emb, cache)
    from torch.nn.attention.flex_attention import flex_attention

    device = query.device.type
    autocast = torch.is_autocast_enabled(device)
    dtype = torch.get_autocast_dtype(device) if autocast else query.dtype
    # As NeMo's forward: under autocast the projections take float32 inputs.
    q, k, v = self.forward_qkv(query.float(), key.float(), value.float()) if autocast else self.forward_qkv(query, key, value)
    n_batch = value.size(0)
    p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)  # (1, heads, 2 frames - 1, d_k)
    q = q.transpose(1, 2)  # (rows, frames, heads, d_k)
    q_u = (q + self.pos_bias_u).transpose(1, 2)
    q_v = (q + self.pos_bias_v).transpose(1, 2)
    bd = torch.matmul(q_v, p.transpose(-2, -1))  # (rows, heads, frames, 2 frames - 1), unshifted
    scale = 1.0 / math.sqrt(self.d_k)
    shift = frames - 1

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
        s = score + bd[b, h, qi, ki - qi + shift] * scale
        return s if mask is None else torch.where(mask[b, qi, ki], torch.full_like(s, MASKED), s)

    # (rows, heads, frames, d_k), each its own row-major copy in the
    # attention's dtype, as the generated kernel reads them.
    q_u, k, v = (t.to(dtype).contiguous() for t in (q_u, k, v))
    out = flex_attention(q_u, k, v, score_mod=score_mod, scale=scale)
    if mask is not None:
        out = out.masked_fill(torch.all(mask, dim=-1).unsqueeze(1).unsqueeze(-1), 0.0)
    out = out.transpose(1, 2).reshape(n_batch, -1, self.h * self.d_k)
    return self.linear_out(out)


_CLASSES: dict[type, type] = {}


def as_flex(roots: Iterable[nn.Module], on: bool = True) -> int:
    """Every NeMo RelPositionMultiHeadAttention inside roots (in eval mode)
    made to attend through FlexAttention where compiled (its class swapped
    for a subclass with that forward), or with on False back to NeMo's
    own (engines that share a model, as the lab's encoder study's do, set
    it before each call); how many were."""
    n = 0
    for root in roots:
        for m in list(root.modules()):
            cls = type(m)
            base = cls.__bases__[0] if cls in _CLASSES.values() else cls
            if not _is_nemo_relpos(m, base) or m.training:
                continue
            if on and base not in _CLASSES:
                _CLASSES[base] = type("Flex" + base.__name__, (base,), {"forward": _flex_forward})
            m.__class__ = _CLASSES[base] if on else base
            n += 1
    return n


def _is_nemo_relpos(m: nn.Module, cls: type) -> bool:
    """m is NeMo's multi_head_attention.RelPositionMultiHeadAttention itself
    (cls: its class before any swap; by name and module: the class is
    NeMo's, not imported here; its subclasses, Longformer's, attend
    otherwise) with what this forward uses."""
    parts = ("linear_q", "linear_k", "linear_v", "linear_out", "linear_pos")
    return (cls.__name__ == "RelPositionMultiHeadAttention" and cls.__module__.endswith("multi_head_attention")
            and all(isinstance(getattr(m, a, None), nn.Linear) for a in parts)
            and callable(getattr(m, "forward_qkv", None)) and hasattr(m, "pos_bias_u") and hasattr(m, "h") and hasattr(m, "d_k"))
