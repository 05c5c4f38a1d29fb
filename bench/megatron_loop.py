#!/usr/bin/env python3
"""The megatron cases' harness against a plain megatron-core loop of the same model and batch,
in one run; and the plain loop's loss curve, the cpu profiles' reference.

    python bench/megatron_loop.py [--case gpt] [--repeat 3] [--steps N]
    python bench/megatron_loop.py --case gpt --reference benchmarks/gpt/megatron/reference/cpu.json

The plain loop is what a user of megatron-core writes: the parallel state, ``GPTModel`` from
the case's cpu profile (``driver.megatron.model``), megatron-core's DDP, optimizer and
learning-rate schedule, the pipeline schedule, and the same samples (``driver.megatron.data``),
with nothing around it: no PerfLog, no clock, no per-step reduction of the loss beyond the one
it needs to print it. Both run under torchrun with one process on the cpu vendor's adapter.

The first form runs the case's round (``python -m driver.run``, FINISHED ``p_train``) and the
plain loop ``--repeat`` times each, alternately, and prints each one's tokens/s over the steps
after the profile's ``speed_warmup_steps``, their medians and the ratio harness / plain (the
goal is 0.98 or more). Figures only: nothing is asserted. The second writes the plain loop's
curve over the profile's ``train_iters`` steps to the file named. The cores are shared with
whatever else runs on the machine (its load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def profile_config(case: str, steps: int | None) -> dict:
    """The effective configuration of the case's cpu round at 1x1, as the controller makes it
    (``cases.effective_config``: the standard parameters, the cpu profile, the cpu vendor's
    overrides), without the reference curve."""
    from flagperf_ansible.config.cases import effective_config, load_case
    from flagperf_ansible.config.casespec import parse_case_spec

    config = effective_config(ROOT, load_case(ROOT, case, "megatron"),
                              parse_case_spec(f"{case}:megatron:cpu:1:1:1"), "cpu").config
    config["reference_curve"] = None
    if steps:
        # megatron-core's schedule needs its warm-up shorter than its decay.
        config.update(train_iters=steps, lr_decay_iters=steps,
                      lr_warmup_iters=min(int(config["lr_warmup_iters"]), steps // 2))
    return config


def plain_loop(config_path: str, data_dir: str, curve_path: str) -> None:
    """One process of the plain loop (under torchrun): train and write ``{steps, loss,
    tokens_per_second}`` to ``curve_path``."""
    sys.path[:0] = [str(ROOT / "benchmarks")]
    import torch
    import torch.distributed as dist

    from driver.megatron.data import TokenWindows
    from driver.megatron.device import prepare_device
    from driver.megatron.model import build_gpt, transformer_config

    config = yaml.safe_load(Path(config_path).read_text())
    device, _ = prepare_device("plain", 0)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.distributed import (DistributedDataParallel,
                                           DistributedDataParallelConfig, finalize_model_grads)
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.pipeline_parallel import get_forward_backward_func

    parallel_state.initialize_model_parallel(1, 1)
    torch.manual_seed(int(config["seed"]))
    transformer = transformer_config(config, on_cpu=True)
    model = DistributedDataParallel(
        config=transformer, module=build_gpt(config, transformer, pre_process=True,
                                             post_process=True),
        ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True))
    optimizer = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=config["lr"], min_lr=config["min_lr"],
        weight_decay=config["weight_decay"], adam_beta1=config["adam_beta1"],
        adam_beta2=config["adam_beta2"], adam_eps=config["adam_eps"],
        clip_grad=config["clip_grad"]), [model])
    transformer.finalize_model_grads_func = finalize_model_grads
    steps = int(config["train_iters"])
    scheduler = OptimizerParamScheduler(
        optimizer, 0.0, config["lr"], config["min_lr"], config["lr_warmup_iters"],
        config["lr_decay_iters"] or steps, config["lr_decay_style"], config["weight_decay"],
        config["weight_decay"], steps, "constant")
    seq, micro = int(config["seq_length"]), int(config["micro_batch_size"])
    global_batch = int(config.get("global_batch_size") or micro)
    windows = TokenWindows(Path(data_dir) / config["data_prefix"], seq, int(config["seed"]))
    positions = torch.arange(seq).unsqueeze(0).expand(micro, -1)

    def forward_step(batches, model):
        batch = next(batches)
        output = model(batch[:, :-1].contiguous(), positions, None,
                       labels=batch[:, 1:].contiguous())
        return output, lambda out: (out.float().mean(), {"lm loss": out.float().mean().detach()})

    forward_backward = get_forward_backward_func()
    warmup = int(config["speed_warmup_steps"])
    losses = []
    for step in range(1, steps + 1):
        if step == warmup + 1:
            began = time.perf_counter()
        batches = windows.micro_batches(step, global_batch, micro, 0, 1)
        model.zero_grad_buffer()
        optimizer.zero_grad()
        out = forward_backward(forward_step_func=forward_step, data_iterator=iter(batches),
                               model=model, num_microbatches=len(batches), seq_length=seq,
                               micro_batch_size=micro, forward_only=False)
        optimizer.step()
        scheduler.step(increment=1)
        losses.append(sum(float(x["lm loss"]) for x in out) / len(out))
    seconds = time.perf_counter() - began
    Path(curve_path).write_text(json.dumps({
        "steps": list(range(1, steps + 1)), "loss": losses,
        "tokens_per_second": (steps - warmup) * global_batch * seq / seconds}))
    dist.destroy_process_group()


def torchrun(argv: list[str]) -> None:
    env = {**os.environ, "FLAGPERF_VENDOR_DIR": str(ROOT / "vendors" / "cpu"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), str(ROOT / "src")])}
    # --standalone: a free port for the rendezvous, so runs side by side do not collide.
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc_per_node", "1", *argv], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL)


def harness(case: str, config: Path, data_dir: str, out: Path) -> float:
    """The case's round under torchrun: FINISHED p_train (tokens/s)."""
    torchrun(["-m", "driver.run", "--case", str(ROOT / "benchmarks" / case / "megatron"),
              "--config", str(config), "--output_dir", str(out), "--data_dir", data_dir])
    for line in (out / "rank0.out.log").read_text().splitlines():
        if line.startswith("[PerfLog]") and '"FINISHED"' in line:
            return float(json.loads(line.split(" ", 1)[1])["value"]["p_train"])
    raise SystemExit(f"{out}/rank0.out.log: no FINISHED")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="gpt", choices=["gpt", "llama3_8b"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, help="steps per run (default: the profile's)")
    parser.add_argument("--data_dir", default=str(ROOT / "data" / "megatron_indexed"))
    parser.add_argument("--reference", type=Path, help="write the plain loop's curve here")
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "CURVE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        plain_loop(args.worker[0], args.data_dir, args.worker[1])
        return 0
    with tempfile.TemporaryDirectory(prefix="megatron-loop-") as tmp:
        work = Path(tmp)
        config = profile_config(args.case, args.steps)
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        plain_args = [__file__, "--data_dir", args.data_dir, "--worker", str(work / "config.yaml"),
                      str(work / "curve.json")]
        if args.reference:
            torchrun(plain_args)
            curve = json.loads((work / "curve.json").read_text())
            args.reference.write_text(json.dumps({
                "source": f"bench/megatron_loop.py --case {args.case} --reference: the plain "
                          "megatron-core loop of the cpu profile (seed "
                          f"{config['seed']}, 1 process, fp32)",
                "steps": curve["steps"], "loss": [round(x, 6) for x in curve["loss"]]},
                indent=1) + "\n")
            print(f"wrote {args.reference}: {len(curve['loss'])} steps, loss "
                  f"{curve['loss'][0]:.4f} -> {curve['loss'][-1]:.4f}")
            return 0
        figures: dict[str, list[float]] = {"harness": [], "plain": []}
        for index in range(args.repeat):
            figures["harness"].append(harness(args.case, work / "config.yaml", args.data_dir,
                                              work / f"round{index}"))
            torchrun(plain_args)
            figures["plain"].append(json.loads((work / "curve.json").read_text())
                                    ["tokens_per_second"])
        print(f"case {args.case} cpu profile, {config['train_iters']} steps "
              f"({config['speed_warmup_steps']} left out), load average "
              f"{os.getloadavg()[0]:.2f}")
        for name, values in figures.items():
            print(f"{name:8s} tokens/s: " + ", ".join(f"{v:.0f}" for v in values)
                  + f"; median {statistics.median(values):.0f}")
        ratio = statistics.median(figures["harness"]) / statistics.median(figures["plain"])
        print(f"harness / plain: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
