"""GLM-large fine-tuned on SuperGLUE ReCoRD to an accuracy target (FlagPerf glm).

FlagPerf's recipe (``training/benchmarks/glm/pytorch``): ``GLMForMultiTokenCloze`` started from
``blocklm-large-blank``, every candidate scored by the log-probability of its tokens in the
blank, cross-entropy over a sample's candidates (the correct one first), AdamW with weight
decay on matrices only, gradients clipped to norm 1, a linear warmup then linear decay
(:func:`annealing_lr`), evaluation every ``eval_interval_samples``: the share of evaluation
samples whose best-scored candidate is one of their correct answers (ReCoRD's exact match over
candidates). Throughput is counted in candidate sequences of ``max_seq_length`` tokens (the
FLOPs of ``case.yml: mfu``), samples/s beside it (``p_train_samples``, FlagPerf's
"sequences"). The input-blind predictor a profile's baselines score is the answer prior
(``record.answer_prior``).

Config keys besides the trainer's and ``model.build_model``'s: ``train_data``, ``eval_data``,
``init_checkpoint`` (relative to the data folder; null: random weights),
``init_checkpoint_full_pickle``, ``max_seq_length``, ``learning_rate``, ``weight_decay``,
``adam_betas``, ``adam_eps``, ``warmup``, ``lr_decay_iters``, ``lr_decay_ratio``,
``eval_choice_segment``, ``target_accuracy``.
"""

import torch

from driver.case_io import setting
from driver.convergence import Target
from driver.torch.optimizers import make_optimizer
from driver.torch.trainer import Trainer, TrainingCase

from .model import load_glm_checkpoint
from .record import RecordSet, answer_prior, collate


def annealing_lr(step: int, *, warmup_steps: float, decay_steps: float,
                 decay_ratio: float) -> float:
    """The learning-rate factor after ``step`` optimizer updates, as GLM's ``AnnealingLR``
    (decay style linear; FlagPerf ``schedulers/base.py``) gives it: ``step / warmup_steps``
    up to ``warmup_steps`` (0 for the first update), then down linearly to ``decay_ratio`` over
    ``decay_steps`` more, and ``decay_ratio`` after."""
    if warmup_steps > 0 and step <= warmup_steps:
        return step / warmup_steps
    return 1.0 - (1.0 - decay_ratio) * min(1.0, (step - warmup_steps) / max(decay_steps, 1e-9))


def candidate_scores(model, batch, segment: int = 0) -> torch.Tensor:
    """Scores ``[B, C]`` of a batch's candidates, padding candidates pushed to -1e9; with
    ``segment``, at most that many candidates per forward pass (FlagPerf's evaluator: 10)."""
    inputs = [batch[key] for key in ("text", "position", "sep", "target", "logit_mask")]
    choices = inputs[0].shape[1]
    step = segment if segment > 0 else choices
    scores = torch.cat([model(*(x[:, i:i + step] for x in inputs))
                        for i in range(0, choices, step)], dim=1)
    mask = batch["candidate_mask"]
    return scores * mask - 1e9 * (1.0 - mask)


def run(case) -> int:
    """The case's driver (case.yml ``driver: glm.pytorch.training``; ``driver.run.Case``)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    config, data_dir = trainer.config, trainer.data_dir
    length = int(config["max_seq_length"])
    train_set = RecordSet(data_dir / str(config["train_data"]), False, length)
    val_set = RecordSet(data_dir / str(config["eval_data"]), True, length)
    segment = int(setting(config, "eval_choice_segment", 0))

    def build():
        model = case.build_model(config)
        checkpoint = config.get("init_checkpoint")
        if checkpoint:
            unused = load_glm_checkpoint(model.model, data_dir / str(checkpoint),
                                         bool(config.get("init_checkpoint_full_pickle")))
            if unused:
                print(f"init_checkpoint: {len(unused)} keys the model does not use, e.g. "
                      f"{unused[0]}")
        return model

    def train_loss(model, batch):
        # FlagPerf: masked candidates at -10000, cross-entropy against candidate 0.
        inputs = [batch[key] for key in ("text", "position", "sep", "target", "logit_mask")]
        mask = batch["candidate_mask"]
        scores = model(*inputs) * mask - 10000.0 * (1.0 - mask)
        return torch.nn.functional.cross_entropy(scores.float(), batch["label"])

    def eval_sums(model, batch):
        best = candidate_scores(model, batch, segment).argmax(dim=1)
        correct = batch["answer_mask"].gather(1, best.unsqueeze(1)).sum()
        return {"correct": float(correct), "samples": float(len(best))}

    def create_scheduler(optimizer, plan):
        accumulation = int(setting(config, "gradient_accumulation_steps", 1))
        iterations = max(1, int(setting(config, "lr_decay_iters", plan.total_steps))
                         // accumulation)
        warmup = float(setting(config, "warmup", 0.0)) * iterations
        ratio = float(setting(config, "lr_decay_ratio", 1.0))
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: annealing_lr(
            step, warmup_steps=warmup, decay_steps=iterations - warmup, decay_ratio=ratio))

    target = Target("accuracy", float(config["target_accuracy"]))
    return trainer.fit(TrainingCase(
        train_set=train_set, val_set=val_set, build_model=build,
        create_optimizer=lambda model, ctx: make_optimizer(model, config),
        train_loss=train_loss, eval_sum_names=("correct", "samples"), eval_sums=eval_sums,
        eval_metric=lambda sums: sums["correct"] / max(sums["samples"], 1.0), target=target,
        create_scheduler=create_scheduler, collate_fn=collate, eval_collate_fn=collate,
        units=("sequences", lambda batch: int(batch["candidate_mask"].sum())),
        input_blind=lambda model: answer_prior(train_set, val_set),
        model_info={"train_samples": len(train_set), "eval_samples": len(val_set),
                    "max_seq_length": length}))
