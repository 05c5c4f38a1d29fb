"""The base cases' figures against independent measurements: the same work timed outside the
harness (plain ``time.perf_counter`` loops around ``torch.mm``, a copy of known size, a gloo
``all_reduce``), its figure computed here from the sizes and the published formulas (2MNK
FLOPs a product; a copy reads and writes its bytes; nccl-tests' busbw = algbw x 2(n-1)/n).

The harness runs the case's real entry point in its own process; the independent measurement
runs beside it, on the same machine, with the same sizes. Each figure must agree with its
independent value within ``TOLERANCE`` (the median of paired measurements, as a shared CPU's
timings wander): a FLOP or byte count off by two, or a timing window that misses the work or
adds other work to it, would not."""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from test_base_cases import BASE, finished, run_case

# The timings are paired with timings of the same work here: the cores must not be shared with
# the local run, which starts with the session.
pytestmark = pytest.mark.usefixtures("local_run_finished")


@pytest.fixture(scope="module", autouse=True)
def threads_of_a_fresh_process():
    """torch's intra-op threads as a fresh process has them (the harness's), set in this one for
    the independent timings: a case trained in this process earlier may have changed them."""
    probe = "import torch; print(torch.get_num_threads())"
    fresh = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                               check=True).stdout)
    before = torch.get_num_threads()
    torch.set_num_threads(fresh)
    yield fresh
    torch.set_num_threads(before)

#: The harness's figure over the independent one must lie within [1 / TOLERANCE, TOLERANCE].
TOLERANCE = 1.5
#: Paired measurements whose median ratio is judged.
PAIRS = 3


def seconds_of(call, warmup: int, iterations: int) -> float:
    """Seconds ``iterations`` calls of ``call`` take after ``warmup``, timed here (CPU tensors:
    the calls are synchronous)."""
    for _ in range(warmup):
        call()
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    return time.perf_counter() - start


def folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def agree(harness: list[float], independent: list[float]) -> float:
    """The median ratio of paired figures, asserted within the tolerance."""
    ratio = statistics.median(h / i for h, i in zip(harness, independent))
    assert 1 / TOLERANCE <= ratio <= TOLERANCE, (ratio, harness, independent)
    return ratio


def test_gemm_tflops_agree_with_a_torch_mm_timed_outside_the_harness(torchrun, tmp_path):
    m, n, k, iterations = 384, 512, 256, 40
    harness, independent = [], []
    a, b = torch.randn(m, k), torch.randn(k, n)
    for pair in range(PAIRS):
        done, output = run_case("computation", folder(tmp_path / str(pair)), m=m, n=n, k=k, warmup=2,
                                iterations={"fp32": iterations}, precisions=["fp32"])
        assert done.returncode == 0, done.stderr[-2000:]
        harness.append(finished(output)["tflops_fp32"])
        seconds = seconds_of(lambda: torch.mm(a, b), 2, iterations)
        independent.append(iterations * 2 * m * n * k / seconds / 1e12)
    print(f"fp32 GEMM {m}x{k}x{n}: harness/independent {agree(harness, independent):.3f}")


def test_memory_bandwidth_agrees_with_a_copy_of_known_size(torchrun, tmp_path):
    size_mib, iterations = 32, 20
    source = torch.rand(size_mib * 2 ** 20 // 4)
    target = torch.empty_like(source)
    harness, independent = [], []
    for pair in range(PAIRS):
        done, output = run_case("main_memory-bandwidth", folder(tmp_path / str(pair)),
                                size_mib=size_mib, warmup=2, iterations=iterations)
        assert done.returncode == 0, done.stderr[-2000:]
        harness.append(finished(output)["bandwidth"])
        # A copy into a buffer made once: it reads and writes size bytes, nothing else.
        seconds = seconds_of(lambda: target.copy_(source), 2, iterations)
        independent.append(iterations * 2 * size_mib * 2 ** 20 / seconds / 1e9)
    print(f"copy of {size_mib} MiB: harness/independent {agree(harness, independent):.3f}")


#: Two processes time all_reduce of each size themselves (gloo, float32 SUM) and rank 0
#: prints ``bytes seconds-per-iteration`` per size.
ALL_REDUCE = textwrap.dedent("""
    import sys, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    for size in map(int, sys.argv[1:]):
        tensor = torch.zeros(size // 4)
        for _ in range(3):
            dist.all_reduce(tensor)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(10):
            dist.all_reduce(tensor)
        dist.barrier()
        if dist.get_rank() == 0:
            print(size, (time.perf_counter() - start) / 10, flush=True)
    dist.destroy_process_group()
""")


def nccl_tests_busbw(size: int, seconds: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth (doc/PERFORMANCE.md): algbw = S / t, busbw =
    algbw x 2(n-1)/n, in GB/s."""
    return size / seconds / 1e9 * 2 * (ranks - 1) / ranks


def test_the_cases_bus_factor_is_nccl_tests():
    # doc/PERFORMANCE.md's all-reduce factor 2(n-1)/n at 2, 4 and 8 ranks.
    spec = importlib.util.spec_from_file_location(
        "all_reduce_case", BASE / "interconnect-all_reduce" / "pytorch" / "main.py")
    all_reduce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(all_reduce)
    assert [all_reduce.bus_factor(n) for n in (2, 4, 8)] == [1.0, 1.5, 1.75]
    assert nccl_tests_busbw(10 ** 9, 1.0, 8) == 1.75


def test_all_reduce_busbw_agrees_with_nccl_tests_formula_on_an_independent_timing(torchrun,
                                                                                 tmp_path):
    sizes = [1 << 20, 4 << 20, 16 << 20]
    done, output = run_case("interconnect-all_reduce", folder(tmp_path / "harness"), nproc=2,
                            min_bytes=sizes[0], max_bytes=sizes[-1], factor=4, warmup=3,
                            iterations=10)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["bytes"]: row for row in finished(output)["sweep"]}
    assert sorted(rows) == sizes
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    timed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            "--nproc_per_node", "2", str(script), *map(str, sizes)],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert timed.returncode == 0, timed.stderr[-2000:]
    seconds = {int(s): float(t) for s, t in (line.split() for line in timed.stdout.splitlines())}
    harness = [rows[size]["busbw"] for size in sizes]
    independent = [nccl_tests_busbw(size, seconds[size], 2) for size in sizes]
    print(f"all_reduce busbw, 2 ranks: harness/independent {agree(harness, independent):.3f}")
