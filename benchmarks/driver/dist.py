"""Distributed setup from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_info() -> DistInfo:
    """Rank, world size and local rank as set by torchrun (0, 1, 0 when run directly)."""
    return DistInfo(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


def init_distributed(backend: str) -> DistInfo:
    """Join the process group when the world size is above 1 (``gloo`` on CPU, ``nccl`` on GPU)."""
    info = dist_info()
    if info.world_size > 1:
        import torch.distributed as torch_dist

        torch_dist.init_process_group(backend=backend)
    return info


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    """Sum ``values`` over every rank (returns them unchanged in a single process)."""
    if info.world_size == 1:
        return list(values)
    import torch
    import torch.distributed as torch_dist

    tensor = torch.tensor(values, dtype=torch.float64)
    torch_dist.all_reduce(tensor)
    return tensor.tolist()


def shutdown(info: DistInfo, timeout_s: float = 60.0) -> bool:
    """Leave the process group and free it, waiting at most ``timeout_s`` seconds (no-op in a
    single process). Delete the case's ``DistributedDataParallel`` model first.

    The group is freed here, through this function's Python handle on it: that handle's
    destructor releases the GIL while gloo's ``~ProcessGroupGloo`` joins its worker threads.
    Were DDP's C++ Reducer its last holder instead (the model freed when ``main()`` returns), it
    would be freed with the GIL held, while a gloo worker may still need the GIL to drop the
    last collective's tensors: both wait for ever, and the rank never ends after FINISHED
    (py-spy: the main thread in ``~Reducer`` -> ``~ProcessGroupGloo``, a ``pt_gloo_runloop``
    thread in ``~AsyncAllreduceWork`` -> ``gil_scoped_acquire``). Should gloo workers outlive
    the handle (something else still holds the group), a line on stderr says so.

    Returns True once the group was left, False when that had not happened after
    ``timeout_s`` seconds: then the rank's thread stacks go to stderr and the caller goes on
    (to ``exit_rank``), so that a rank which wrote FINISHED cannot hold its node until the case
    timeout. Should the call block while holding the GIL, this function cannot regain control:
    ``faulthandler``'s watchdog (a C thread) then dumps the stacks after ``2 * timeout_s`` and
    ends the process with status 1. An exception from ``destroy_process_group`` is raised here.
    """
    if info.world_size == 1:
        return True
    import faulthandler
    import gc
    import threading

    import torch
    import torch.distributed as torch_dist

    left = threading.Event()
    errors: list[BaseException] = []
    # A new thread's current CUDA device is device 0, not the rank's.
    device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    def leave() -> None:
        try:
            if device is not None:
                torch.cuda.set_device(device)
            group = torch_dist.group.WORLD
            gc.collect()  # a DDP wrapper caught in a reference cycle goes now, not at exit
            torch_dist.destroy_process_group()
            del group  # the last reference: the group is freed here, the GIL released
        except BaseException as error:  # handed to the caller below
            errors.append(error)
        left.set()

    faulthandler.dump_traceback_later(2 * timeout_s, exit=True)
    try:
        threading.Thread(target=leave, name="destroy_process_group", daemon=True).start()
        if not left.wait(timeout_s):
            print(f"driver.dist: destroy_process_group did not return within {timeout_s:g} s; "
                  "the rank leaves without it. Its threads:", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            return False
    finally:
        faulthandler.cancel_dump_traceback_later()
    if errors:
        raise errors[0]
    if gloo_workers():
        print("driver.dist: gloo worker threads outlive the process group's handle: something "
              "still holds the group (a DistributedDataParallel model not deleted before "
              "shutdown?); it is freed later, maybe with the GIL held", file=sys.stderr, flush=True)
    return True


def gloo_workers() -> int:
    """The gloo worker threads (``pt_gloo_runloop``, one per thread of a gloo group) alive in this
    process: none once every gloo group is freed. Linux only (0 elsewhere)."""
    count = 0
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            count += comm.read_text().strip() == "pt_gloo_runloop"
        except OSError:  # the thread ended meanwhile
            pass
    return count


def exit_rank(status: int) -> NoReturn:
    """End the rank's process with ``status`` now, once its output is flushed.

    After the process group is destroyed, a rank can still hang at interpreter exit in native
    destructors (gloo's pairs, DDP's reducer) freed with the case's objects; torchrun then waits
    for it until the round's timeout although the rank wrote FINISHED. Everything the case
    writes is on stdout/stderr (PerfLog) or already closed, so skipping those destructors loses
    nothing. Call it only with the case's status, after ``main()`` returned: an exception
    still ends the process the normal way, with its traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
