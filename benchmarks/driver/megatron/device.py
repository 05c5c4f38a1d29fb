"""Where a megatron-core rank runs: the vendor's adapter, applied before megatron-core is
imported.

megatron-core is written for CUDA. A vendor whose device is not CUDA adapts it, as Ascend's
``torch_npu`` maps ``torch.cuda`` onto its NPU, in an adapter module:
``vendors/<vendor>/<model>-megatron/extern/adapter.py`` for one case, else
``vendors/<vendor>/megatron/adapter.py`` for all of the vendor's megatron cases. The vendor
folder comes from ``FLAGPERF_VENDOR_DIR`` (``driver.torch.vendor_hooks``). The adapter defines:

* ``prepare(local_rank) -> torch.device``: adapt megatron-core and return the rank's device.

Without an adapter the rank runs on CUDA device ``local_rank`` and megatron-core unpatched.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from driver.torch.vendor_hooks import VENDOR_DIR_ENV, adapter_path, import_adapter

FRAMEWORK = "megatron"


def megatron_adapter(model: str, vendor_dir: str | None = None) -> Path | None:
    """The adapter in force for ``model``: the case's, else the vendor's for all megatron
    cases, else None (also without a vendor folder)."""
    vendor_dir = vendor_dir if vendor_dir is not None else os.environ.get(VENDOR_DIR_ENV, "")
    if not vendor_dir:
        return None
    for path in (adapter_path(model, vendor_dir, FRAMEWORK),
                 Path(vendor_dir) / FRAMEWORK / "adapter.py"):
        if path.is_file():
            return path
    return None


def prepare_device(model: str, local_rank: int) -> tuple[torch.device, Path | None]:
    """The rank's device, and the adapter that chose it (None: the default, CUDA).

    Raises:
        RuntimeError: no adapter and no CUDA device (megatron-core needs one).
        TypeError: the adapter has no callable ``prepare``.
    """
    path = megatron_adapter(model)
    if path is None:
        if not torch.cuda.is_available():
            raise RuntimeError("megatron-core needs CUDA, and the vendor has no megatron "
                               "adapter (vendors/<vendor>/megatron/adapter.py)")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), None
    module = import_adapter(path, f"flagperf_megatron_adapter_{model}")
    prepare = getattr(module, "prepare", None)
    if not callable(prepare):
        raise TypeError(f"{path}: no function prepare(local_rank) -> torch.device")
    return prepare(local_rank), path
