"""ResNet-50 training to a top-1 target, one process per rank (launched by torchrun).

Writes PerfLog events to ``<output_dir>/rank<R>.out.log`` and ends with FINISHED carrying the
standard figures (see ``driver/finished.py``), ``final_acc1`` and ``target_acc1`` (top-1, %).
Exit status 0 when training ran to the end, converged or not; non-zero on an error.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # this case, then benchmarks/ (driver)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from driver import perflog  # noqa: E402
from driver.case_io import load_config, parse_case_args, redirect_rank_output  # noqa: E402
from driver.dist import (DistInfo, all_reduce_sum, dist_info, exit_rank, init_distributed,  # noqa: E402
                         shutdown)
from driver.finished import RoundClock  # noqa: E402
from image_folder import ImageFolder  # noqa: E402
from model import build_resnet50  # noqa: E402


def make_optimizer(model: torch.nn.Module, config: dict) -> torch.optim.Optimizer:
    """SGD with momentum; weight decay on weights only, not on BN parameters and biases."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return torch.optim.SGD(
        [{"params": decay, "weight_decay": float(config["weight_decay"])},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=float(config["learning_rate"]), momentum=float(config["momentum"]),
        nesterov=bool(config["nesterov"]),
    )


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warmup to the peak over ``warmup_steps``, then cosine decay to 0 at ``total_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def evaluate(model, loader, device, info: DistInfo, autocast) -> float:
    """Top-1 accuracy in % over the whole validation split (each rank scores its shard)."""
    model.eval()
    correct = total = 0
    with torch.no_grad(), autocast():
        for images, labels in loader:
            logits = model(pixel_values=images.to(device)).logits
            correct += int((logits.argmax(1).cpu() == labels).sum())
            total += len(labels)
    correct, total = all_reduce_sum([correct, total], info)
    model.train()
    return 100.0 * correct / max(total, 1)


def main() -> int:
    args = parse_case_args(__doc__.splitlines()[0])
    info = dist_info()
    redirect_rank_output(args.output_dir, info.rank)
    config = load_config(args.config)
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda", info.local_rank) if use_cuda else torch.device("cpu")
    clock = RoundClock(sync=torch.cuda.synchronize if use_cuda else None)
    log = perflog.PerfLogger(rank=info.rank)

    log.log(perflog.INIT_START)
    clock.mark_init_start()
    info = init_distributed(config["dist_backend"])
    seed = int(config["seed"]) + info.rank
    random.seed(seed)
    torch.manual_seed(int(config["seed"]))  # same initial weights on every rank
    if use_cuda:
        torch.cuda.set_device(device)

    data_dir = Path(args.data_dir)
    train_set = ImageFolder(data_dir / "train", config, train=True)
    val_set = ImageFolder(data_dir / "val", config, train=False)
    if info.world_size > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(
            train_set, num_replicas=info.world_size, rank=info.rank, shuffle=True,
            seed=int(config["seed"]), drop_last=True)
    else:
        sampler = torch.utils.data.RandomSampler(train_set)
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=int(config["train_batch_size"]), sampler=sampler,
        num_workers=int(config["num_workers"]), drop_last=True, pin_memory=use_cuda)
    val_shard = torch.utils.data.Subset(val_set, range(info.rank, len(val_set), info.world_size))
    val_loader = torch.utils.data.DataLoader(
        val_shard, batch_size=int(config["eval_batch_size"]), shuffle=False,
        num_workers=int(config["num_workers"]), pin_memory=use_cuda)

    model = build_resnet50(len(train_set.classes), bool(config["zero_init_residual"])).to(device)
    log.log(perflog.CONVERT_MODEL, {"model": "resnet50", "num_labels": len(train_set.classes)})
    optimizer = make_optimizer(model, config)
    log.log(perflog.CREATE_OPTIMIZER, {"optimizer": "sgd", "learning_rate": config["learning_rate"]})
    if info.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[info.local_rank] if use_cuda else None)
        log.log(perflog.MODEL_TO_DDP, {"world_size": info.world_size})
    amp = config["precision"] == "amp"
    if config["precision"] not in ("fp32", "amp"):
        raise SystemExit(f"precision {config['precision']!r}: expected fp32 or amp")

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp)

    steps_per_epoch = len(train_loader)
    total_steps = steps_per_epoch * int(config["epochs"])
    warmup_steps = max(1, round(steps_per_epoch * float(config["warmup_epochs"])))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, warmup_steps, total_steps))
    target = float(config["target_acc1"])
    log_freq = max(1, int(config["log_freq"]))
    clock.mark_init_end()
    log.log(perflog.INIT_END)

    log.log(perflog.TRAIN_START)
    clock.mark_train_start()
    model.train()
    step = samples = 0
    acc1 = 0.0
    converged = False
    for epoch in range(int(config["epochs"])):
        if isinstance(sampler, torch.utils.data.distributed.DistributedSampler):
            sampler.set_epoch(epoch)
        log.log(perflog.EPOCH_BEGIN, {"epoch": epoch + 1})
        for images, labels in train_loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with clock.compute():
                with autocast():
                    logits = model(pixel_values=images).logits
                    loss = F.cross_entropy(logits, labels,
                                           label_smoothing=float(config["label_smoothing"]))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            scheduler.step()
            step += 1
            samples += len(labels)
            if step % log_freq == 0:
                log.log(perflog.STEP_END, {
                    "epoch": epoch + 1, "global_steps": step, "loss": float(loss),
                    "learning_rate": scheduler.get_last_lr()[0],
                    "num_trained_samples": samples * info.world_size})
        with clock.evaluation():
            acc1 = evaluate(model, val_loader, device, info, autocast)
        log.log(perflog.EVALUATE, {"epoch": epoch + 1, "acc1": acc1})
        log.log(perflog.EPOCH_END, {"epoch": epoch + 1})
        converged = acc1 >= target
        if converged and config["stop_at_target"]:
            break
    clock.mark_train_end()
    log.log(perflog.TRAIN_END)

    (num_trained_samples,) = all_reduce_sum([samples], info)
    log.log(perflog.FINISHED, clock.finished(
        int(num_trained_samples), converged, final_acc1=acc1, target_acc1=target,
        epochs=epoch + 1, global_steps=step, world_size=info.world_size))
    # DDP's C++ Reducer holds the process group: left to main()'s return, it would free the
    # group with the GIL held, which can deadlock with gloo's threads (see driver.dist.shutdown).
    del model
    shutdown(info)
    return 0


if __name__ == "__main__":
    exit_rank(main())
