"""make bench-vocabulary: what a custom vocabulary and word confidence do
on the CPU engines, side by side in one run, through model.py's engines as
the CPU repositories serve them (deploy/triton/cpu-whisper: Whisper tiny.en
through faster-whisper; deploy/triton/cpu: pocketsphinx).

Sentences are made reproducibly: each of 66 templates of a consult holds
one or two key terms (drug names, clinical terms, clinicians' surnames:
KEY_TERMS), spoken by ffmpeg's flite voices in turn (awb, kal, rms, slt);
22 control sentences hold none. The vocabulary is every key term (as a
stored vocabulary would carry them), given to Whisper as the worker gives
it (model.py's vocabulary input: faster-whisper's hotwords).

Measures (text lower-cased, punctuation dropped, hyphens as spaces):

  term recall     key terms whose words appear in order in the sentence's
                  transcript, without and with the vocabulary
  recovered       of the terms missed without, those found with
  wer_other       word errors on the other words: an alignment of the
                  reference and the transcript, substitutions and deletions
                  of reference words that are not a key term's, and
                  insertions next to none, over the non-term words
  false inserts   key terms in the transcripts of the control sentences
  confidence      per engine, on every sentence without the vocabulary:
                  each transcript word is right (aligned to the same
                  reference word) or wrong (a substitution or an
                  insertion); the error rate of words below the threshold
                  (0.5) against above, and the area under the ROC curve of
                  confidence for telling wrong words from right ones

Last line:

RESULT engine=whisper sentences=N term_recall_off=X term_recall_on=X recovered=X wer_other_off=X wer_other_on=X false_inserts=N confidence_auc_whisper=X low_vs_high_error_whisper=X confidence_auc_sphinx=X low_vs_high_error_sphinx=X
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "deploy", "triton", "tests"))
import backend_stub  # noqa: E402, F401 - the stand-in triton_python_backend_utils, and model.py's folder on the path
from fleetscribe_asr.sphinx import SphinxModel  # noqa: E402
from fleetscribe_asr.whisper import WhisperModel  # noqa: E402

DRUGS = ["metoprolol", "atorvastatin", "lisinopril", "amlodipine", "levothyroxine", "metformin", "omeprazole", "losartan",
         "gabapentin", "hydrochlorothiazide", "sertraline", "furosemide", "warfarin", "clopidogrel", "pantoprazole",
         "rosuvastatin", "escitalopram", "tamsulosin", "apixaban", "spironolactone", "carvedilol", "prednisone"]
TERMS = ["echocardiogram", "tachycardia", "dyspnea", "hyperlipidemia", "cholecystectomy", "atrial fibrillation",
         "myocardial infarction", "bradycardia", "pulmonary embolism", "diverticulitis", "colonoscopy", "nephrolithiasis"]
SURNAMES = ["Okafor", "Nguyen", "Kowalczyk", "Abernathy", "Ramaswamy", "Oyelaran", "Fitzgerald", "Castellanos",
            "Thibodeaux", "Szymanski", "Achterberg"]
KEY_TERMS = DRUGS + TERMS + SURNAMES

TEMPLATES = [
    "the patient was started on {d} twenty milligrams last week",
    "please continue the {d} and call us if the swelling returns",
    "we will stop the {d} and begin {d2} tomorrow morning",
    "her {t} was confirmed on the follow up visit",
    "doctor {s} reviewed the {t} results with the family",
    "the {t} showed no change since the last admission",
    "he reports {t} when climbing stairs and takes {d} daily",
    "refer the patient to doctor {s} for a second opinion",
    "doctor {s} will see her after the {t} next month",
    "increase the {d} dose and repeat the labs in two weeks",
    "the {d} was held because of low blood pressure",
    "doctor {s} asked about side effects of the {d}",
]
CONTROL = [
    "the patient was admitted to the hospital on monday morning",
    "please schedule a follow up appointment in two weeks",
    "she has no known allergies to any medication",
    "the doctor will call you back this afternoon",
    "we will review the test results at the next visit",
    "the heart rate is normal and the lungs are clear",
    "he should drink more water and rest at home",
    "the blood pressure was a little high today",
    "call the office if the pain gets worse",
    "her sister will bring her to the next appointment",
    "take one tablet every morning with breakfast",
]
VOICES = ["awb", "kal", "rms", "slt"]
THRESHOLD = 0.5


def sentences():
    """(text, key terms, voice) of the term sentences, then the controls:
    every drug, term and surname used, each template in turn."""
    out = []
    n = 66
    for i in range(n):
        tpl = TEMPLATES[i % len(TEMPLATES)]
        d, d2 = DRUGS[i % len(DRUGS)], DRUGS[(i * 7 + 3) % len(DRUGS)]
        t, s = TERMS[i % len(TERMS)], SURNAMES[i % len(SURNAMES)]
        text = tpl.format(d=d, d2=d2, t=t, s=s)
        terms = [term for slot, term in (("{d}", d), ("{d2}", d2), ("{t}", t), ("{s}", s)) if slot in tpl]
        out.append((text, terms, VOICES[i % len(VOICES)]))
    for i in range(22):
        out.append((CONTROL[i % len(CONTROL)], [], VOICES[(i + 1) % len(VOICES)]))
    return out


def speak(text, voice):
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"flite=text='{text}':voice={voice}",
                        "-ar", "16000", "-ac", "1", "-f", "f32le", f.name], check=True)
        x = np.fromfile(f.name, np.float32)
    lead = np.zeros(8000, np.float32)
    x = np.concatenate([lead, x, lead])
    return x / max(float(np.abs(x).max()), 1e-6) * 0.5


def tokens(text):
    return "".join(c if c.isalnum() or c == "'" else " " for c in text.lower().replace("-", " ")).split()


def has_term(hyp, term):
    t, h = tokens(term), hyp
    return any(h[i:i + len(t)] == t for i in range(len(h) - len(t) + 1))


def align(ref, hyp):
    """Levenshtein alignment: a list of (op, ref index or None, hyp index or None)."""
    n, m = len(ref), len(hyp)
    d = np.zeros((n + 1, m + 1), np.int32)
    d[:, 0], d[0, :] = np.arange(n + 1), np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]))
    ops, i, j = [], n, m
    while i or j:
        if i and j and d[i, j] == d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            ops.append(("ok" if ref[i - 1] == hyp[j - 1] else "sub", i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and d[i, j] == d[i - 1, j] + 1:
            ops.append(("del", i - 1, None))
            i -= 1
        else:
            ops.append(("ins", None, j - 1))
            j -= 1
    return ops[::-1]


def term_mask(ref, terms):
    mask = [False] * len(ref)
    for term in terms:
        t = tokens(term)
        for i in range(len(ref) - len(t) + 1):
            if ref[i:i + len(t)] == t:
                for k in range(i, i + len(t)):
                    mask[k] = True
    return mask


def other_errors(ref, hyp, terms):
    """(errors on non-term words, non-term reference words)."""
    mask = term_mask(ref, terms)
    errors, last_ref = 0, -1
    ops = align(ref, hyp)
    for k, (op, i, _) in enumerate(ops):
        if op in ("sub", "del") and not mask[i]:
            errors += 1
        if op == "ins":
            nxt = next((ops[q][1] for q in range(k + 1, len(ops)) if ops[q][1] is not None), None)
            near = [x for x in (last_ref, nxt) if x is not None and x >= 0]
            if not any(mask[x] for x in near):
                errors += 1
        if i is not None:
            last_ref = i
    return errors, mask.count(False)


def word_outcomes(ref, hyp_words):
    """(confidence, wrong) of each transcript word that has a confidence."""
    hyp = [tokens(w["word"]) for w in hyp_words]
    flat, owner = [], []
    for k, ts in enumerate(hyp):
        for t in ts:
            flat.append(t)
            owner.append(k)
    wrong = [False] * len(hyp_words)
    for op, _, j in align(ref, flat):
        if j is not None and op in ("sub", "ins"):
            wrong[owner[j]] = True
    return [(float(w["confidence"]), wrong[k]) for k, w in enumerate(hyp_words) if w.get("confidence") is not None and hyp[k]]


def auc(pairs):
    """P(a wrong word's confidence < a right word's), ties half."""
    wrong = np.array([c for c, bad in pairs if bad])
    right = np.array([c for c, bad in pairs if not bad])
    if not len(wrong) or not len(right):
        return float("nan")
    less = (wrong[:, None] < right[None, :]).sum() + 0.5 * (wrong[:, None] == right[None, :]).sum()
    return float(less / (len(wrong) * len(right)))


def low_vs_high(pairs):
    low = [bad for c, bad in pairs if c < THRESHOLD]
    high = [bad for c, bad in pairs if c >= THRESHOLD]
    lo = sum(low) / len(low) if low else float("nan")
    hi = sum(high) / len(high) if high else float("nan")
    return lo, hi, (lo / hi if hi else float("inf")), len(low), len(high)


def main():
    t0 = time.time()
    items = sentences()
    audio = [speak(text, voice) for text, _, voice in items]
    vocabulary = tuple(KEY_TERMS)
    whisper = WhisperModel()
    sphinx = SphinxModel()
    rows = []
    for (text, terms, voice), x in zip(items, audio, strict=True):
        off = whisper.recognize(x, True)
        on = whisper.recognize(x, True, vocabulary)
        sp = sphinx.recognize(x, True)
        rows.append({"text": text, "terms": terms, "voice": voice, "off": off.text, "on": on.text,
                     "off_words": off.timestamp["word"], "sphinx_words": sp.timestamp["word"], "sphinx": sp.text})
    term_rows = [r for r in rows if r["terms"]]
    control = [r for r in rows if not r["terms"]]
    found = {"off": 0, "on": 0}
    missed_off, recovered, total = 0, 0, 0
    other = {"off": [0, 0], "on": [0, 0]}
    for r in term_rows:
        ref = tokens(r["text"])
        for term in r["terms"]:
            total += 1
            f_off, f_on = has_term(tokens(r["off"]), term), has_term(tokens(r["on"]), term)
            found["off"] += f_off
            found["on"] += f_on
            if not f_off:
                missed_off += 1
                recovered += f_on
        for mode in ("off", "on"):
            e, n = other_errors(ref, tokens(r[mode]), r["terms"])
            other[mode][0] += e
            other[mode][1] += n
    for r in control:
        ref = tokens(r["text"])
        for mode in ("off", "on"):
            e, n = other_errors(ref, tokens(r[mode]), [])
            other[mode][0] += e
            other[mode][1] += n
    false_inserts = {m: sum(has_term(tokens(r[m]), k) for r in control for k in KEY_TERMS) for m in ("off", "on")}
    conf = {}
    for engine, key in (("whisper", "off_words"), ("sphinx", "sphinx_words")):
        pairs = []
        for r in rows:
            pairs += word_outcomes(tokens(r["text"]), r[key])
        lo, hi, ratio, n_lo, n_hi = low_vs_high(pairs)
        conf[engine] = {"auc": auc(pairs), "error_below": lo, "error_above": hi, "ratio": ratio, "words_below": n_lo,
                        "words_above": n_hi, "words": len(pairs)}
    recall_off, recall_on = found["off"] / total, found["on"] / total
    wer_off, wer_on = other["off"][0] / other["off"][1], other["on"][0] / other["on"][1]
    print("| | without the vocabulary | with it |")
    print("|---|---:|---:|")
    print(f"| key-term recall ({total} terms in {len(term_rows)} sentences, 4 voices) | {recall_off:.3f} | {recall_on:.3f} |")
    print(f"| WER on the other words ({other['off'][1]} words, {len(rows)} sentences) | {wer_off:.3f} | {wer_on:.3f} |")
    print(f"| key terms inserted in {len(control)} control sentences | {false_inserts['off']} | {false_inserts['on']} |")
    print(f"\nmissed without: {missed_off}, of which found with: {recovered} ({recovered / max(missed_off, 1):.2f})")
    print("\n| engine | words | AUC (wrong from right) | error rate below 0.5 | above | ratio | words below |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for engine, c in conf.items():
        print(f"| {engine} | {c['words']} | {c['auc']:.3f} | {c['error_below']:.3f} | {c['error_above']:.3f} | {c['ratio']:.1f} | {c['words_below']} |")
    out = os.environ.get("BENCH_VOCABULARY_OUT")
    if out:
        with open(out, "w") as f:
            json.dump({"rows": [{k: v for k, v in r.items() if not k.endswith("_words")} for r in rows], "confidence": conf}, f, indent=1)
    print(f"\n({time.time() - t0:.0f} s)")
    print(f"RESULT engine=whisper sentences={len(rows)} term_recall_off={recall_off:.3f} term_recall_on={recall_on:.3f} "
          f"recovered={recovered / max(missed_off, 1):.2f} wer_other_off={wer_off:.3f} wer_other_on={wer_on:.3f} "
          f"false_inserts={false_inserts['on']} confidence_auc_whisper={conf['whisper']['auc']:.3f} "
          f"low_vs_high_error_whisper={conf['whisper']['ratio']:.1f} confidence_auc_sphinx={conf['sphinx']['auc']:.3f} "
          f"low_vs_high_error_sphinx={conf['sphinx']['ratio']:.1f}")


if __name__ == "__main__":
    main()
