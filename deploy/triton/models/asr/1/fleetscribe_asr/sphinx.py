"""The pocketsphinx engine (CMU Sphinx, on CPU) and its signal processing:
pauses, speech spans, narrowband audio. The fast tests and the chaos suite
run it; the GPU image never does."""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt

from .common import SAMPLE_RATE, Audio, Hypothesis, Word
from .options import SPHINX_CMNINIT, SphinxOptions

Energies = npt.NDArray[np.float64]

__all__ = ["SPHINX_CMNINIT", "SphinxModel"]


class SphinxModel:
    """pocketsphinx (CMU Sphinx) with its US-English model, on CPU, with
    NeMo's transcribe signature so that the contract code serves it as it
    serves Parakeet. A batch is decoded row by row; run several model
    instances (instance_group count) to use several cores.

    Each request starts from the same decoder state (a new stream and the
    initial cepstral mean), so its words never depend on the requests before
    it. It is decoded as one utterance per stretch of speech, divided at
    pauses of 0.5 s or more (see pause_cuts): decoded as one, sentences on
    either side of a pause run together through the language model and
    come out worse than each alone. Each utterance is decoded from its first
    to its last sound (speech_span), and narrowband audio gets its empty
    upper band filled (fill_band). Word times count from the request's
    first sample, in 10 ms frames (pocketsphinx 5 counts each utterance's
    frames from its own start).
    """

    FRAME_RATE = 100  # pocketsphinx's frames per second (-frate)
    BLOCK = 2048  # samples a process_raw call gets, as pocketsphinx's tools feed it

    def __init__(self, opts: SphinxOptions | None = None) -> None:
        import pocketsphinx  # only where this engine is used

        opts = opts or SphinxOptions()
        path = opts.sphinx_model or os.path.join(pocketsphinx.get_model_path(), "en-us")
        config = {
            "hmm": os.path.join(path, "en-us"),
            "lm": os.path.join(path, "en-us.lm.bin"),
            "dict": os.path.join(path, "cmudict-en-us.dict"),
            "loglevel": "FATAL",
            # Where each utterance's cepstral mean starts. The en-us model's
            # own feat.params carries this mean in other distributions of
            # it; the wheel's lacks it and falls back to 40,3,-1, which costs
            # short clips dearly (demo WER 0.16 against 0.11).
            "cmninit": opts.sphinx_cmninit,
        }
        self.decoder = pocketsphinx.Decoder(**config)
        self.cmn_init = self.decoder.get_cmn()
        # Narrowband audio (telephone: 8 kHz, G.711) has nothing above 4 kHz,
        # where the wideband model expects some energy; band_fill adds noise
        # there at this fraction of the request's RMS (0 or less: off).
        self.band_fill = opts.sphinx_band_fill
        # Each utterance is decoded from its first to its last frame of
        # sound, with this much margin (negative: the whole utterance),
        # so no word is invented over quiet room tone around speech.
        self.speech_pad = int(opts.sphinx_speech_pad_ms * SAMPLE_RATE / 1000)

    def transcribe(self, audio: list[Audio], batch_size: int, timestamps: bool, verbose: bool) -> list[Hypothesis]:  # noqa: ARG002 - NeMo's signature
        return [self.recognize(samples, timestamps) for samples in audio]

    def recognize(self, samples: Audio, timestamps: bool) -> Hypothesis:
        if self.band_fill > 0 and narrowband(samples):
            samples = fill_band(samples, self.band_fill)
        pcm = pcm16(samples)
        d = self.decoder
        d.start_stream()  # frame numbers from 0, noise statistics reset
        texts: list[str] = []
        words: list[Word] = []
        cuts = [*pause_cuts(samples), len(pcm)]
        start = 0
        for end in cuts:
            lo, hi = start, end
            if self.speech_pad >= 0:
                lo, hi = speech_span(samples, start, end, self.speech_pad)
            text, ws = self.utterance(pcm[lo:hi], lo / SAMPLE_RATE, timestamps)
            if text:
                texts.append(text)
            words.extend(ws)
            start = end
        return Hypothesis(" ".join(texts), tuple(words))

    def utterance(self, pcm: npt.NDArray[np.int16], offset: float, timestamps: bool) -> tuple[str, list[Word]]:
        """Decodes pcm, which starts offset seconds into the request, as one
        utterance; pocketsphinx counts its frames from the utterance's start."""
        d = self.decoder
        d.set_cmn(self.cmn_init)  # the next voice may not be the last one's
        d.start_utt()
        for off in range(0, len(pcm), self.BLOCK):
            d.process_raw(pcm[off:off + self.BLOCK].tobytes(), False, False)
        d.end_utt()
        hyp = d.hyp()
        text: str = (hyp.hypstr or "").strip() if hyp is not None else ""
        words: list[Word] = []
        if timestamps and text:
            logmath = d.get_logmath()
            # seg() is None, not empty, when the decoder found nothing (a
            # chunk of a few samples, silence, noise): no words, no error.
            for seg in d.seg() or ():
                word = clean_word(seg.word)
                if word is None:
                    continue
                words.append(Word(word, round(offset + seg.start_frame / self.FRAME_RATE, 3),
                                  round(offset + (seg.end_frame + 1) / self.FRAME_RATE, 3),
                                  round(float(logmath.exp(seg.prob)), 4)))
        return text, words


def pcm16(samples: Audio) -> npt.NDArray[np.int16]:
    """16-bit samples of [-1, 1] floats, clipped, truncated toward zero."""
    return (np.clip(samples, -1.0, 1.0) * 32767).astype(np.int16)


def clean_word(w: str) -> str | None:
    """A recognised word without fillers (<s>, <sil>, [NOISE]) or the "(2)"
    of an alternate pronunciation; None for a filler."""
    if not w or w[0] in "<[":
        return None
    i = w.find("(")
    return w[:i] if i > 0 else w


PAUSE_FRAME = 160  # 10 ms at 16 kHz
MIN_PAUSE_FRAMES = 50  # 0.5 s of quiet frames


def pause_cuts(x: Audio) -> list[int]:
    """Where x divides into utterances: the middle of every pause of at
    least 0.5 s with sound on both sides. A pause is a run of 10 ms frames
    quieter than quiet_threshold."""
    energy = frame_energies(x)
    if len(energy) < 2 * MIN_PAUSE_FRAMES:
        return []
    threshold = quiet_threshold(energy)
    cuts: list[int] = []
    run = 0
    for i, quiet in enumerate(energy < threshold):
        if quiet:
            run += 1
            continue
        if run >= MIN_PAUSE_FRAMES and run < i:  # not at the start
            cuts.append((i - run // 2) * PAUSE_FRAME)
        run = 0
    return cuts  # a pause that runs to the end divides nothing


def frame_energies(x: Audio) -> Energies:
    """Mean energy of each 10 ms frame of x (float64)."""
    n = len(x) // PAUSE_FRAME
    frames = np.asarray(x[: n * PAUSE_FRAME], dtype=np.float64).reshape(n, PAUSE_FRAME)
    energies: Energies = (frames * frames).sum(axis=1) / PAUSE_FRAME
    return energies


def quiet_threshold(energy: Energies) -> float:
    """The energy under which a frame is quiet: 6 dB above the floor (the
    quietest tenth of frames) and 30 dB below speech (the loudest tenth)."""
    n = len(energy)
    ordered = np.sort(energy)
    return float(max(4 * ordered[n // 10], ordered[n - 1 - n // 10] / 1000))


def speech_span(x: Audio, start: int, end: int, pad: int) -> tuple[int, int]:
    """The part of x[start:end] from its first to its last frame of sound,
    widened by pad samples each way, as (lo, hi) in x's samples; all of it
    where it has no frame of sound or is too short to tell."""
    seg = x[start:end]
    if len(seg) < 20 * PAUSE_FRAME:
        return start, end
    energy = frame_energies(seg)
    loud = np.nonzero(energy >= quiet_threshold(energy))[0]
    if len(loud) == 0:
        return start, end
    lo = max(0, int(loud[0]) * PAUSE_FRAME - pad)
    hi = min(len(seg), (int(loud[-1]) + 1) * PAUSE_FRAME + pad)
    return start + lo, start + hi


NARROW_HZ = 4200  # above a telephone band (8 kHz audio holds nothing past 4 kHz)


def narrowband(x: Audio) -> bool:
    """Whether x (16 kHz) holds next to nothing above 4.2 kHz: less than a
    ten-thousandth of its energy, as audio recorded at 8 kHz or through a
    telephone band."""
    if len(x) < 1024:
        return False
    spectrum = np.abs(np.fft.rfft(np.asarray(x, dtype=np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE)
    total = spectrum.sum()
    return bool(total > 0 and spectrum[freqs > NARROW_HZ].sum() < 1e-4 * total)


def fill_band(x: Audio, level: float) -> Audio:
    """x with white noise added between 4 and 8 kHz at level times its RMS,
    the same noise for the same length (a request's words never depend on
    chance). The wideband model's filters up to 6.8 kHz then see the noise
    floor they were trained on instead of nothing."""
    n = len(x)
    spectrum = np.fft.rfft(np.random.default_rng(n).standard_normal(n))
    spectrum[np.fft.rfftfreq(n, 1 / SAMPLE_RATE) < 4000] = 0
    noise = np.fft.irfft(spectrum, n)
    rms = np.sqrt(np.mean(np.asarray(x, dtype=np.float64) ** 2))
    noise *= level * rms / (np.sqrt(np.mean(noise**2)) + 1e-20)
    return (x + noise).astype(np.float32)
