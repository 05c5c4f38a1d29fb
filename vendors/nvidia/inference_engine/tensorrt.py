"""The nvidia vendor's TensorRT engine, built in Python with the ``tensorrt`` API (upstream runs
``trtexec`` and pycuda; here ``trt.Builder`` and ``trt.OnnxParser`` build it, and torch CUDA
tensors hold its inputs and outputs on torch's current stream).

Loaded by the inference driver (``benchmarks/driver/torch/inference.py``) by file path under
another module name, so ``import tensorrt`` below finds the real package.

Configuration keys it reads:

* ``fp16``: allow fp16 kernels (``BuilderFlag.FP16``, upstream's ``trtexec --fp16``);
* ``batch_size``: the optimisation profile of a dynamic batch axis is min 1, opt and max
  ``batch_size`` (upstream's ``--minShapes/--optShapes/--maxShapes``);
* ``exist_compiler_path``: the serialized engine: loaded when the file exists, otherwise the
  built engine is saved there; unset, it is saved as ``<output_dir>/<onnx name>[_fp16].engine``;
* ``trt_workspace_gib``: the builder's workspace limit (default: TensorRT's, the GPU's memory).

Its ``foo_time`` is 0 (as upstream's).

Raises ``RuntimeError`` on import where ``tensorrt`` is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

try:
    import tensorrt as trt
except ImportError:
    raise RuntimeError("tensorrt is not installed in this environment (NVIDIA's tensorrt wheel "
                       "downloads its libraries from NVIDIA's index at install time); install "
                       "it in the vendor's image") from None


def torch_dtype(dtype: "trt.DataType") -> torch.dtype:
    """The torch dtype of a TensorRT tensor type (through numpy's, ``trt.nptype``; bf16 apart).

    Raises:
        TypeError: a type torch has no equivalent for.
    """
    if dtype == getattr(trt.DataType, "BF16", None):
        return torch.bfloat16
    try:
        return torch.from_numpy(np.empty(0, dtype=trt.nptype(dtype))).dtype
    except TypeError as error:
        raise TypeError(f"TensorRT type {dtype} has no torch equivalent") from error


class InferModel:
    """A TensorRT engine built from ``onnx_path`` (or loaded), run on the current CUDA device.

    Args:
        config: the engine's configuration (module docstring).
        onnx_path: the ONNX model; only its batch axis (the first) may be dynamic.
        model: unused.

    Raises:
        RuntimeError: no CUDA device, the ONNX file does not parse, an input has a dynamic axis
            other than the batch, or the build fails.
        FileNotFoundError: neither the engine file nor ``onnx_path`` exists.
    """

    def __init__(self, config: Mapping[str, Any], onnx_path: Path | None,
                 model: torch.nn.Module | None) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("tensorrt: torch sees no CUDA device")
        self.logger = trt.Logger(trt.Logger.WARNING)
        trt.init_libnvinfer_plugins(self.logger, "")
        self.runtime = trt.Runtime(self.logger)
        fp16 = bool(config.get("fp16"))
        plan = config.get("exist_compiler_path")
        if plan:
            plan = Path(plan)
        else:
            if onnx_path is None:
                raise FileNotFoundError("tensorrt needs an ONNX file or exist_compiler_path")
            suffix = "_fp16" if fp16 else ""
            plan = Path(config["output_dir"]) / f"{Path(onnx_path).stem}{suffix}.engine"
        loaded = plan.is_file()
        if loaded:
            serialized = plan.read_bytes()
        else:
            serialized = self._build(config, onnx_path, fp16)
            plan.parent.mkdir(parents=True, exist_ok=True)
            plan.write_bytes(serialized)
        self.engine = self.runtime.deserialize_cuda_engine(serialized)
        if self.engine is None:
            raise RuntimeError(f"tensorrt could not deserialize the engine {plan} (built by "
                               "another TensorRT version or GPU?)")
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names
                            if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if n not in self.input_names]
        self.dtypes = {n: torch_dtype(self.engine.get_tensor_dtype(n)) for n in names}
        self.info = {"tensorrt": trt.__version__, "engine_file": str(plan),
                     "loaded_engine": loaded, "fp16": fp16}

    def _build(self, config: Mapping[str, Any], onnx_path: Path | None, fp16: bool) -> bytes:
        if onnx_path is None or not Path(onnx_path).is_file():
            raise FileNotFoundError(f"tensorrt needs an ONNX file: {onnx_path} does not exist")
        builder = trt.Builder(self.logger)
        flags = 0
        if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # TensorRT < 10
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"tensorrt could not parse {onnx_path}: {errors}")
        build_config = builder.create_builder_config()
        if fp16:
            build_config.set_flag(trt.BuilderFlag.FP16)
        workspace = config.get("trt_workspace_gib")
        if workspace:
            build_config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE,
                                               int(float(workspace) * 2**30))
        batch_size = int(config["batch_size"])
        profile = None
        for i in range(network.num_inputs):
            tensor = network.get_input(i)
            shape = tuple(tensor.shape)
            if -1 not in shape:
                continue
            if -1 in shape[1:]:
                raise RuntimeError(f"tensorrt: input {tensor.name} {shape} has a dynamic axis "
                                   "other than the batch; export it with fixed sizes")
            profile = profile or builder.create_optimization_profile()
            rest = shape[1:]
            profile.set_shape(tensor.name, (1, *rest), (batch_size, *rest), (batch_size, *rest))
        if profile is not None:
            build_config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, build_config)
        if serialized is None:
            raise RuntimeError(f"tensorrt could not build an engine from {onnx_path} (see its "
                               "errors above)")
        return bytes(serialized)

    def __call__(self, inputs: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], float]:
        """Run one batch on torch's current CUDA stream.

        Args:
            inputs: the model's positional inputs, batch first (at most ``batch_size``), in
                the engine's input order; each is cast to its input's type.

        Returns:
            (the outputs as CUDA tensors, in the engine's order; foo_time 0).

        Raises:
            ValueError: not as many inputs as the engine has.
            RuntimeError: TensorRT refused a shape or the run.
        """
        if len(inputs) != len(self.input_names):
            raise ValueError(f"the engine takes {len(self.input_names)} inputs "
                             f"({', '.join(self.input_names)}), got {len(inputs)}")
        bound = []  # referenced while enqueued; torch reuses the memory in this stream's order
        for name, tensor in zip(self.input_names, inputs):
            tensor = tensor.to(device="cuda", dtype=self.dtypes[name]).contiguous()
            bound.append(tensor)
            if not self.context.set_input_shape(name, tuple(tensor.shape)):
                raise RuntimeError(f"tensorrt: input {name} does not take shape "
                                   f"{tuple(tensor.shape)}")
            self.context.set_tensor_address(name, tensor.data_ptr())
        outputs = []
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            output = torch.empty(shape, dtype=self.dtypes[name], device="cuda")
            self.context.set_tensor_address(name, output.data_ptr())
            outputs.append(output)
        if not self.context.execute_async_v3(torch.cuda.current_stream().cuda_stream):
            raise RuntimeError("tensorrt: execute_async_v3 failed (see its errors above)")
        return outputs, 0
