"""What the onnxruntime engines of every vendor share (``vendors/*/inference_engine/
onnxruntime.py``): the numpy type of each ONNX input type, and which model file a session loads.

``exist_compiler_path`` names an ORT-optimized model file (absolute; the inference driver
resolves a relative one under the data folder). When it exists, the session loads it with graph
optimisations off, as they were applied when it was written; otherwise the session optimises the
ONNX model and writes the result there (``SessionOptions.optimized_model_filepath``), so a later
round skips the optimisation. At ONNX Runtime's default level the file holds layout transforms
for the host that wrote it (ONNX Runtime warns so): keep it with that host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

#: ONNX tensor types (``NodeArg.type``) and the numpy dtype an input is cast to.
ONNX_DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}


def session_source(config: Mapping[str, Any], onnx_path: Path | None, options: Any,
                   ort: Any) -> tuple[Path, bool, Path | None]:
    """Set ``options`` (an ``onnxruntime.SessionOptions``) from ``config`` (``ort_threads``:
    intra-op threads; ``exist_compiler_path``: see the module docstring) and say what to load.

    Returns:
        ``(model file, loaded an optimized file, the optimized file or None)``.

    Raises:
        FileNotFoundError: neither the optimized file nor ``onnx_path`` exists.
    """
    threads = config.get("ort_threads")
    if threads:
        options.intra_op_num_threads = int(threads)
    compiled = config.get("exist_compiler_path")
    compiled = Path(compiled) if compiled else None
    if compiled is not None and compiled.is_file():
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return compiled, True, compiled
    if onnx_path is None or not Path(onnx_path).is_file():
        raise FileNotFoundError(f"onnxruntime needs an ONNX file: {onnx_path} does not exist")
    if compiled is not None:
        compiled.parent.mkdir(parents=True, exist_ok=True)
        options.optimized_model_filepath = str(compiled)
    return Path(onnx_path), False, compiled
