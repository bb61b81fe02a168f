"""PyTorch checkpoints read without torch: the tensors of a file that
torch.save wrote (a zip of a pickle and one file per storage) as numpy
arrays, so the CPU diarizer can run trained weights that ship inside a
package on the numpy and onnxruntime the CPU environment already has.

The pickle is read by a restricted unpickler: tensors, storages and
ordered dicts are rebuilt; every other class a checkpoint names (a
training framework's bookkeeping) becomes an inert placeholder, and no
function of the file's choosing is ever called."""

from __future__ import annotations

import collections
import pickle
import zipfile
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]

_STORAGE_DTYPES: dict[str, Any] = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class CheckpointError(ValueError):
    """A file that is not a PyTorch checkpoint this reader understands."""


class Placeholder:
    """Stands in for any class a checkpoint names that is not a tensor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _rebuild_tensor(storage: Array, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any) -> Array:
    if not size:
        return np.array(storage[offset])
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=size, strides=[s * item for s in stride])
    return np.array(view)


def _rebuild_parameter(data: Array, *_: Any) -> Array:
    return data


class _Unpickler(pickle.Unpickler):
    def __init__(self, archive: zipfile.ZipFile, root: str) -> None:
        super().__init__(archive.open(f"{root}/data.pkl"))
        self.archive, self.root = archive, root

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _STORAGE_DTYPES:
            return name
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        return type(name, (Placeholder,), {"__module__": "checkpoint:" + module})

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise CheckpointError(f"unknown persistent id {pid!r:.80}")
        _, kind, key, _, _ = pid[:5]
        dtype = _STORAGE_DTYPES.get(kind if isinstance(kind, str) else "")
        if dtype is None:
            raise CheckpointError(f"unsupported storage {kind!r:.80}")
        return np.frombuffer(self.archive.read(f"{self.root}/data/{key}"), dtype=dtype)


def load(path: str) -> Any:
    """The object a PyTorch zip checkpoint holds, its tensors as numpy
    arrays (a state dict is an ordered dict of them)."""
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: not a PyTorch zip checkpoint: {e}") from e
    with archive:
        names = archive.namelist()
        if not names:
            raise CheckpointError(f"{path}: empty archive")
        root = names[0].split("/")[0]
        if f"{root}/data.pkl" not in names:
            raise CheckpointError(f"{path}: no {root}/data.pkl")
        return _Unpickler(archive, root).load()


def state_dict(obj: Any) -> dict[str, Array]:
    """The float tensors of a checkpoint's state dict (a bare one, or the
    "state_dict" of a training framework's), as float32 arrays."""
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CheckpointError("checkpoint holds no state dict")
    return {str(k): np.asarray(v, np.float32) for k, v in obj.items()
            if isinstance(v, np.ndarray) and v.dtype.kind == "f"}
