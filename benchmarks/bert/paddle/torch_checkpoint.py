"""Read a PyTorch checkpoint's tensors as numpy arrays without torch, and without running code
from the file.

A file written by ``torch.save`` (PyTorch 1.6 onwards, the default "zip" serialization) is a zip
archive: ``<name>/data.pkl`` pickles the saved object with every tensor as a call to
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)``, each storage a
persistent id ``("storage", <Type>Storage, key, location, numel)`` whose bytes are the archive
member ``<name>/data/<key>``, in the byte order ``<name>/byteorder`` names (``little`` when
absent) (PyTorch's torch/serialization.py, ``_save`` and ``_load``).

The unpickler here resolves only those names (the tensor rebuild, the storage classes and
``collections.OrderedDict``) and refuses every other global, so that a file can make it build
dicts, lists, tuples, numbers, strings and arrays and nothing else: as ``torch.load(...,
weights_only=True)`` restricts it. The converted MLPerf BERT checkpoint that FlagPerf's paddle
case read through torch (``torch.save({"model": state_dict})``) holds nothing more.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

#: torch storage classes -> numpy dtype of their elements (BFloat16: two bytes, widened below).
STORAGE_DTYPES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class CheckpointError(ValueError):
    """The file is not a checkpoint this reader can read (the message names the file)."""


class _Storage:
    """A storage class named in the pickle (a marker: only its dtype is used)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype = np.dtype(STORAGE_DTYPES[name])


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, hooks=None,
                       metadata=None):
    """``torch._utils._rebuild_tensor_v2`` for a numpy storage: a copy of the strided view."""
    flat, bfloat16 = storage
    size, stride = tuple(int(n) for n in size), tuple(int(n) for n in stride)
    if len(size) != len(stride) or min((offset, *size, *stride)) < 0:
        raise CheckpointError(f"tensor of size {size}, stride {stride}, offset {offset}")
    # as_strided does not check bounds: the last element must lie inside the storage.
    if 0 not in size and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= flat.size:
        raise CheckpointError(f"tensor of size {size}, stride {stride}, offset {offset} runs "
                              f"past its storage of {flat.size} elements")
    if 0 in size:
        array = np.zeros(size, dtype=flat.dtype)
    else:
        array = np.lib.stride_tricks.as_strided(
            flat[offset:], shape=size, strides=tuple(s * flat.itemsize for s in stride))
    array = np.array(array)  # own the memory: the archive buffer is freed after loading
    if bfloat16:  # bfloat16 is the upper half of a float32
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, order: str,
                 path: Path) -> None:
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix, self.order, self.path = archive, prefix, order, path
        self.storages: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if module == "torch" and name in STORAGE_DTYPES:
            return _Storage(name)
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise CheckpointError(f"{self.path}: refuses to load {module}.{name} (only tensors, "
                              "dicts, lists and plain values are read)")

    def persistent_load(self, pid: Any) -> tuple[np.ndarray, bool]:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _Storage)):
            raise CheckpointError(f"{self.path}: unknown persistent id {pid!r:.80}")
        _, storage, key, _location, numel = pid
        if key not in self.storages:
            try:
                raw = self.archive.read(f"{self.prefix}data/{key}")
            except KeyError:
                raise CheckpointError(f"{self.path}: storage {key} missing from the archive") \
                    from None
            dtype = storage.dtype.newbyteorder("<" if self.order == "little" else ">")
            if len(raw) < numel * dtype.itemsize:
                raise CheckpointError(f"{self.path}: storage {key} holds {len(raw)} bytes, "
                                      f"{numel} elements of {storage.name} expected")
            flat = np.frombuffer(raw, dtype=dtype, count=numel)
            self.storages[key] = flat if dtype.isnative else flat.astype(dtype.newbyteorder("="))
        return self.storages[key], storage.name == "BFloat16Storage"


def load(path: str | Path) -> Any:
    """The object ``torch.save`` wrote to ``path``, every tensor as a numpy array (bfloat16
    widened to float32; a tensor's shape and values as saved).

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: not a zip-format torch checkpoint, a global other than a tensor,
            storage or OrderedDict, or a storage missing or short.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise CheckpointError(f"{path}: not a torch checkpoint (not the zip format torch.save "
                              "writes; a legacy pre-1.6 file must be re-saved)") from None
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: not a torch checkpoint ({len(pickles)} data.pkl)")
        prefix = pickles[0][: -len("data.pkl")]
        order = "little"
        if f"{prefix}byteorder" in archive.namelist():
            order = archive.read(f"{prefix}byteorder").decode("ascii").strip()
        unpickler = _RestrictedUnpickler(archive.read(pickles[0]), archive, prefix, order, path)
        try:
            return unpickler.load()
        except CheckpointError as err:
            if str(err).startswith(str(path)):
                raise
            raise CheckpointError(f"{path}: {err}") from None
        except (pickle.UnpicklingError, EOFError, TypeError, ValueError, KeyError) as err:
            raise CheckpointError(f"{path}: not a readable torch checkpoint ({err})") from None
