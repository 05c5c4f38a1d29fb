"""benchmarks/driver/dist.py: a rank leaves its process group, and a rank whose leaving blocks
still ends, with its stacks on stderr, instead of holding its node until the case timeout."""

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_rank(body: str, tmp_path: Path, *launcher: str) -> subprocess.CompletedProcess:
    """Run ``body`` after ``from driver.dist import *`` (directly, or under ``launcher``)."""
    script = tmp_path / "rank.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(BENCHMARKS)!r})\n"
                      "from driver.dist import *\n" + body)
    return subprocess.run([sys.executable, *launcher, str(script)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)


def test_two_gloo_ranks_reduce_then_leave_their_group(tmp_path):
    # Each rank reports in its own file (on the shared stdout, two lines can interleave).
    done = run_rank(
        "import pathlib\n"
        "info = init_distributed('gloo')\n"
        "total = all_reduce_sum([info.rank + 1.0], info)\n"
        "left = shutdown(info)\n"
        "pathlib.Path(f'rank{info.rank}.txt').write_text(f'total {total[0]:g} left {left}')\n"
        "exit_rank(0)\n",
        tmp_path, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}.txt").read_text() == "total 3 left True"


# The hangs below stand in for destroy_process_group blocking on a peer or at its teardown,
# which cannot be brought about on demand; the rank's code path is the real one.
def leave_with(name: str, body: str, timeout_s: float,
               tmp_path: Path) -> subprocess.CompletedProcess:
    """Rank 0 of 2 leaving with a function ``name`` running ``body`` in place of
    destroy_process_group (its name shows in the stacks): prints ``left <shutdown's result>``,
    then exits 0."""
    return run_rank(
        f"import ctypes, time, torch.distributed\ndef {name}():\n    {body}\n"
        f"torch.distributed.destroy_process_group = {name}\n"
        "info = DistInfo(rank=0, world_size=2, local_rank=0)\n"
        f"print('left', shutdown(info, timeout_s={timeout_s}), flush=True)\n"
        "exit_rank(0)\n", tmp_path)


def test_a_blocked_leave_is_given_up_after_the_timeout_with_the_stacks_on_stderr(tmp_path):
    # Not given up, the stand-in's 600 s would run into run_rank's 120 s limit.
    done = leave_with("blocked_on_a_peer", "time.sleep(600)", 2, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "left False"
    assert "did not return within 2 s" in done.stderr
    assert "blocked_on_a_peer" in done.stderr


def test_a_leave_blocked_with_the_gil_held_ends_the_rank_with_status_1(tmp_path):
    """ctypes.PyDLL calls C with the GIL held: the waiting thread cannot run, the watchdog can."""
    done = leave_with("blocked_holding_the_gil", "ctypes.PyDLL(None).sleep(600)", 1, tmp_path)
    assert done.returncode == 1
    assert "left" not in done.stdout
    assert "Timeout (0:00:02)!" in done.stderr
    assert "blocked_holding_the_gil" in done.stderr


def test_an_error_from_leaving_is_raised(tmp_path):
    done = leave_with("fails", "raise ValueError('Invalid process group specified')", 30, tmp_path)
    assert done.returncode == 1
    assert "ValueError: Invalid process group specified" in done.stderr
