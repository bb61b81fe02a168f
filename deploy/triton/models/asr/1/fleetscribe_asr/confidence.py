"""Word confidence for NeMo's transducer models in one batched pass after
decoding.

NeMo's own confidence (confidence_cfg) keeps a confidence and an alignment
entry for every frame the greedy decoder visits, moves them to the host and
walks them per frame and per token in Python (rnnt_decoding's
compute_confidence, then a tokenizer call per token to find words). On an
H100 that took 59% of served throughput with the encoder eager
(docs/vocabulary.md). With blanks left out of the confidence (as here), a
token's confidence is that of the one joint evaluation that emitted it: the
frame it was emitted at, and the prediction network after the tokens before
it. Those are known once decoding ends, so this pass recomputes exactly
them for every token of every row at once: the prediction network over each
row's tokens (teacher-forced, one call), the joint at the tokens' frames
(one call), NeMo's own measure over the labels' log-probabilities, and each
word's lowest token (NeMo's "min" aggregation), words found from a table of
the vocabulary's pieces made once. The decoder runs as it does without
confidence, under its CUDA graphs."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .compiled import Tensor

F32 = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]

# The model parameter word_confidence's methods, as NeMo's confidence_method_cfg.
METHODS: dict[str, dict[str, Any]] = {
    "max_prob": {"name": "max_prob"},
    "entropy": {"name": "entropy", "entropy_type": "tsallis", "alpha": 0.5, "entropy_norm": "exp"},
}


class WordConfidence:
    """Each word's confidence (0-1) for hypotheses of model's greedy
    transducer decoder, by method (a key of METHODS)."""

    def __init__(self, model: Any, method: str) -> None:
        import torch
        from nemo.collections.asr.parts.utils.asr_confidence_utils import ConfidenceMethodMixin

        if method not in METHODS:
            raise ValueError(f"model parameter word_confidence={method!r}: want off, {', '.join(METHODS)}")
        self.torch, self.model = torch, model
        self.blank = int(model.decoding.blank_id)
        # TDT's joint gives its durations' logits after the labels'.
        self.durations = int(getattr(model.joint, "num_extra_outputs", 0) or 0)

        class Measure(ConfidenceMethodMixin):  # type: ignore[misc]
            num_tokens = self.blank + 1

        measure = Measure()
        measure._init_confidence_method(METHODS[method])
        self.measure = measure._get_confidence_tensor
        # Where words start, as NeMo's sentencepiece aggregation finds them:
        # a piece whose text differs from it (a word-initial piece, the bare
        # word marker), and the piece after an unknown one; a bare marker
        # alone before another word is no word.
        dec = model.decoding
        pieces = [dec.decode_ids_to_tokens([i])[0] for i in range(self.blank)]
        self.starts = np.array([p != dec.decode_ids_to_str([i]) for i, p in enumerate(pieces)], dtype=bool)
        self.unknown = np.array([p == "<unk>" for p in pieces], dtype=bool)
        self.marker = np.array([p == "\u2581" for p in pieces], dtype=bool)

    def tokens(self, encoded: Tensor, hyps: list[Any]) -> list[F32]:
        """Each hypothesis's tokens' confidences: encoded is the encoder's
        output (rows x features x frames) the hypotheses were decoded from,
        each hypothesis NeMo's, before its timestamps are turned into
        words (y_sequence the tokens, timestamp their frames)."""
        torch = self.torch
        emitted = [self.emitted(h) for h in hyps]
        counts = [len(ids) for ids, _ in emitted]
        rows, longest = len(hyps), max(counts, default=0)
        if longest == 0:
            return [np.zeros(0, dtype=np.float32) for _ in hyps]
        # Each row's prediction-network inputs (the start symbol, which is
        # the blank, then its tokens but the last) and its tokens' frames.
        before = np.full((rows, longest), self.blank, dtype=np.int64)
        at = np.zeros((rows, longest), dtype=np.int64)
        for i, (ids, frames) in enumerate(emitted):
            before[i, 1:len(ids)] = ids[:-1]
            at[i, :len(ids)] = frames
        device = encoded.device
        before_t = torch.from_numpy(before).to(device, non_blocking=True)
        at_t = torch.from_numpy(at).to(device, non_blocking=True)
        joint, decoder = self.model.joint, self.model.decoder
        f = joint.project_encoder(encoded[:rows].transpose(1, 2))
        f = f[torch.arange(rows, device=device).unsqueeze(1), at_t.clamp(max=f.shape[1] - 1)]
        g, _ = decoder.predict(before_t, decoder.initialize_state(f), add_sos=False, batch_size=rows)
        g = joint.project_prednet(g)
        width = f.shape[-1]
        logits = joint.joint_after_projection(f.reshape(-1, 1, width), g.reshape(-1, 1, width)).reshape(rows, longest, -1)
        if self.durations:
            logits = logits[..., :-self.durations]
        if logits.shape[-1] != self.blank + 1:
            raise ValueError(f"word confidence: the joint gives {logits.shape[-1]} labels, want {self.blank + 1} (a multi-blank model?)")
        conf = self.measure(torch.log_softmax(logits.float(), dim=-1)).cpu().numpy()
        return [conf[i, :n] for i, n in enumerate(counts)]

    def emitted(self, hyp: Any) -> tuple[Ids, Ids]:
        """A hypothesis's tokens and the frames they were emitted at, blanks
        left out (its timestamps as the decoder gives them, or under
        "timestep" once NeMo has made words of them)."""
        stamps = hyp.timestamp["timestep"] if isinstance(hyp.timestamp, dict) else hyp.timestamp
        ids = np.asarray(hyp.y_sequence.cpu() if hasattr(hyp.y_sequence, "cpu") else hyp.y_sequence, dtype=np.int64).reshape(-1)
        frames = np.asarray(stamps.cpu() if hasattr(stamps, "cpu") else stamps, dtype=np.int64).reshape(-1)
        if len(frames) != len(ids):
            raise ValueError(f"word confidence: {len(ids)} tokens but {len(frames)} timestamps")
        keep = ids != self.blank
        return ids[keep], frames[keep]

    def words(self, ids: Ids, conf: F32) -> list[float]:
        """The words' confidences of one hypothesis: the lowest of each
        word's tokens, words as NeMo's sentencepiece aggregation splits
        them (so as many as the transcript's words)."""
        n = len(ids)
        if n == 0:
            return []
        ids = ids.astype(np.int64)
        start = self.starts[ids].copy()
        start[1:] |= self.unknown[ids[:-1]]
        start[0] = True
        first = np.flatnonzero(start)
        lowest = np.minimum.reduceat(conf, first)
        # A bare marker that is a word by itself (the next piece starts a
        # word, or none follows) is no word.
        last = np.append(first[1:], n)
        keep = ~((last - first == 1) & self.marker[ids[first]])
        return [float(c) for c in lowest[keep]]

    def __call__(self, encoded: Tensor, hyps: list[Any]) -> list[list[float]]:
        """Each hypothesis's words' confidences."""
        return [self.words(self.emitted(h)[0], c) for h, c in zip(hyps, self.tokens(encoded, hyps), strict=True)]
