"""A vendor's hooks into the trainer, FlagPerf's ``trainer_adapter`` functions, and their
defaults.

A vendor adapts a case in ``vendors/<vendor>/<model>-pytorch/extern/adapter.py``: a plain module
defining any of the functions below; the trainer uses the default for each one it does not
define. The vendor folder comes from the environment variable ``FLAGPERF_VENDOR_DIR`` (the
absolute path of ``vendors/<vendor>/`` where the case runs, set by the launch); unset or empty,
every hook is the default. The adapter may import modules beside it: the launch puts its folder
on ``PYTHONPATH``, after ``benchmarks/`` (flagperf_ansible.config.launchers.case_path).

Hooks (``ctx`` is a :class:`RankContext`):

* ``device(local_rank) -> torch.device``: where this rank trains (default: CUDA device
  ``local_rank`` when CUDA is available, else the CPU);
* ``synchronize(device) -> None``: wait for the device's queued work, so timings charge each
  kernel to its phase (default: ``torch.<device type>.synchronize`` where that exists);
* ``convert_model(model, ctx) -> model``: e.g. swap in fused layers (default: unchanged);
* ``create_optimizer(model, ctx) -> Optimizer``: the same algorithm as the case's (its type is
  fixed by the case), e.g. a fused implementation (default: the case's own);
* ``model_to_fp16(model, ctx) -> model``: run only when ``ctx.precision`` is not fp32 (default:
  unchanged; the trainer autocasts);
* ``model_to_ddp(model, ctx) -> model``: run only with more than one rank (default:
  ``DistributedDataParallel`` on the rank's device);
* ``backward(loss=, optimizer=, scaler=, update=, ctx=) -> None``: gradients of ``loss``, then,
  when ``update``, the optimizer step and zeroed gradients (default: with ``scaler``, a
  ``torch.amp.GradScaler`` in fp16, scaled backward, ``scaler.step`` and ``scaler.update``;
  with config ``clip_grad_norm``, the gradients' total L2 norm clipped to it before the step).
  Gradient accumulation is the trainer's: ``loss`` is already divided by the number of
  micro-batches, and ``update`` is true on the last of them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from driver.dist import DistInfo

HOOKS = ("device", "synchronize", "convert_model", "create_optimizer", "model_to_fp16",
         "model_to_ddp", "backward")
VENDOR_DIR_ENV = "FLAGPERF_VENDOR_DIR"
FRAMEWORK = "pytorch"


@dataclass(frozen=True)
class RankContext:
    """What a hook may need to know of the rank: the case's effective configuration, the
    device, the distributed layout and the precision (``fp32``, ``amp``/``bf16``, ``fp16``)."""

    config: Mapping[str, Any]
    device: torch.device
    dist: DistInfo
    precision: str


def default_device(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def default_synchronize(device: torch.device) -> None:
    if device.type == "cpu":
        return
    backend = getattr(torch, device.type, None)
    sync = getattr(backend, "synchronize", None)
    if sync is not None:
        sync(device)


def default_convert_model(model: torch.nn.Module, ctx: RankContext) -> torch.nn.Module:
    return model


def default_model_to_fp16(model: torch.nn.Module, ctx: RankContext) -> torch.nn.Module:
    return model


def default_model_to_ddp(model: torch.nn.Module, ctx: RankContext) -> torch.nn.Module:
    device_ids = None if ctx.device.type == "cpu" else [ctx.device]
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def _clip(optimizer: torch.optim.Optimizer, max_norm: float) -> None:
    if max_norm:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, max_norm)


def default_backward(*, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                     scaler: torch.amp.GradScaler | None, update: bool,
                     ctx: RankContext) -> None:
    max_norm = float(ctx.config.get("clip_grad_norm") or 0.0)
    if scaler is None:
        loss.backward()
        if update:
            _clip(optimizer, max_norm)
            optimizer.step()
    else:
        scaler.scale(loss).backward()
        if update:
            if max_norm:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            _clip(optimizer, max_norm)
            scaler.step(optimizer)
            scaler.update()
    if update:
        optimizer.zero_grad(set_to_none=True)


@dataclass(frozen=True)
class VendorHooks:
    """The hooks in force for one case, ``vendor`` naming those the vendor's adapter defined
    (``create_optimizer`` is None when neither the vendor nor the caller gave one)."""

    device: Callable[[int], torch.device] = default_device
    synchronize: Callable[[torch.device], None] = default_synchronize
    convert_model: Callable[..., torch.nn.Module] = default_convert_model
    create_optimizer: Callable[..., torch.optim.Optimizer] | None = None
    model_to_fp16: Callable[..., torch.nn.Module] = default_model_to_fp16
    model_to_ddp: Callable[..., torch.nn.Module] = default_model_to_ddp
    backward: Callable[..., None] = default_backward
    vendor: frozenset[str] = field(default_factory=frozenset)
    adapter: Path | None = None

    def source(self, hook: str) -> str:
        """``"vendor"`` or ``"default"``: who supplied ``hook`` (written in its PerfLog event)."""
        return "vendor" if hook in self.vendor else "default"


def adapter_path(model: str, vendor_dir: str | os.PathLike | None,
                 framework: str = FRAMEWORK) -> Path | None:
    """``<vendor_dir>/<model>-<framework>/extern/adapter.py``, or None without a vendor
    folder."""
    if not vendor_dir:
        return None
    return Path(vendor_dir) / f"{model}-{framework}" / "extern" / "adapter.py"


def import_adapter(path: Path, name: str) -> Any:
    """The adapter module at ``path``, imported as ``name`` and kept in ``sys.modules`` (so
    that its functions pickle, e.g. to loader workers).

    Raises:
        Exception: whatever importing the adapter raises.
    """
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def load_vendor_hooks(model: str, vendor_dir: str | os.PathLike | None = None,
                      ) -> VendorHooks:
    """The hooks for ``model``: the vendor's adapter's functions over the defaults.

    Args:
        model: the case's model name (``resnet50``), as in the vendor's ``<model>-pytorch``.
        vendor_dir: the vendor's folder; default ``$FLAGPERF_VENDOR_DIR`` (none when unset).

    Raises:
        FileNotFoundError: ``vendor_dir`` is given but is not a folder.
        TypeError: the adapter defines a hook's name as something that is not callable.
        Exception: whatever importing the adapter raises.
    """
    if vendor_dir is None:
        vendor_dir = os.environ.get(VENDOR_DIR_ENV) or None
    path = adapter_path(model, vendor_dir)
    if path is None:
        return VendorHooks()
    if not Path(vendor_dir).is_dir():
        raise FileNotFoundError(f"{VENDOR_DIR_ENV}={vendor_dir}: no such vendor folder")
    if not path.is_file():
        return VendorHooks()
    module = import_adapter(path, f"flagperf_vendor_adapter_{model}")
    found = {}
    for name in HOOKS:
        hook = getattr(module, name, None)
        if hook is None:
            continue
        if not callable(hook):
            raise TypeError(f"{path}: {name} is a {type(hook).__name__}, not a function")
        found[name] = hook
    return VendorHooks(**found, vendor=frozenset(found), adapter=path)
