"""NeMo's Transformer attention (transformer_modules.MultiHeadAttention,
the Sortformer's 18 Transformer layers) through PyTorch's fused
scaled_dot_product_attention: the diarize model parameter
transformer_attention=sdpa.

NeMo's layer writes every score matrix out (rows x heads x frames x
frames), adds the padding mask, runs a softmax and multiplies again: on an
H100, a served 16-row, 45-s Sortformer step spent 7.8 of its 55 GPU ms in
softmax-shaped kernels and about 4 ms in two unaligned batched matrix
multiplies a layer (793 frames). The fused kernel reads the same query,
key and value and the same additive mask (NeMo's: 0, or -10000 past a
row's length) and never writes the scores. The scale is NeMo's (query
and key each divided by the fourth root of the head size, which is one
division of their product by its square root). The parameters keep
their names, so a checkpoint loads either way; layers that return their
attention scores keep NeMo's forward. Imports torch: only the Sortformer
engine imports it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


def _sdpa_forward(self: Any, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                  attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, Any]]:
    q = self.transpose_for_scores(self.query_net(queries))
    k = self.transpose_for_scores(self.key_net(keys))
    v = self.transpose_for_scores(self.value_net(values))
    mask = attention_mask.to(q.dtype) if attention_mask is not None else None
    context = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
    context = context.permute(0, 2, 1, 3).reshape(*context.shape[:1], context.shape[2], self.hidden_size)
    return self.layer_dropout(self.out_projection(context)), {}


_CLASSES: dict[type, type] = {}


def as_sdpa(roots: Iterable[nn.Module]) -> int:
    """Every NeMo Transformer MultiHeadAttention inside roots (in eval
    mode, not returning its scores) made to attend through SDPA (its class
    swapped for a subclass with that forward); how many were."""
    n = 0
    for root in roots:
        for m in list(root.modules()):
            if not _is_nemo_attention(m) or getattr(m, "return_xatt_scores", False) or m.training:
                continue
            cls = type(m)
            if cls not in _CLASSES:
                _CLASSES[cls] = type("Sdpa" + cls.__name__, (cls,), {"forward": _sdpa_forward})
            m.__class__ = _CLASSES[cls]
            n += 1
    return n


def _is_nemo_attention(m: nn.Module) -> bool:
    """NeMo's transformer_modules.MultiHeadAttention (by name and module:
    the class is NeMo's, not imported here) with the four projections and
    transpose_for_scores this forward uses."""
    projections = ("query_net", "key_net", "value_net", "out_projection")
    return (type(m).__name__ == "MultiHeadAttention" and type(m).__module__.endswith("transformer_modules")
            and all(isinstance(getattr(m, a, None), nn.Linear) for a in projections)
            and callable(getattr(m, "transpose_for_scores", None)) and hasattr(m, "hidden_size"))
