"""What a request's vocabulary costs the host before the GPU starts.

The speech model reads each request's vocabulary (a JSON list of phrases)
and the parakeet engine checks every phrase against its tokenizer
(check_vocabulary: a phrase it cannot spell is refused before any GPU
time). A partition runs that for each row of a batch in turn, before the
batch's encoder call, so with phrase boosting on it is part of what
boosting costs served throughput. This measures it on the shipped code:
the Triton model's Vocabularies (deploy/triton/models/asr/1/model.py)
with the parakeet engine's own check, a SentencePiece tokenizer of 1,024
pieces trained as nemo_anchor.py trains the benchmark model's, and
gpubench's synthetic vocabulary (phrases of one to three made-up words).

Side by side: a vocabulary seen for the first time (parsed and checked,
what every request paid before vocabularies were kept) and one seen
before (found by its digest), per request and for a batch of 16 rows.

    PYTHONPATH=NEMO_SITE python lab/bench/gpu/vocabulary_host.py [--phrases 1000]

Needs NeMo (its tokenizer) and sentencepiece; no GPU. Ends with a RESULT line.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import types
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from gputime import mean_time  # noqa: E402 - the lab's timing, beside this file


def load_model_module() -> types.ModuleType:
    """The Triton model's module, loaded by its path as the deploy tests do
    (outside Triton its backend utilities are absent; Vocabularies needs none)."""
    path = os.path.join(ROOT, "deploy", "triton", "models", "asr", "1", "model.py")
    spec = importlib.util.spec_from_file_location("fleetscribe_triton_model", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def synth_vocabulary(n: int, seed: int) -> list[str]:
    """n phrases of one to three lowercase words of 4-10 letters, as
    gpubench's -vocabulary sends (its own seed; the lengths matter here)."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 10)))

    return [" ".join(word() for _ in range(rng.randint(1, 3))) for _ in range(n)]


def per_call_ms(f: Callable[[], object], repeat: int) -> float:
    """Milliseconds a call of f takes after one untimed call (gputime's
    mean, the one way the lab times)."""
    f()
    return mean_time(f, repeat) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phrases", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=16, help="rows of a batch, each with a vocabulary")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()

    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer
    from nemo_anchor import train_tokenizer

    model = load_model_module()
    from fleetscribe_asr.parakeet import NemoEngine

    folder = train_tokenizer(tempfile.mkdtemp(prefix="vocabulary-host-"), 1024)
    tokenizer = SentencePieceTokenizer(os.path.join(folder, "tokenizer.model"))
    # The parakeet engine's own check, on an engine of this tokenizer alone.
    engine = types.SimpleNamespace(boosting=True, direct=True, model=types.SimpleNamespace(tokenizer=tokenizer))

    def check(phrases: tuple[str, ...]) -> None:
        NemoEngine.check_vocabulary(engine, phrases)  # type: ignore[arg-type]

    raw = json.dumps(synth_vocabulary(args.phrases, 7)).encode()
    first = model.Vocabularies(check)

    def unseen() -> None:
        first.accepted.clear()
        first.accept(raw)

    seen = model.Vocabularies(check)
    seen.accept(raw)
    t_first = per_call_ms(unseen, args.repeat)
    t_seen = per_call_ms(lambda: seen.accept(raw), args.repeat * 100)
    print(f"vocabulary of {args.phrases} phrases ({len(raw)} bytes), {os.cpu_count()} CPUs")
    print(f"| | a request, ms | a batch of {args.rows} rows, ms |")
    print("|---|---:|---:|")
    print(f"| first seen: parsed and every phrase checked | {t_first:.3f} | {t_first * args.rows:.1f} |")
    print(f"| seen before: found by its digest | {t_seen:.4f} | {t_seen * args.rows:.2f} |")
    print(f"RESULT bench=vocabulary_host phrases={args.phrases} rows={args.rows} first_ms={t_first:.3f} "
          f"seen_ms={t_seen:.4f} batch_first_ms={t_first * args.rows:.1f} batch_seen_ms={t_seen * args.rows:.2f} "
          f"ratio={t_first / t_seen:.0f}")


if __name__ == "__main__":
    main()
