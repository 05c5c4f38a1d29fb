"""The cpu vendor's engine: ONNX Runtime with its CPUExecutionProvider.

Loaded by the inference driver (``benchmarks/driver/torch/inference.py``) by file path under
another module name, so ``import onnxruntime`` below finds the real package.

Configuration keys it reads:

* ``ort_threads``: intra-op threads (default: ONNX Runtime's own, one per physical core);
* ``exist_compiler_path``: an ORT-optimized model file (absolute; the driver resolves a relative
  one under the data folder). When the file exists, the session loads it with graph
  optimisations off, as they were applied when it was written; otherwise the session optimises
  the ONNX model and writes the result there (``SessionOptions.optimized_model_filepath``), so
  a later round skips the optimisation. At ONNX Runtime's default level (all optimisations)
  the file holds layout transforms for this host's CPU (ONNX Runtime warns so): keep it with
  the host that wrote it.

Its ``foo_time`` is 0.0: a run excludes no work (as upstream's onnxruntime-based ``macart``
engine); building the session is compile time, not inference time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort
import torch

PROVIDER = "CPUExecutionProvider"

#: ONNX tensor types (``NodeArg.type``) and the numpy dtype an input is cast to.
ONNX_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}


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
        threads = config.get("ort_threads")
        if threads:
            options.intra_op_num_threads = int(threads)
        compiled = config.get("exist_compiler_path")
        compiled = Path(compiled) if compiled else None
        if compiled is not None and compiled.is_file():
            source, loaded = compiled, True
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        else:
            if onnx_path is None or not Path(onnx_path).is_file():
                raise FileNotFoundError(f"onnxruntime needs an ONNX file: {onnx_path} does not "
                                        "exist")
            source, loaded = Path(onnx_path), False
            if compiled is not None:
                compiled.parent.mkdir(parents=True, exist_ok=True)
                options.optimized_model_filepath = str(compiled)
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
