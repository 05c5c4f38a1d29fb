"""megatron-core on host CPUs: the cpu vendor's adapter for every megatron case
(``driver.megatron.device``).

megatron-core asks CUDA for its device in a few places: ``torch.cuda.current_device()`` for
buffers, ``device="cuda"`` in the pipeline schedules and gradient norms, the model-parallel
RNG tracker (``torch.cuda.get_rng_state``), ``torch.cuda.synchronize`` around pipeline sends,
and an assertion that gradients are ``torch.cuda.FloatTensor`` before clipping. As Ascend's
``torch_npu`` maps ``torch.cuda`` onto its NPU, ``prepare`` maps these onto the CPU. It changes
nothing where CUDA exists: the nvidia path runs megatron-core unpatched.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch

#: The tensor factories megatron-core calls with ``device="cuda"``.
FACTORIES = ("zeros", "ones", "empty", "full", "tensor", "arange", "zeros_like", "ones_like",
             "empty_like", "rand", "randn", "randint")


def _on_cpu(factory: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    @functools.wraps(factory)
    def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            kwargs["device"] = "cpu"
        return factory(*args, **kwargs)
    return wrapper


class CpuRngTracker:
    """The model-parallel RNG tracker on CPU: one generator for every region. Dropout inside
    tensor-parallel regions then draws from torch's default generator, seeded alike on every
    rank (megatron-core's tracker keeps a CUDA generator per region)."""

    def reset(self) -> None:
        pass

    def get_states(self) -> dict[str, Any]:
        return {}

    def set_states(self, states: dict[str, Any]) -> None:
        pass

    def add(self, name: str, seed: int) -> None:
        pass

    def is_initialized(self) -> bool:
        return True

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
        yield


def _clip_on_cpu(parameters: Any, max_norm: float, total_norm: float,
                 use_decoupled_grad: bool = False) -> None:
    """megatron-core's ``clip_grad_by_total_norm_fp32`` without its CUDA assertion: the
    gradients times ``max_norm / (total_norm + 1e-6)`` where that is below 1."""
    attribute = "decoupled_grad" if use_decoupled_grad else "grad"
    grads = [getattr(p, attribute).detach() for p in parameters
             if getattr(p, attribute, None) is not None]
    coefficient = max_norm / (total_norm + 1.0e-6)
    if coefficient < 1.0 and grads:
        torch._foreach_mul_(grads, coefficient)


def prepare(local_rank: int) -> torch.device:
    """Map megatron-core's CUDA calls onto the CPU (before megatron-core is imported) and
    return the CPU device; where CUDA exists, change nothing and return CUDA ``local_rank``."""
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    for name in FACTORIES:
        setattr(torch, name, _on_cpu(getattr(torch, name)))
    import megatron.core.optimizer.optimizer as optimizer
    import megatron.core.tensor_parallel.random as random

    random._CUDA_RNG_STATE_TRACKER = CpuRngTracker()
    random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    optimizer.clip_grad_by_total_norm_fp32 = _clip_on_cpu
    return torch.device("cpu")
