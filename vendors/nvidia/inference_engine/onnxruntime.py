"""The nvidia vendor's ONNX Runtime engine: the CUDAExecutionProvider (the ``onnxruntime-gpu``
package), inputs and outputs bound to CUDA memory (``IOBinding``), so no host copy is timed.

Loaded by the inference driver (``benchmarks/driver/torch/inference.py``) by file path under
another module name, so ``import onnxruntime`` below finds the real package.

Configuration keys it reads:

* ``ort_threads``: intra-op threads for the nodes left on the CPU (default: ONNX Runtime's);
* ``exist_compiler_path``: an ORT-optimized model file: loaded (optimisations off) when it
  exists, else written there by the session's optimisation
  (``SessionOptions.optimized_model_filepath``), so a later round skips it. It is optimised for
  this GPU and provider: keep it with the host that wrote it.

Its ``foo_time`` is 0.0 (as upstream's onnxruntime-based ``macart`` engine).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort
import torch

from driver.ort_session import ONNX_DTYPES, session_source

PROVIDER = "CUDAExecutionProvider"

#: torch dtypes and the numpy element type IOBinding is told (bf16 has none in numpy).
NUMPY_TYPES = {
    torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
    torch.uint8: np.uint8, torch.bool: np.bool_,
}


class InferModel:
    """An ONNX Runtime session over ``onnx_path`` on the current CUDA device.

    Args:
        config: the engine's configuration (module docstring).
        onnx_path: the ONNX model (dynamic batch axis).
        model: unused (the PyTorch model, or None with ``no_validation``).

    Raises:
        RuntimeError: this onnxruntime has no CUDAExecutionProvider (the CPU-only
            ``onnxruntime`` package), the session did not take it (e.g. a CUDA or cuDNN
            library missing: ONNX Runtime would silently run on the CPU), or torch sees no GPU.
        FileNotFoundError: neither the optimized file nor ``onnx_path`` exists.
    """

    def __init__(self, config: Mapping[str, Any], onnx_path: Path | None,
                 model: torch.nn.Module | None) -> None:
        available = ort.get_available_providers()
        if PROVIDER not in available:
            raise RuntimeError(f"onnxruntime {ort.__version__} has no {PROVIDER} (it has "
                               f"{', '.join(available)}): install onnxruntime-gpu, not "
                               "onnxruntime, in the vendor's image")
        if not torch.cuda.is_available():
            raise RuntimeError("onnxruntime on CUDA: torch sees no CUDA device")
        options = ort.SessionOptions()
        source, loaded, compiled = session_source(config, onnx_path, options, ort)
        self.device_id = torch.cuda.current_device()
        self.session = ort.InferenceSession(
            str(source), options,
            providers=[(PROVIDER, {"device_id": self.device_id}), "CPUExecutionProvider"])
        if PROVIDER not in self.session.get_providers():
            raise RuntimeError(f"onnxruntime did not start its {PROVIDER} (session providers: "
                               f"{', '.join(self.session.get_providers())}); see its warnings "
                               "above for the missing CUDA library")
        self.inputs = [(arg.name, ONNX_DTYPES.get(arg.type)) for arg in self.session.get_inputs()]
        self.outputs = [arg.name for arg in self.session.get_outputs()]
        self.info = {"provider": PROVIDER, "onnxruntime": ort.__version__,
                     "model_file": str(source), "loaded_optimized": loaded,
                     "wrote_optimized": str(compiled) if compiled and not loaded else None,
                     "device_id": self.device_id}

    def __call__(self, inputs: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], float]:
        """Run one batch.

        Args:
            inputs: the model's positional inputs, batch first, in the ONNX inputs' order (on
                the GPU, or copied there); each is cast to its ONNX input's type.

        Returns:
            (the ONNX outputs as CUDA tensors when DLPack hands them over, else CPU tensors;
            foo_time 0.0 s).

        Raises:
            ValueError: not as many inputs as the ONNX model has.
        """
        if len(inputs) != len(self.inputs):
            raise ValueError(f"the ONNX model takes {len(self.inputs)} inputs "
                             f"({', '.join(name for name, _ in self.inputs)}), got {len(inputs)}")
        binding = self.session.io_binding()
        bound = []  # held until the run ends: ONNX Runtime reads their memory
        for (name, dtype), tensor in zip(self.inputs, inputs):
            tensor = tensor.to(device=f"cuda:{self.device_id}", dtype=dtype or tensor.dtype)
            tensor = tensor.contiguous()
            bound.append(tensor)
            binding.bind_input(name, "cuda", self.device_id, NUMPY_TYPES[tensor.dtype],
                               tuple(tensor.shape), tensor.data_ptr())
        for name in self.outputs:
            binding.bind_output(name, "cuda", self.device_id)
        # ONNX Runtime runs on its own stream: torch's copies and casts must be done first.
        torch.cuda.current_stream().synchronize()
        self.session.run_with_iobinding(binding)
        values = binding.get_outputs()
        try:
            outputs = [torch.from_dlpack(value) for value in values]
        except (AttributeError, TypeError, RuntimeError, BufferError):
            outputs = [torch.from_numpy(array) for array in binding.copy_outputs_to_cpu()]
        return outputs, 0.0
