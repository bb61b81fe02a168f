"""Tests of the stand-in's decoder: the batched loop (eager here, and
replayed from CUDA graphs where a GPU is present) against a plain per-row
greedy TDT reference written apart from it, and the calibration.

    python -m unittest discover -s lab/bench/gpu -p 'test_*.py'

Needs torch; on a GPU host the CUDA-graph cases run too (the GPU
benchmark runs them before it measures anything).
"""
import unittest

import numpy as np
import standin
import torch


def reference(dec, f_all, frames, max_symbols=10):
    """Greedy TDT decoding of each row alone, one joint evaluation at a time."""
    out = []
    h0, c0, g0 = dec.start_state()
    for row in range(f_all.shape[0]):
        h, c, g = h0.clone(), c0.clone(), g0.clone()
        t, symbols, toks, tfr = 0, 0, [], []
        n = int(frames[row])
        while t < n:
            z = dec.out(torch.relu(f_all[row, t:t + 1] + g))[0]
            tok = int(z[:dec.vocab + 1].argmax())
            dur = standin.DURATIONS[int(z[dec.vocab + 1:].argmax())]
            if tok == dec.blank:
                t += max(dur, 1)
                symbols = 0
                continue
            toks.append(tok)
            tfr.append(t)
            symbols = symbols + 1 if dur == 0 else 0
            if symbols >= max_symbols:
                dur, symbols = 1, 0
            x, h, c = dec.lstm_step(dec.embed(torch.tensor([tok], device=f_all.device)), h, c)
            g = dec.pred_proj(x)
            t += dur
        out.append((toks, tfr))
    return out


def clips(device, seconds, count, seed):
    rng = np.random.default_rng(seed)
    n = [int(s * standin.SAMPLE_RATE) for s in seconds[:count]]
    x = np.zeros((count, max(n)), dtype=np.float32)
    for i, k in enumerate(n):
        x[i, :k] = standin.speech_like(rng, k)
    return torch.from_numpy(x).to(device), torch.tensor(n, device=device)


class DecoderTest(unittest.TestCase):
    def setUp(self):
        self.device = "cpu"
        self.model = standin.build(standin.Config.tiny(), self.device, torch.float32)
        # A blank bias that makes tokens and blanks both common.
        with torch.no_grad():
            self.model.decoder.out.bias[self.model.decoder.blank] += 1.0
            self.model.decoder.out.bias[self.model.decoder.vocab + 1] += 1.5  # duration 0 often

    def encoded(self, model, device, seconds, seed=1):
        audio, lengths = clips(device, seconds, len(seconds), seed)
        with torch.no_grad():
            enc, frames = model.encoder(audio, lengths)
            return model.decoder.project(enc, frames), frames

    def test_batched_loop_matches_reference(self):
        f_all, frames = self.encoded(self.model, self.device, [3.0, 1.2, 2.5, 0.3, 2.9])
        decode = standin.GreedyTDT(self.model.decoder, mode="eager", max_symbols=3)
        toks, tfr, steps = decode(f_all, frames)
        with torch.no_grad():
            want = reference(self.model.decoder, f_all, frames, max_symbols=3)
        self.assertEqual([w[0] for w in want], toks)
        self.assertEqual([w[1] for w in want], tfr)
        self.assertTrue(any(len(t) > 5 for t in toks), "too few tokens to test anything")
        self.assertGreater(steps, max(len(t) for t in toks))
        # Each token's frame is inside its row.
        for row, fr in zip(tfr, frames.tolist(), strict=False):
            self.assertTrue(all(0 <= f < fr for f in row))

    def test_rows_do_not_depend_on_each_other(self):
        f_all, frames = self.encoded(self.model, self.device, [2.0, 1.0, 2.4])
        decode = standin.GreedyTDT(self.model.decoder, mode="eager")
        together = decode(f_all, frames)[0]
        alone = [decode(f_all[i:i + 1, :int(frames[i])], frames[i:i + 1])[0][0] for i in range(3)]
        self.assertEqual(alone, together)

    def test_more_rows_than_the_largest_batch(self):
        f_all, frames = self.encoded(self.model, self.device, [1.0, 2.0, 1.5])
        whole = standin.GreedyTDT(self.model.decoder, mode="eager")(f_all, frames)
        split = standin.GreedyTDT(self.model.decoder, mode="eager", max_batch=2)(f_all, frames)
        self.assertEqual(whole[0], split[0])

    def test_calibration_reaches_parakeet_rates(self):
        decode = standin.GreedyTDT(self.model.decoder, mode="eager")
        got = standin.calibrate(self.model, decode, seconds=20, clips=2)
        self.assertAlmostEqual(got["tokens"] / 20, standin.TOKENS_PER_SECOND, delta=0.05 * standin.TOKENS_PER_SECOND)
        self.assertAlmostEqual(got["steps"] / 20, standin.STEPS_PER_SECOND, delta=0.25 * standin.STEPS_PER_SECOND)

    def test_unknown_decoder_mode(self):
        with self.assertRaises(ValueError):
            standin.GreedyTDT(self.model.decoder, mode="graphs")

    @unittest.skipUnless(torch.cuda.is_available(), "needs a GPU")
    def test_cuda_graph_replay_matches_eager(self):
        model = standin.build(standin.Config(), "cuda", torch.bfloat16)
        graph = standin.GreedyTDT(model.decoder, mode="cuda_graph", max_batch=8)
        got = standin.calibrate(model, graph, clips=2)
        self.assertAlmostEqual(got["tokens"] / 45, standin.TOKENS_PER_SECOND, delta=0.05 * standin.TOKENS_PER_SECOND)
        self.assertAlmostEqual(got["steps"] / 45, standin.STEPS_PER_SECOND, delta=0.25 * standin.STEPS_PER_SECOND)
        f_all, frames = self.encoded(model, "cuda", [45.0, 30.0, 12.0, 44.0, 3.0], seed=3)
        eager = standin.GreedyTDT(model.decoder, mode="eager")
        a, b = graph(f_all, frames), eager(f_all, frames)
        self.assertEqual(a[0], b[0])
        self.assertEqual(a[1], b[1])
        self.assertEqual(a[2], b[2])
        # A longer input than the graphs hold: captured again, same answer.
        long_f, long_frames = self.encoded(model, "cuda", [70.0, 2.0], seed=4)
        self.assertEqual(graph(long_f, long_frames)[0], eager(long_f, long_frames)[0])


if __name__ == "__main__":
    unittest.main()
