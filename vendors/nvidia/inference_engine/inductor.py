"""The nvidia vendor's TorchInductor engine: ``torch.compile`` of the case's PyTorch model
(upstream's ``inference/inference_engine/nvidia/inductor.py``); no ONNX file is used.

Configuration keys it reads (upstream's names; its misspelt ``dynamo_wamrup_*`` are accepted):

* ``dynamo_mode``: ``torch.compile``'s ``mode`` (default: torch's, ``"default"``; upstream's
  LLM cases use ``"reduce-overhead"``);
* ``dynamo_dynamic``: ``torch.compile``'s ``dynamic`` (default: torch's, None);
* ``dynamo_warmup_iters``: how many first calls warm up (default 1);
* ``dynamo_warmup_times``: forwards per warm-up (default 1).

``foo_time`` (s): a warm-up call's time spent in its warm-up forwards (compilation included),
as upstream; 0.0 on the other calls. The driver's own warm-up call on the first batch
(``driver.torch.inference.warm_up``, in ``compile_time``) is the first call, so the timed loop
neither compiles nor has foo_time; the driver reports foo_time and does not subtract it. A
batch of a new size (a data set's last, smaller one) compiles again within its call, unless
``dynamo_dynamic`` is true.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch
import torch._dynamo


def _setting(config: Mapping[str, Any], key: str, default: Any) -> Any:
    for name in (key, key.replace("warmup", "wamrup")):  # upstream's spelling
        if config.get(name) is not None:
            return config[name]
    return default


def _synchronize(inputs: tuple) -> None:
    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs):
        torch.cuda.synchronize()


class InferModel:
    """``torch.compile(model)``; compilation happens on the first call (the warm-up). It reads
    no ONNX file (``READS_ONNX``): the driver exports none for it.

    Args:
        config: the engine's configuration (module docstring).
        onnx_path: unused.
        model: the case's model in eval mode, on its device.

    Raises:
        RuntimeError: no model (``no_validation`` skips creating it).
    """

    READS_ONNX = False

    def __init__(self, config: Mapping[str, Any], onnx_path: Path | None,
                 model: torch.nn.Module | None) -> None:
        if model is None:
            raise RuntimeError("inductor compiles the PyTorch model, which no_validation does "
                               "not create: set no_validation false")
        torch._dynamo.reset()  # no guards or caches from an earlier compile
        mode = config.get("dynamo_mode")
        dynamic = config.get("dynamo_dynamic")
        self.model = torch.compile(model, mode=mode, dynamic=dynamic)
        self.warmup_left = int(_setting(config, "dynamo_warmup_iters", 1))
        self.warmup_times = int(_setting(config, "dynamo_warmup_times", 1))
        self.info = {"torch": torch.__version__, "dynamo_mode": mode or "default",
                     "dynamo_dynamic": dynamic, "warmup_iters": self.warmup_left,
                     "warmup_times": self.warmup_times}

    def __call__(self, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, float]:
        """Run one batch: ``model(*inputs)`` compiled, after the warm-up forwards while any
        are left.

        Returns:
            (the model's outputs; foo_time: this call's warm-up time in s, else 0.0).
        """
        foo_time = 0.0
        with torch.no_grad():
            if self.warmup_left > 0:
                self.warmup_left -= 1
                _synchronize(inputs)
                start = time.perf_counter()
                for _ in range(self.warmup_times):
                    self.model(*inputs)
                _synchronize(inputs)
                foo_time = time.perf_counter() - start
            outputs = self.model(*inputs)
        return outputs, foo_time
