"""Triton Python-backend model of the worker's diarization contract
(docs/contracts.md, "Diarization model"; rendered by modelspec into
../config.pbtxt): who speaks when, chunk by chunk.

  inputs   audio FP32 [1, n] (16 kHz mono; left out of a finish request,
           and not heard there),
           optional state BYTES [1, 1] (what the previous chunk's response
           returned; absent or empty at a recording's first chunk),
           optional finish BOOL [1, 1], optional last BOOL [1, 1] (the
           audio is the recording's last chunk: heard, then finished as
           with finish), optional speakers INT32 [1, 2] (the job's min and
           max speakers, 0: none; read with finish or last)
  outputs  turns BYTES [1, turns] (one JSON object a turn: start and end in
           seconds into the chunk, speaker a provisional index),
           state_out BYTES [1, 1], labels INT32 [1, provisional] (with
           finish or last: each provisional speaker's final label, -1 for
           one never heard; otherwise empty)

The partitions keep nothing between requests: the state travels with the
request and comes back with the response, so any partition serves any
chunk. The requests of one execute() (chunks of different recordings)
share one segmentation call. A request that is invalid (bad state, bad
hints, audio not finite) gets an INVALID_ARGUMENT error of its own; one
whose diarization fails gets INTERNAL, the others of its batch are served.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

# The engines' package sits beside this file (a link to the speech model's).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fleetscribe_asr.common import SAMPLE_RATE, log_info
from fleetscribe_asr.diarize import Ask, DiarizeOptions, Diarizer, Reply, StateError

try:  # Only inside Triton; the tests put a stand-in in its place.
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover
    pb_utils = None

# Longest chunk accepted (the worker sends at most -chunk-seconds).
MAX_SECONDS = 600


def read_request(request: Any) -> Ask:
    """The request's inputs, or a StateError naming what is wrong."""
    audio = pb_utils.get_input_tensor_by_name(request, "audio")
    samples = np.zeros(0, np.float32) if audio is None else audio.as_numpy()
    if samples.dtype != np.float32:
        raise StateError(f"input 'audio' is {samples.dtype}, want float32")
    samples = samples.reshape(-1)
    if samples.size > MAX_SECONDS * SAMPLE_RATE:
        raise StateError(f"audio is {samples.size / SAMPLE_RATE:.0f} s, limit {MAX_SECONDS} s")
    if not np.isfinite(samples).all():
        raise StateError("audio has NaN or infinite samples")
    raw = b""
    st = pb_utils.get_input_tensor_by_name(request, "state")
    if st is not None:
        elems = st.as_numpy().reshape(-1)
        raw = bytes(elems[0]) if elems.size else b""
    finish, last = flag(request, "finish"), flag(request, "last")
    if finish and last:
        raise StateError("finish and last both set: finish is a request without audio, last one with its recording's last chunk")
    lo = hi = 0
    hints = pb_utils.get_input_tensor_by_name(request, "speakers")
    if hints is not None:
        h = hints.as_numpy().reshape(-1)
        if h.size != 2:
            raise StateError(f"input 'speakers' has {h.size} values, want 2 (min, max)")
        lo, hi = int(h[0]), int(h[1])
    if finish:
        samples = np.zeros(0, np.float32)  # a finish request's audio is not heard
    elif samples.size == 0:
        raise StateError("audio is empty (only a finish request's may be)")
    # A last chunk is heard, then finished: the engines hear a request's
    # audio before they label its speakers.
    return Ask(samples, raw, finish or last, lo, hi)


def flag(request: Any, name: str) -> bool:
    """The optional BOOL input name (absent: False)."""
    t = pb_utils.get_input_tensor_by_name(request, name)
    return t is not None and bool(t.as_numpy().reshape(-1)[0])


def load_engine(params: dict[str, str], device: str, max_batch: int = 0) -> Any:
    """The diarizer the parameter engine names: pyannote_campp (CPU) or
    sortformer (NeMo's streaming Sortformer on device, its compiled shapes
    no larger than the model's max_batch_size needs)."""
    if params.get("engine") == "sortformer":
        from fleetscribe_asr.sortformer import SortformerDiarizer, SortformerOptions

        return SortformerDiarizer(SortformerOptions.from_params(params), device, max_batch=max_batch)
    return Diarizer(DiarizeOptions.from_params(params))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        device = "cuda:%s" % args.get("model_instance_device_id", "0") if args.get("model_instance_kind") == "GPU" else "cpu"
        start = time.perf_counter()
        self.diarizer = load_engine(params, device, int(config.get("max_batch_size", 0)))
        log_info("diarize: engine %s ready in %.1f s (%s)" % (params.get("engine") or "pyannote_campp",
                                                             time.perf_counter() - start, self.diarizer.describe()))

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        asks: dict[int, Ask] = {}
        for i, req in enumerate(requests):
            try:
                asks[i] = read_request(req)
            except StateError as e:
                responses[i] = self.error(str(e), invalid=True)
        for i, out in self.diarizer.serve(asks).items():
            if isinstance(out, Reply):
                responses[i] = self.respond(out.turns, out.state, out.labels)
            else:
                responses[i] = self.error(str(out), invalid=isinstance(out, StateError))
        return responses

    def respond(self, turns: list[Any], state: bytes, labels: list[int]) -> Any:
        rows = [json.dumps({"start": round(t.start, 3), "end": round(t.end, 3), "speaker": t.speaker}).encode() for t in turns]
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("turns", np.array([rows], dtype=np.object_).reshape(1, len(rows))),
            pb_utils.Tensor("state_out", np.array([[state]], dtype=np.object_)),
            pb_utils.Tensor("labels", np.array([labels], dtype=np.int32).reshape(1, len(labels))),
        ])

    def error(self, message: str, invalid: bool) -> Any:
        code = pb_utils.TritonError.INVALID_ARG if invalid else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, code))

    def finalize(self) -> None:
        del self.diarizer
