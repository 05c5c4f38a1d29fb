"""The cpu vendor's engine: ONNX Runtime with its CPUExecutionProvider.

Loaded by the inference driver (``benchmarks/driver/torch/inference.py``) by file path under
another module name, so ``import onnxruntime`` below finds the real package.

Configuration keys it reads:

* ``ort_threads``: intra-op threads (default: ONNX Runtime's own, one per physical core);
* ``exist_compiler_path``: an ORT-optimized model file, loaded when it exists, else written
  (``benchmarks/driver/ort_session.py``).

Its ``foo_time`` is 0.0: a run excludes no work (as upstream's onnxruntime-based ``macart``
engine); building the session is compile time, not inference time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort
import torch

from driver.ort_session import ONNX_DTYPES, session_source

PROVIDER = "CPUExecutionProvider"



class InferModel:
    """An ONNX Runtime session over ``onnx_path`` on the CPU.

    Args:
        config: the engine's configuration (module docstring).
        onnx_path: the ONNX model (dynamic batch axis).
        model: unused (the PyTorch model, or None with ``no_validation``).

    Raises:
        FileNotFoundError: neither the optimized file nor ``onnx_path`` exists.
        RuntimeError: the CPU provider is missing.
        Exception: what ONNX Runtime raises for a model it cannot load.
    """

    def __init__(self, config: Mapping[str, Any], onnx_path: Path | None,
                 model: torch.nn.Module | None) -> None:
        if PROVIDER not in ort.get_available_providers():
            raise RuntimeError(f"onnxruntime {ort.__version__} has no {PROVIDER}")
        options = ort.SessionOptions()
        source, loaded, compiled = session_source(config, onnx_path, options, ort)
        self.session = ort.InferenceSession(str(source), options, providers=[PROVIDER])
        self.inputs = [(arg.name, ONNX_DTYPES.get(arg.type)) for arg in self.session.get_inputs()]
        self.info = {"provider": PROVIDER, "onnxruntime": ort.__version__,
                     "model_file": str(source), "loaded_optimized": loaded,
                     "wrote_optimized": str(compiled) if compiled and not loaded else None,
                     "intra_op_threads": options.intra_op_num_threads or "default"}

    def __call__(self, inputs: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], float]:
        """Run one batch.

        Args:
            inputs: the model's positional inputs, batch first, in the ONNX inputs' order;
                each is cast to its ONNX input's type (e.g. fp16).

        Returns:
            (the ONNX outputs as CPU tensors, in order; foo_time 0.0 s).

        Raises:
            ValueError: not as many inputs as the ONNX model has.
        """
        if len(inputs) != len(self.inputs):
            raise ValueError(f"the ONNX model takes {len(self.inputs)} inputs "
                             f"({', '.join(name for name, _ in self.inputs)}), got {len(inputs)}")
        feed = {}
        for (name, dtype), tensor in zip(self.inputs, inputs):
            array = tensor.detach().cpu().numpy()
            feed[name] = array if dtype is None or array.dtype == dtype else array.astype(dtype)
        outputs = self.session.run(None, feed)
        return [torch.from_numpy(np.asarray(value)) for value in outputs], 0.0
