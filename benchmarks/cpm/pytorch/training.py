"""CPM-1 medium continued on CPM-1-Finetune's STC dialogues to an embedding-average target
(FlagPerf cpm).

The model, its checkpoint mapping, loss and metric are ``model.py``; tokenizer and data
``cpm_data.py``; the loop is ``driver/torch/trainer.py``. What differs from FlagPerf's run, by
design: ``fp16`` is autocast with a ``GradScaler`` (FlagPerf: apex-style FP16_Module with fp32
master weights and a dynamic loss scale from 4096), the optimizer is torch's AdamW with the
config's betas (FlagPerf's nvidia adapter builds apex FusedAdam without them, so its betas are
(0.9, 0.999)), no evaluation before training, and the validation metric is the mean over all
validation samples (FlagPerf: the mean of per-batch means over whole batches).
"""

import math
from collections import Counter


import torch

from driver.convergence import Target
from driver.torch.trainer import Trainer, TrainingCase

from .cpm_data import load_datasets
from .model import build_model, embedding_average_scores, lm_loss

DECAY_STYLES = ("linear", "cosine", "exponential", "constant", "none")


def annealing_factor(step: int, warmup_iter: float, end_iter: int, style: str) -> float:
    """FlagPerf's ``AnnealingLR`` (schedulers/learning_rates.py, from Megatron-LM) as a factor
    of the peak learning rate before update ``step + 1`` (``step`` updates done): linear warmup
    from 0 over ``warmup_iter`` updates, then ``linear``: ``max(1 - (step - warmup_iter) /
    end_iter, 0)`` (so 4000 updates with 800 of warmup end at 0.2, as upstream), ``cosine``:
    ``(cos(pi (step - warmup_iter) / end_iter) + 1) / 2``, otherwise constant 1.

    Raises:
        ValueError: an unknown ``style``.
    """
    style = str(style).lower()
    if style not in DECAY_STYLES:
        raise ValueError(f"config lr_decay_style: {style!r}, expected one of "
                         + ", ".join(DECAY_STYLES))
    if warmup_iter > 0 and step <= warmup_iter:
        return step / warmup_iter
    if style == "linear":
        return max(1.0 - (step - warmup_iter) / end_iter, 0.0)
    if style == "cosine":
        return (math.cos(math.pi * (step - warmup_iter) / end_iter) + 1.0) / 2.0
    return 1.0


def create_scheduler(config, optimizer, plan):
    """``AnnealingLR`` over ``lr_decay_iters`` updates (default: the planned updates, as
    upstream's ``max_steps``) with ``warmup_steps`` of warmup, or ``warmup`` x those updates."""
    end_iter = max(1, int(config.get("lr_decay_iters") or plan.total_steps))
    warmup_iter = (float(config.get("warmup_steps") or 0)
                   or float(config.get("warmup") or 0.0) * end_iter)
    style = str(config.get("lr_decay_style") or "linear")
    annealing_factor(0, warmup_iter, end_iter, style)  # an unknown style fails at init
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: annealing_factor(step, warmup_iter, end_iter, style))


def create_optimizer(config, model):
    """AdamW (``learning_rate``, ``beta_1``, ``beta_2``, ``eps``) with ``weight_decay_rate``
    on all but LayerNorm parameters and biases (upstream's
    ``gpt2_get_params_for_weight_decay_optimization``: the 1-D parameters here)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim > 1],
               "weight_decay": float(config["weight_decay_rate"])},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=float(config["learning_rate"]),
                             betas=(float(config["beta_1"]), float(config["beta_2"])),
                             eps=float(config["eps"]))


def word_embeddings(model: torch.nn.Module) -> torch.Tensor:
    """The model's (tied) word embedding ``[V, h]``, through a DDP wrapper."""
    return getattr(model, "module", model).get_input_embeddings().weight


def label_counts(dataset) -> Counter:
    """How often each token is a label (``<pad>`` excluded) in ``dataset``'s samples."""
    return Counter(token for sample in dataset.samples for token in sample[1:]
                   if token != dataset.pad_id)


def unigram_loss(train_counts: Counter, dataset, vocab_size: int) -> float:
    """The token cross-entropy (nats) over ``dataset``'s labels of the training labels' unigram
    distribution, add-one smoothed over ``vocab_size`` tokens: the best loss of a predictor
    that reads no input."""
    total = sum(train_counts.values()) + vocab_size
    counts = label_counts(dataset)
    nats = sum(count * -math.log((train_counts[token] + 1) / total)
               for token, count in counts.items())
    return nats / max(1, sum(counts.values()))


def cpm_case(config, data_dir, builder=build_model) -> TrainingCase:
    """The cpm case for ``config`` with data under ``data_dir``.

    Raises:
        FileNotFoundError, ValueError: see ``cpm_data.load_datasets`` and ``model.build_model``.
    """
    _, train_set, val_set = load_datasets(config, data_dir)

    def train_loss(model, batch):
        input_ids, labels, loss_mask = batch
        return lm_loss(model(input_ids=input_ids).logits, labels, loss_mask)

    def eval_sums(model, batch):
        input_ids, labels, loss_mask = batch
        logits = model(input_ids=input_ids).logits
        scores, counted = embedding_average_scores(logits.argmax(-1), labels, loss_mask,
                                                   word_embeddings(model))
        tokens = loss_mask.sum()
        return {"embedding_average_sum": float(scores.sum()), "samples": float(counted.sum()),
                "loss_sum": float(lm_loss(logits, labels, loss_mask) * tokens),
                "tokens": float(tokens)}

    def input_blind(model):
        """Always the most frequent training label: its embedding average (with the trained
        model's embeddings, as the metric takes them); and the training unigram's loss."""
        counts = label_counts(train_set)
        top = max(counts.values())
        token = min(t for t, count in counts.items() if count == top)
        sums = torch.zeros(2)
        for start in range(0, len(val_set), 256):
            _, labels, loss_mask = val_set.collate(val_set.samples[start:start + 256])
            scores, counted = embedding_average_scores(torch.full_like(labels, token), labels,
                                                       loss_mask, word_embeddings(model))
            sums += torch.stack([scores.sum(), counted.sum().float()])
        return {"embedding_average": float(sums[0] / sums[1].clamp_min(1.0)),
                "loss": unigram_loss(counts, val_set, int(config["vocab_size"]))}

    def eval_metric(sums):
        return {"embedding_average": sums["embedding_average_sum"] / max(sums["samples"], 1.0),
                "loss": sums["loss_sum"] / max(sums["tokens"], 1.0)}

    target_loss = config.get("target_loss")

    return TrainingCase(
        train_set=train_set, val_set=val_set,
        build_model=lambda: builder(config, data_dir),
        create_optimizer=lambda model, ctx: create_optimizer(config, model),
        train_loss=train_loss,
        eval_sum_names=("embedding_average_sum", "samples", "loss_sum", "tokens"),
        eval_sums=eval_sums, eval_metric=eval_metric,
        target=Target("embedding_average", float(config["target_embedding_average"])),
        create_scheduler=lambda optimizer, plan: create_scheduler(config, optimizer, plan),
        model_info={"layers": int(config["num_layers"]), "hidden_size": int(config["hidden_size"]),
                    "vocab_size": int(config["vocab_size"]),
                    "seq_length": int(config["seq_length"]),
                    "train_sequences": len(train_set), "valid_sequences": len(val_set)},
        collate_fn=train_set.collate, eval_collate_fn=val_set.collate,
        input_blind=input_blind,
        # A profile's target on the validation loss (driver.convergence: further targets).
        also=() if target_loss is None else (Target("loss", float(target_loss), False),))


def run(case) -> int:
    """The case's driver (case.yml ``driver: cpm.pytorch.training``; ``driver.run.Case``)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    return trainer.fit(cpm_case(trainer.config, trainer.data_dir, builder=case.build_model))
