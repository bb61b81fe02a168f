"""Triton Python-backend model: NVIDIA Parakeet TDT 0.6B V2 through NeMo.

Implements the worker's model contract (README, "Model contract") in the
ragged batching mode of ../config.pbtxt: Triton's dynamic batcher hands
execute() a list of requests of any lengths; they are transcribed together
in one call of the model (NeMo pads the batch itself), and each gets its
own response:

  inputs   audio FP32 [1, n] (16 kHz mono), optional timestamps BOOL [1, 1],
           optional audio_length INT32 [1, 1] (true length of padded audio)
  outputs  text BYTES [1, 1], word_timestamps BYTES [1, words] (one JSON
           object per word: word, start, end in seconds), num_words INT32 [1, 1]

A request that is invalid (empty, not finite, too long) gets an
INVALID_ARGUMENT error of its own, which the worker treats as permanent;
if the batch call fails, each request is retried alone so that one bad
input cannot fail the others.

The model comes from the model config parameter "model" or the environment
variable PARAKEET_MODEL: a local .nemo file, or a model name for NeMo to
download ("nvidia/parakeet-tdt-0.6b-v2", the default).
"""

import json
import os

import numpy as np

try:  # Only inside Triton; the tests put a stand-in in its place.
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover
    pb_utils = None

SAMPLE_RATE = 16000
DEFAULT_MODEL = "nvidia/parakeet-tdt-0.6b-v2"
# Longest chunk accepted: the worker sends at most -chunk-seconds (30 s);
# Parakeet TDT handles far longer, but a runaway input must not take the GPU.
MAX_SECONDS = 600


def load_model(source, device):
    """Loads a NeMo ASR model from a .nemo path or a model name."""
    import nemo.collections.asr as nemo_asr  # heavy: imported only here

    if source.endswith(".nemo") or os.path.exists(source):
        model = nemo_asr.models.ASRModel.restore_from(restore_path=source, map_location=device)
    else:
        model = nemo_asr.models.ASRModel.from_pretrained(model_name=source, map_location=device)
    model.eval()
    return model


class RequestError(ValueError):
    """An input the model must refuse: a permanent, per-request error."""


def read_request(request):
    """Returns (samples, want_timestamps) of one request, or raises RequestError."""
    audio = pb_utils.get_input_tensor_by_name(request, "audio")
    if audio is None:
        raise RequestError("input 'audio' is missing")
    samples = audio.as_numpy()
    if samples.dtype != np.float32:
        raise RequestError(f"input 'audio' is {samples.dtype}, want float32")
    samples = samples.reshape(-1)
    length = pb_utils.get_input_tensor_by_name(request, "audio_length")
    if length is not None:
        n = int(length.as_numpy().reshape(-1)[0])
        if n < 0 or n > samples.size:
            raise RequestError(f"audio_length {n} outside 0..{samples.size}")
        samples = samples[:n]
    if samples.size == 0:
        raise RequestError("audio is empty")
    if samples.size > MAX_SECONDS * SAMPLE_RATE:
        raise RequestError(f"audio is {samples.size / SAMPLE_RATE:.0f} s, limit {MAX_SECONDS} s")
    if not np.isfinite(samples).all():
        raise RequestError("audio has NaN or infinite samples")
    ts = pb_utils.get_input_tensor_by_name(request, "timestamps")
    want = True if ts is None else bool(ts.as_numpy().reshape(-1)[0])
    return samples, want


def hypothesis_words(hyp):
    """Word timings of a NeMo hypothesis as the contract's JSON objects."""
    stamps = getattr(hyp, "timestamp", None) or {}
    words = []
    for w in stamps.get("word", []) if isinstance(stamps, dict) else []:
        text = w.get("word") or w.get("char") or ""
        start, end = w.get("start"), w.get("end")
        if not text or start is None or end is None:
            continue
        words.append({"word": str(text), "start": round(float(start), 3), "end": round(float(end), 3)})
    return words


def hypothesis_text(hyp):
    return (hyp.text if hasattr(hyp, "text") else str(hyp)).strip()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        self.source = os.environ.get("PARAKEET_MODEL") or params.get("model") or DEFAULT_MODEL
        kind = args.get("model_instance_kind", "GPU")
        device = f"cuda:{args.get('model_instance_device_id', '0')}" if kind == "GPU" else "cpu"
        self.max_batch = int(config.get("max_batch_size", 32)) or 1
        self.model = self._load(self.source, device)
        self.warm_up()

    def _load(self, source, device):  # replaced in tests
        return load_model(source, device)

    def warm_up(self):
        """One batch of silence at the largest batch size, so the first real
        request does not pay for kernel selection and memory pools."""
        silence = [np.zeros(SAMPLE_RATE, dtype=np.float32)] * self.max_batch
        self.transcribe(silence, True)

    def transcribe(self, batch, timestamps):
        return self.model.transcribe(batch, batch_size=len(batch), timestamps=timestamps, verbose=False)

    def execute(self, requests):
        responses = [None] * len(requests)
        batch, where, want_ts = [], [], False
        for i, req in enumerate(requests):
            try:
                samples, ts = read_request(req)
            except RequestError as e:
                responses[i] = self.error(str(e), invalid=True)
                continue
            batch.append(samples)
            where.append(i)
            want_ts = want_ts or ts
        if batch:
            try:
                hyps = list(self.transcribe(batch, want_ts))
                if len(hyps) != len(batch):
                    raise RuntimeError(f"model returned {len(hyps)} results for {len(batch)} inputs")
            except Exception:  # noqa: BLE001 - isolate the input that failed
                hyps = None
            if hyps is None:
                # One input broke the batch: run each alone, so only it fails.
                hyps = []
                for samples in batch:
                    try:
                        hyps.append(self.transcribe([samples], want_ts)[0])
                    except Exception as e:  # noqa: BLE001
                        hyps.append(e)
            for i, hyp in zip(where, hyps):
                if isinstance(hyp, Exception):
                    responses[i] = self.error(f"transcription failed: {hyp}", invalid=False)
                else:
                    responses[i] = self.respond(hyp)
        return responses

    def respond(self, hyp):
        words = hypothesis_words(hyp)
        text = np.array([[hypothesis_text(hyp).encode("utf-8")]], dtype=np.object_)
        stamps = np.array([[json.dumps(w).encode("utf-8") for w in words]], dtype=np.object_).reshape(1, len(words))
        count = np.array([[len(words)]], dtype=np.int32)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text", text),
            pb_utils.Tensor("word_timestamps", stamps),
            pb_utils.Tensor("num_words", count),
        ])

    def error(self, message, invalid):
        code = pb_utils.TritonError.INVALID_ARG if invalid else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message, code))

    def finalize(self):
        self.model = None
