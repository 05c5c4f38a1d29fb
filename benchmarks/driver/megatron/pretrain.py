"""LLM pretraining for a fixed number of steps with megatron-core: the driver of the
``megatron`` cases (``gpt``, ``llama3_8b``), launched by torchrun.

megatron-core builds the model (``driver.megatron.model``), the tensor, pipeline and data
parallel groups (``parallel_state.initialize_model_parallel``), the pipeline schedule
(``get_forward_backward_func``), the data-parallel gradient reduction
(``megatron.core.distributed.DistributedDataParallel``), the optimizer (Adam with decoupled
weight decay, gradient clipping, loss scaling in fp16: ``get_megatron_optimizer``) and the
learning-rate schedule (``OptimizerParamScheduler``), as Megatron-LM's ``pretrain_gpt.py``
does. The vendor's adapter runs first (``driver.megatron.device``).

Configuration keys (Megatron-LM's argument names): the model's (``driver.megatron.model``);
``tensor_model_parallel_size``, ``pipeline_model_parallel_size`` (the data-parallel size is
the rest of the world), ``micro_batch_size`` (sequences per rank and micro-batch),
``global_batch_size`` (sequences per step; micro-batches per step = global / (micro x data
parallel); null: one micro-batch per data-parallel rank), ``train_iters``, ``lr``, ``min_lr``,
``lr_warmup_iters``, ``lr_decay_style``, ``lr_decay_iters``, ``weight_decay``, ``adam_beta1``, ``adam_beta2``, ``adam_eps``,
``clip_grad``, ``precision``, ``initial_loss_scale``, ``use_distributed_optimizer``,
``seed``, ``data_prefix`` (under the data folder), ``dist_backend``, ``log_interval``; and the
harness's own:

* ``layout_independent_init``: every pipeline stage starts from the weights of the one-stage
  model (``skip_earlier_stages``), so one reference curve holds across layouts (cpu profiles);
* ``speed_warmup_steps``: the first steps, left out of every speed figure (the first steps
  grow the allocator's pools, set up the communicators and, on GPUs, tune kernels);
  TRAIN_START opens after them;
* ``reference_curve`` (a file of the case folder, or null), ``loss_curve_from_step`` and
  ``target_loss_curve_error``: upstream's pass rule (``driver.megatron.loss_curve``).

Every step writes a STEP_END event (``step``, ``loss``, ``lr``, ``grad_norm``,
``step_time_ms``) and, every ``log_interval`` steps, Megatron-LM's own log line. FINISHED
adds to the standard figures (``driver.finished``; p_whole, p_train, p_core in tokens/s over
all chips, after the warm-up): ``tokens_per_chip_per_second`` (FlagPerf's token/p/s),
``num_trained_tokens``, ``train_iters``, ``steps_run``, ``warmup_steps``, ``world_size``,
``final_loss``, ``peak_memory_gib`` (the largest over the ranks: CUDA's peak allocation, or the
process's peak resident memory on the CPU, as ``peak_memory_source`` says) and, where the
configuration has a reference curve, ``final_loss_curve_error`` with its
``target_loss_curve_error``. ``loss_curve.json`` in the output folder holds every step's loss.
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import time
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.distributed as dist

from driver import perflog
from driver.dist import dist_info, shutdown
from driver.megatron import loss_curve
from driver.megatron.data import TokenWindows
from driver.megatron.device import prepare_device
from driver.megatron.model import build_gpt, parameter_count, transformer_config
from driver.run import Case
from driver.training_loop import start_case
from flagperf_host.parallel_layout import Layout


def _join_group(backend: str, world: int) -> None:
    """Join the process group; a single process joins a group of one (megatron-core's
    parallel state needs a group)."""
    if dist.is_initialized():
        return
    if world == 1:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group(backend)


def skip_earlier_stages(config: Mapping[str, Any], transformer: Any, layout: Layout) -> None:
    """Draw, and drop, the weights of the pipeline stages before this one, so that this stage's
    weights are those the one-stage model draws from the same seed (megatron-core builds each
    stage from the seed afresh). A reference curve then holds across pipeline layouts. The
    earlier stages' weights are built on this rank for a moment: for the cpu profiles' small
    models (``layout_independent_init``), not a standard configuration's."""
    from megatron.core import parallel_state

    stage = parallel_state.get_pipeline_model_parallel_rank()
    if stage == 0:
        return
    before = stage * int(config["num_layers"]) // layout.pipeline
    # megatron-core builds num_layers / pipeline layers per stage; untied, the embedding's
    # set-up has no collective with the last stage.
    earlier = dataclasses.replace(transformer, num_layers=before * layout.pipeline)
    build_gpt({**config, "untie_embeddings_and_output_weights": True}, earlier,
              pre_process=True, post_process=False)


def build_training(config: Mapping[str, Any], layout: Layout, device: torch.device
                   ) -> tuple[Any, Any, Any, int]:
    """megatron-core's parallel state, this rank's model (its stage, wrapped for fp16 or bf16
    and in megatron-core's DDP), optimizer and learning-rate schedule, as Megatron-LM's
    ``pretrain_gpt.py`` sets them up; and the rank's parameter count."""
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.distributed import (DistributedDataParallel,
                                           DistributedDataParallelConfig, finalize_model_grads)
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.transformer.module import Float16Module

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=layout.tensor, pipeline_model_parallel_size=layout.pipeline)
    seed = int(config.get("seed", 1234))
    torch.manual_seed(seed)
    if device.type == "cuda":
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
    transformer = transformer_config(config, on_cpu=device.type == "cpu")
    if config.get("layout_independent_init"):
        skip_earlier_stages(config, transformer, layout)
    model = build_gpt(config, transformer, pre_process=parallel_state.is_pipeline_first_stage(),
                      post_process=parallel_state.is_pipeline_last_stage()).to(device)
    parameters = parameter_count(model)
    if transformer.fp16 or transformer.bf16:
        model = Float16Module(transformer, model)
    # The distributed optimizer shards its states over the data-parallel ranks (ZeRO-1).
    sharded = bool(config.get("use_distributed_optimizer"))
    model = DistributedDataParallel(
        config=transformer, module=model,
        ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                                 overlap_grad_reduce=False,
                                                 use_distributed_optimizer=sharded))
    optimizer = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=float(config["lr"]), min_lr=float(config["min_lr"]),
        weight_decay=float(config["weight_decay"]), adam_beta1=float(config["adam_beta1"]),
        adam_beta2=float(config["adam_beta2"]), adam_eps=float(config["adam_eps"]),
        clip_grad=float(config["clip_grad"]), fp16=transformer.fp16, bf16=transformer.bf16,
        params_dtype=transformer.params_dtype, use_distributed_optimizer=sharded,
        initial_loss_scale=float(config.get("initial_loss_scale") or 2**32)), [model])
    steps = int(config["train_iters"])
    scheduler = OptimizerParamScheduler(
        optimizer, init_lr=0.0, max_lr=float(config["lr"]), min_lr=float(config["min_lr"]),
        lr_warmup_steps=int(config["lr_warmup_iters"]),
        lr_decay_steps=int(config.get("lr_decay_iters") or steps),
        lr_decay_style=str(config["lr_decay_style"]), start_wd=float(config["weight_decay"]),
        end_wd=float(config["weight_decay"]), wd_incr_steps=steps, wd_incr_style="constant")
    # As Megatron-LM's training loop: the schedule scales the loss (fp16) and, after the last
    # micro-batch, reduces the gradients over the data-parallel ranks and sums the tied
    # embedding's over the first and last pipeline stages.
    transformer.grad_scale_func = optimizer.scale_loss
    transformer.finalize_model_grads_func = finalize_model_grads
    return model, optimizer, scheduler, parameters


def _peak_memory_gib(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30, "device"
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "host resident memory"


def _world_reduce(values: list[float], device: torch.device, op: Any) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def megatron_line(step: int, steps: int, global_batch: int, elapsed_ms: float, lr: float,
                  loss: float, grad_norm: float | None, loss_scale: float, skipped: int,
                  nan: int) -> str:
    """Megatron-LM's training log line (``training.py: training_log``), which upstream
    FlagPerf's LLM cases parse for "elapsed time per iteration (ms)"."""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    norm = "" if grad_norm is None else f" grad norm: {grad_norm:.3f} |"
    return (f" [{stamp}] iteration {step:8d}/{steps:8d} | consumed samples: "
            f"{step * global_batch:12d} | elapsed time per iteration (ms): {elapsed_ms:.1f} | "
            f"learning rate: {lr:.6E} | global batch size: {global_batch:5d} | lm loss: "
            f"{loss:.6E} | loss scale: {loss_scale:.1f} |{norm} number of skipped iterations: "
            f"{skipped:3d} | number of nan iterations: {nan:3d} |")


def run(case: Case) -> int:
    """Train the case's model for ``train_iters`` steps; 0 when every step ran."""
    start = start_case(case.description)
    config, log, clock = start.config, start.log, start.clock
    layout = Layout.of(config, start.world_size)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device, adapter = prepare_device(case.name, local_rank)
    _join_group(str(config.get("dist_backend") or ("nccl" if device.type == "cuda" else "gloo")),
                start.world_size)

    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    model, optimizer, scheduler, parameters = build_training(config, layout, device)
    log.log(perflog.CONVERT_MODEL, {"parameters_on_rank": parameters,
                                    "adapter": str(adapter) if adapter else None})
    log.log(perflog.CREATE_OPTIMIZER, {"optimizer": type(optimizer).__name__})
    steps = int(config["train_iters"])

    seq = int(config["seq_length"])
    windows = TokenWindows(start.data_dir / str(config["data_prefix"]), seq,
                           int(config.get("seed", 1234)))
    largest = windows.max_token()
    if largest >= int(config["vocab_size"]):
        raise ValueError(f"{config['data_prefix']}: token id {largest} is outside vocab_size "
                         f"{config['vocab_size']}")
    reference = None
    if config.get("reference_curve"):
        reference = loss_curve.read_curve(case.directory / str(config["reference_curve"]))
    warmup = int(config.get("speed_warmup_steps", 0))
    if not 0 <= warmup < steps:
        raise ValueError(f"speed_warmup_steps {warmup} leaves no measured step of {steps}")
    dp_rank = parallel_state.get_data_parallel_rank()
    reports = parallel_state.is_pipeline_last_stage() \
        and parallel_state.get_tensor_model_parallel_rank() == 0
    positions = torch.arange(seq, device=device).unsqueeze(0).expand(layout.micro_batch, -1)

    def forward_step(batches: Any, model: torch.nn.Module) -> tuple[torch.Tensor, Any]:
        batch = next(batches).to(device)
        output = model(batch[:, :-1].contiguous(), positions, None,
                       labels=batch[:, 1:].contiguous())

        def loss_func(per_token: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss = per_token.float().mean()
            # A copy: the schedule divides the returned loss by the micro-batches in place.
            return loss, {"lm loss": loss.detach().clone()}
        return output, loss_func

    forward_backward = get_forward_backward_func()
    clock.mark_init_end()
    log.log(perflog.INIT_END, {"parameters_on_rank": parameters,
                               "layout": layout.__dict__, "device": str(device)})
    curve: dict[int, float] = {}
    interval = int(config.get("log_interval", 10))
    skipped = nan = 0
    for step in range(1, steps + 1):
        if step == warmup + 1:
            clock.mark_train_start()
            log.log(perflog.TRAIN_START)
        batches = windows.micro_batches(step, layout.global_batch, layout.micro_batch, dp_rank,
                                        layout.data)
        began = time.perf_counter()
        with clock.compute() if step > warmup else nullcontext():
            model.zero_grad_buffer()
            optimizer.zero_grad()
            losses = forward_backward(
                forward_step_func=forward_step, data_iterator=iter(batches), model=model,
                num_microbatches=layout.micro_batches, seq_length=seq,
                micro_batch_size=layout.micro_batch, forward_only=False)
            updated, grad_norm, _ = optimizer.step()
            scheduler.step(increment=1)
        elapsed_ms = (time.perf_counter() - began) * 1000
        mean = sum(float(x["lm loss"]) for x in losses) / len(losses) if reports else 0.0
        # The loss is the last stage's: its mean over the data-parallel ranks reaches all.
        loss = _world_reduce([mean / layout.data if reports else 0.0], device, dist.ReduceOp.SUM)[0]
        curve[step] = loss
        lr = optimizer.param_groups[0]["lr"]
        log.log(perflog.STEP_END, {"step": step, "loss": loss, "lr": lr,
                                   "grad_norm": grad_norm, "step_time_ms": elapsed_ms})
        # As Megatron-LM counts them over each log interval: updates the fp16 loss scaler
        # skipped (an overflow), and steps whose loss is not finite.
        skipped += not updated
        nan += not math.isfinite(loss)
        if start.rank == 0 and (step % interval == 0 or step == steps):
            print(megatron_line(step, steps, layout.global_batch, elapsed_ms, lr, loss,
                                grad_norm, float(optimizer.get_loss_scale()), skipped, nan),
                  flush=True)
            skipped = nan = 0
        if not math.isfinite(loss):
            break
    steps_run = step if math.isfinite(curve[step]) else step - 1
    clock.mark_train_end()
    log.log(perflog.TRAIN_END)

    measured = max(steps_run - warmup, 0)
    tokens = measured * layout.global_batch * seq
    peak, source = _peak_memory_gib(device)
    peak = _world_reduce([peak], device, dist.ReduceOp.MAX)[0]
    results: dict[str, Any] = {
        "train_iters": steps, "steps_run": steps_run, "warmup_steps": warmup,
        "world_size": layout.world, "final_loss": curve[steps_run] if steps_run else None,
        "peak_memory_gib": peak, "peak_memory_source": source,
    }
    error = None
    if reference is not None and steps_run == steps:
        error = loss_curve.mean_relative_error(curve, reference,
                                               int(config["loss_curve_from_step"]))
        results.update(final_loss_curve_error=error,
                       target_loss_curve_error=float(config["target_loss_curve_error"]))
    ran_all = steps_run == steps
    converged = ran_all and (error is None or error <= float(config["target_loss_curve_error"]))
    figures = clock.finished(measured * layout.global_batch, converged,
                             units=("tokens", tokens), **results)
    figures["tokens_per_chip_per_second"] = figures["p_train"] / layout.world
    if start.rank == 0:
        loss_curve.write_curve(Path(start.args.output_dir) / "loss_curve.json", list(curve),
                               list(curve.values()), case=case.name, layout=layout.__dict__)
    log.log(perflog.FINISHED, figures)
    del model, optimizer
    parallel_state.destroy_model_parallel()
    if layout.world == 1:
        dist.destroy_process_group()
    else:
        shutdown(dist_info())
    return 0 if ran_all else 1
