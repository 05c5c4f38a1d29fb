"""Base case computation: dense GEMM throughput per precision (torch.mm; int8 torch._int_mm).

TFLOP/s (TOP/s for int8) = iterations x 2MNK / time / 1e12, for an (M, K) x (K, N) product
(upstream FlagPerf base/benchmarks/computation-<precision>/main.py). fp32 runs with TF32 off,
tf32 with it on (CUDA only). Every rank measures its own device.

Configuration: ``m``, ``n``, ``k``, ``warmup``, ``iterations`` (a count, or a count per
precision), ``precisions`` (a subset of fp64, fp32, tf32, fp16, bf16, int8).
"""

from __future__ import annotations

import torch

from driver.dist import exit_rank
from driver.torch.microbench import BenchContext, CaseError, Measured, run_base_case

#: precision -> (FINISHED metric, dtype).
PRECISIONS = {
    "fp64": ("tflops_fp64", torch.float64), "fp32": ("tflops_fp32", torch.float32),
    "tf32": ("tflops_tf32", torch.float32), "fp16": ("tflops_fp16", torch.float16),
    "bf16": ("tflops_bf16", torch.bfloat16), "int8": ("tops_int8", torch.int8),
}


def set_tf32(enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def gemm(precision: str, m: int, n: int, k: int, device: torch.device):
    """The timed call for ``precision``: ``a @ b`` with a (m, k), b (k, n)."""
    dtype = PRECISIONS[precision][1]
    if precision == "int8":
        a = torch.randint(-128, 128, (m, k), dtype=dtype, device=device)
        b = torch.randint(-128, 128, (k, n), dtype=dtype, device=device)
        return lambda: torch._int_mm(a, b)  # int32 out
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    return lambda: torch.mm(a, b)


def measure(ctx: BenchContext) -> Measured:
    m, n, k = ctx.param("m"), ctx.param("n"), ctx.param("k")
    warmup = ctx.param("warmup")
    wanted = ctx.param("precisions", list)
    unknown = [p for p in wanted if p not in PRECISIONS]
    if unknown:
        raise CaseError(f"{ctx.config_path}: precisions: {unknown} not among {list(PRECISIONS)}")
    iterations = ctx.param("iterations", lambda v: v if isinstance(v, dict) else int(v))
    figures, not_measured = {}, {}
    for precision, (metric, _) in PRECISIONS.items():
        if precision not in wanted:
            not_measured[metric] = "not in this configuration's precisions"
            continue
        if precision == "tf32" and ctx.device.type != "cuda":
            not_measured[metric] = (f"TF32 is a tensor-core mode of NVIDIA GPUs; on "
                                    f"{ctx.device.type} torch.mm computes fp32")
            continue
        if precision == "int8" and (m <= 16 or n % 8 or k % 8):
            raise CaseError(f"{ctx.config_path}: m, n, k: torch._int_mm needs m > 16 and n, k "
                            f"multiples of 8 (got {m}, {n}, {k})")
        count = iterations.get(precision) if isinstance(iterations, dict) else iterations
        if not isinstance(count, int) or count < 1:
            raise CaseError(f"{ctx.config_path}: iterations: {precision}: expected a count")
        set_tf32(precision == "tf32")
        try:
            seconds = ctx.timed(gemm(precision, m, n, k, ctx.device), warmup, count)
        except RuntimeError as error:
            if precision != "int8":
                raise
            # torch._int_mm has kernels for CPU and CUDA (sm >= 7.5) only.
            not_measured[metric] = (f"torch._int_mm does not run on {ctx.device.type}: "
                                    + str(error).splitlines()[0])
            continue
        finally:
            set_tf32(False)
        figures[metric] = count * 2 * m * n * k / seconds / 1e12
    return figures, not_measured, []


if __name__ == "__main__":
    exit_rank(run_base_case(__doc__.splitlines()[0], measure))
