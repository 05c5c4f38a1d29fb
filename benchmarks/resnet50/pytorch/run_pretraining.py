"""ResNet-50 training to a top-1 target, one process per rank (launched by torchrun).

What is ResNet-50's here: the model (``model.py``), the ImageFolder data (``image_folder.py``),
SGD with momentum and its parameter groups, the warmup-cosine learning rate, and top-1 accuracy;
the loop, precision, distribution, vendor hooks and PerfLog are the driver's trainer
(``driver/torch/trainer.py``). Writes PerfLog events to ``<output_dir>/rank<R>.out.log`` and
ends with FINISHED carrying the standard figures (``driver/finished.py``), ``final_acc1`` and
``target_acc1`` (top-1, %). Exit status 0 when training ran to the end, converged or not;
non-zero on an error.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # this case, then benchmarks/ (driver)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from driver.convergence import Target  # noqa: E402
from driver.dist import exit_rank  # noqa: E402
from driver.torch.trainer import Trainer, TrainingCase, TrainingPlan  # noqa: E402
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


def warmup_cosine(optimizer: torch.optim.Optimizer, plan: TrainingPlan, warmup_epochs: float):
    """The per-update schedule: ``warmup_epochs`` of linear warmup, cosine to the planned end."""
    warmup_steps = max(1, round(plan.steps_per_epoch * warmup_epochs))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, warmup_steps, plan.total_steps))


def resnet50_case(config: dict, data_dir: Path) -> TrainingCase:
    train_set = ImageFolder(data_dir / "train", config, train=True)
    val_set = ImageFolder(data_dir / "val", config, train=False)
    num_labels = len(train_set.classes)

    def train_loss(model, batch):
        images, labels = batch
        logits = model(pixel_values=images).logits
        return F.cross_entropy(logits, labels, label_smoothing=float(config["label_smoothing"]))

    def correct_and_count(model, batch):
        images, labels = batch
        logits = model(pixel_values=images).logits
        return {"correct": int((logits.argmax(1) == labels).sum()), "count": len(labels)}

    return TrainingCase(
        train_set=train_set, val_set=val_set,
        build_model=lambda: build_resnet50(num_labels, bool(config["zero_init_residual"])),
        create_optimizer=lambda model, ctx: make_optimizer(model, config),
        train_loss=train_loss,
        eval_sum_names=("correct", "count"), eval_sums=correct_and_count,
        eval_metric=lambda sums: 100.0 * sums["correct"] / max(sums["count"], 1),
        target=Target("acc1", float(config["target_acc1"]), higher_is_better=True),
        create_scheduler=lambda optimizer, plan: warmup_cosine(
            optimizer, plan, float(config["warmup_epochs"])),
        model_info={"num_labels": num_labels},
    )


def main() -> int:
    trainer = Trainer.from_command_line(__doc__.splitlines()[0], model="resnet50")
    return trainer.fit(resnet50_case(trainer.config, trainer.data_dir))


if __name__ == "__main__":
    exit_rank(main())
