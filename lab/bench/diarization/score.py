"""DER of each conversation with pyannote.metrics (make bench-diarization):
reads [{"id", "ref", "hyp", "ref_labels", "hyp_labels"}] as JSON on stdin,
each turn [start, end, label index], and writes {"id": der} on stdout.
Collar 0.25 s (pyannote's collar is the total width around a boundary:
0.5 here, 0.25 s each side, as NIST's md-eval -c 0.25), overlapped speech
scored (skip_overlap False)."""

import json
import sys

from pyannote.core import Annotation, Segment
from pyannote.metrics.diarization import DiarizationErrorRate


def annotation(turns, labels):
    a = Annotation()
    for i, (start, end, who) in enumerate(turns):
        a[Segment(start, end), i] = labels[int(who)]
    return a


def main():
    items = json.load(sys.stdin)
    metric = DiarizationErrorRate(collar=0.5, skip_overlap=False)
    out = {}
    for it in items:
        out[it["id"]] = metric(annotation(it["ref"], it["ref_labels"]), annotation(it["hyp"], it["hyp_labels"]))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
