#!/usr/bin/env python3
"""A plain PyTorch training loop of the resnet50 case's model, batch and precision, with none of
the platform around it: what ``scripts/gpu_check.py`` sets the trainer's p_core beside (their
ratio is the harness's perturbation).

    python3 scripts/plain_loop.py --config CONFIG.yaml --classes N --steps S --output OUT.json
                                  [--data DIR]

From the case's effective configuration (``--config``, YAML) it takes ``train_batch_size``,
``train_crop_size``, ``precision`` (fp32; amp or bf16: autocast to bfloat16; fp16: autocast
with a gradient scaler, as the trainer), ``learning_rate``, ``momentum``, ``nesterov``,
``weight_decay``, ``label_smoothing`` and ``zero_init_residual``; the model is torchvision's
``resnet50`` with ``--classes`` outputs, the optimizer SGD, the loss cross-entropy.

The data: with ``--data`` (an ImageNet-layout folder), the round's own path: the case's
training set (``driver.torch.classification``: ImageFolder, its transforms) through a
DataLoader built as the trainer builds it (random sampler, whole batches, ``num_workers``
bounded by the host's cores as ``driver.torch.trainer.loader_workers`` bounds it and kept
across epochs, pinned memory on a GPU, copies to the device without blocking), so that the
ratio of the two measures the harness alone, not two data paths. Without it, one batch of
random images ``[batch, 3, crop, crop]`` and labels stays on the device: no data loading.

Timing as the trainer's ``RoundClock.compute`` times it (``benchmarks/driver/finished.py``):
each step (forward, backward, optimizer step, gradients zeroed) between two device syncs, from
the first step on (no warm-up left out, as in the trainer), summed into ``pure_compute_time``;
``p_core = steps x batch / pure_compute_time`` (images/s). ``wall_time`` runs from the first
step's start to the last step's sync. In steady state, as the trainer's FINISHED has it
(``driver.finished``): ``core_step_ms_p50``, the median step after the first
``core_warmup_steps`` (``STEADY_SKIP``, at most half the steps). The device is CUDA device 0
where torch sees one, else the CPU (``--device`` chooses).

Writes ``--output``: ``{steps, batch_size, samples, pure_compute_time, p_core, wall_time,
core_step_ms_p50, core_warmup_steps, data, precision, crop, classes, device, device_name,
torch}`` (s, images/s, ms). Exit 0, or 1 with one line on stderr (a configuration key
missing, no data folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torchvision
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from driver.finished import STEADY_SKIP  # noqa: E402

#: ``precision`` -> the dtype autocast runs in (None: fp32), as the trainer's AUTOCAST_DTYPES.
AUTOCAST = {"fp32": None, "amp": torch.bfloat16, "bf16": torch.bfloat16, "fp16": torch.float16}


def case_batches(config: dict, data: Path, steps: int, device: torch.device):
    """``steps`` training batches ``(images, labels)`` on ``device``, read as the round reads
    them (module docstring), over as many epochs as it takes."""
    from driver.torch.classification import classification_case
    from driver.torch.trainer import loader_workers, to_device

    case = classification_case(config, data, build_model=lambda classes: None)
    loader = torch.utils.data.DataLoader(
        case.train_set, batch_size=int(config["train_batch_size"]),
        sampler=torch.utils.data.RandomSampler(case.train_set),
        num_workers=loader_workers(int(config.get("num_workers") or 0), 1), drop_last=True,
        pin_memory=device.type != "cpu", collate_fn=case.collate_fn,
        persistent_workers=int(config.get("num_workers") or 0) > 0)
    given = 0
    while given < steps:
        for batch in loader:
            yield to_device(batch, device)
            given += 1
            if given == steps:
                return


def train(config: dict, classes: int, steps: int, device: torch.device,
          data: Path | None = None) -> dict:
    """Run ``steps`` updates and time them (module docstring); ``data`` the ImageNet-layout
    folder to read, or None for one batch kept on the device.

    Raises:
        KeyError: a configuration key is missing; ValueError: an unknown precision.
    """
    batch, crop = int(config["train_batch_size"]), int(config["train_crop_size"])
    precision = str(config.get("precision") or "fp32")
    if precision not in AUTOCAST:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(AUTOCAST)}")
    dtype = AUTOCAST[precision]
    torch.manual_seed(int(config.get("seed") or 0))
    model = torchvision.models.resnet50(
        num_classes=classes, zero_init_residual=bool(config.get("zero_init_residual"))).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["learning_rate"]),
                                momentum=float(config["momentum"]),
                                nesterov=bool(config.get("nesterov")),
                                weight_decay=float(config["weight_decay"]))
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    smoothing = float(config.get("label_smoothing") or 0.0)
    if data is None:
        images = torch.randn(batch, 3, crop, crop, device=device)
        labels = torch.randint(0, classes, (batch,), device=device)
        batches = ((images, labels) for _ in range(steps))
    else:
        batches = case_batches(config, data, steps, device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    model.train()
    windows: list[float] = []
    sync()
    first = time.perf_counter()
    for images, labels in batches:
        sync()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(images), labels,
                                                     label_smoothing=smoothing)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        sync()
        windows.append(time.perf_counter() - start)
    wall = time.perf_counter() - first
    compute = sum(windows)
    skip = min(STEADY_SKIP, len(windows) // 2)
    return {"steps": len(windows), "batch_size": batch, "samples": len(windows) * batch,
            "pure_compute_time": compute, "p_core": len(windows) * batch / compute,
            "wall_time": wall, "core_step_ms_p50": statistics.median(windows[skip:]) * 1e3,
            "core_warmup_steps": skip,
            "data": "on-device batch" if data is None else "the case's DataLoader",
            "precision": precision, "crop": crop, "classes": classes, "device": str(device),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else "cpu"),
            "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--classes", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None,
                        help="ImageNet-layout folder read as the round reads it")
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    config = yaml.safe_load(args.config.read_text())
    try:
        result = train(config, args.classes, args.steps, torch.device(args.device, 0)
                       if args.device == "cuda" else torch.device("cpu"), args.data)
    except (KeyError, ValueError, FileNotFoundError) as error:
        print(f"plain loop: {args.config}: {error}", file=sys.stderr)
        return 1
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
