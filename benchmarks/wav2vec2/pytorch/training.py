"""wav2vec 2.0 self-supervised pretraining as FlagPerf's wav2vec2 runs it (NVIDIA
DeepLearningExamples' fairseq recipe): data, batching, loss, accuracy and schedule for the
shared trainer (``driver.torch.trainer``).

Data: fairseq manifests ``<data_dir>/<subset>.tsv`` (DeepLearningExamples'
``generate_filelists.sh``): line 1 the audio root, then ``<path under root>\\t<samples>`` per
utterance. Utterances shorter than ``min_sample_size`` are skipped (fairseq
``RawAudioDataset``); the rest are ordered by length (longest first, ties in a seeded random
order) and cut into batches of at most ``max_tokens`` audio samples counted as
``longest x utterances`` (fairseq ``batch_by_size``, sizes capped at ``max_sample_size``, batch
sizes rounded down to multiples of ``required_batch_size_multiple``). Such a batch is one item
of the data sets here; the trainer's ``train_batch_size`` (FlagPerf's ``num_concat_batches``)
of them make one forward pass, ``gradient_accumulation_steps`` (``update_freq``) passes one
update. A batch's utterances are cropped at random to its shortest, as fairseq does without
padding (validation crops are seeded, the same in every evaluation).

Loss, per forward pass (fairseq ``Wav2vecCriterion`` with ``infonce``): the summed InfoNCE
cross entropy over masked frames, plus ``loss_weights[0]`` x the codebook diversity penalty
(transformers' ``diversity_loss``, already x masked frames) and ``loss_weights[1]`` x the
feature penalty x masked frames, divided by the masked frames (fairseq divides the gradient by
``sample_size``, the masked frames of the update over all ranks; here each pass's mean).

Accuracy (fairseq ``Wav2vecCriterion``: ``correct``/``count``): over masked frames, the share
whose true quantized target has the highest logit among it and the ``num_negatives``
distractors (argmax 0), a frame whose logits are all equal (argmax and argmin 0) not counted
correct. Chance is ``1 / (num_negatives + 1)``.

Throughput unit ``tokens``: FlagPerf logs ``ntokens/s`` with ``ntokens`` = the criterion's
``sample_size``, the masked frames (``target.numel()`` of the InfoNCE targets).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
from transformers.models.wav2vec2.modeling_wav2vec2 import (_compute_mask_indices,
                                                            _sample_negative_indices)

from driver.case_io import setting
from driver.convergence import Target
from driver.torch.optimizers import make_optimizer
from driver.torch.trainer import Trainer, TrainingCase, TrainingPlan

from .model import build_model, feature_frames, model_config


class ManifestError(ValueError):
    """A manifest that cannot be read; the message names the file and line."""


def read_manifest(path: Path) -> tuple[Path, list[tuple[str, int]]]:
    """A fairseq audio manifest: ``(root, [(path under root, samples)])``. A relative root is
    relative to the manifest's own folder (the tiny data's lists); an absolute root that is not
    a folder here (the lists were made where the data was mounted elsewhere, e.g. outside the
    container) is taken as the manifest's own folder.

    Raises:
        ManifestError: no such file, no root line, or a line that is not
            ``<path>\\t<samples>``.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ManifestError(f"{path}: {err.strerror or err} (make the file lists with "
                            "generate_filelists.sh, or `flagperf-ansible data prepare "
                            "librispeech` for the tiny data)") from None
    if not lines or not lines[0].strip():
        raise ManifestError(f"{path}: line 1: expected the audio root folder")
    root = path.parent / lines[0].strip()  # an absolute root replaces the manifest's folder
    if not root.is_dir():
        root = path.parent
    entries = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) < 2 or not fields[1].strip().isdigit():
            raise ManifestError(f"{path}: line {number}: expected <path>\\t<samples>")
        entries.append((fields[0], int(fields[1])))
    return root, entries


def batch_by_size(sizes: np.ndarray, order: np.ndarray, max_tokens: int,
                  multiple: int = 1) -> list[list[int]]:
    """fairseq ``data_utils.batch_by_size`` for one size per item: walk ``order`` and close a
    batch before ``longest x (count + 1)`` would pass ``max_tokens``, keeping a multiple of
    ``multiple`` items when the batch has more than that (the rest start the next batch).

    Raises:
        ValueError: an item is longer than ``max_tokens``.
    """
    batches, batch, lengths = [], [], []
    for index in order.tolist():
        size = int(sizes[index])
        if size > max_tokens:
            raise ValueError(f"an utterance of {size} samples exceeds max_tokens {max_tokens}")
        if batch and max(max(lengths), size) * (len(batch) + 1) > max_tokens:
            keep = len(batch)
            if keep > multiple:
                keep = max(multiple * (keep // multiple), keep % multiple)
            batches.append(batch[:keep])
            batch, lengths = batch[keep:], lengths[keep:]
        batch.append(index)
        lengths.append(size)
    if batch:
        batches.append(batch)
    return batches


class AudioBatches(torch.utils.data.Dataset):
    """The batches of one subset: item ``i`` is ``{"id": [n] utterance numbers,
    "source": [n, samples] float32}``, its utterances read with soundfile and cropped to the
    batch's shortest (capped at ``max_sample_size``); at random in training, seeded by the
    batch's number in validation.

    Raises:
        ManifestError: see :func:`read_manifest`; no utterance is long enough.
    """

    def __init__(self, manifest: Path, config: Mapping[str, Any], training: bool) -> None:
        self.root, entries = read_manifest(manifest)
        low = int(setting(config, "min_sample_size", 0)) if training else 0
        high = int(setting(config, "max_sample_size", 0)) if training else 0
        kept = [(p, n) for p, n in entries if n >= max(low, 1)]
        if not kept:
            raise ManifestError(f"{manifest}: no utterance of at least {low} samples")
        self.paths = [p for p, _ in kept]
        sizes = np.array([n for _, n in kept], dtype=np.int64)
        if high:
            sizes = np.minimum(sizes, high)
        self.sizes, self.training = sizes, training
        seed = int(setting(config, "seed", 0))
        rng = np.random.default_rng(seed)
        # fairseq RawAudioDataset.ordered_indices: a random order, then longest first.
        order = rng.permutation(len(sizes))
        order = order[np.argsort(-sizes[order], kind="stable")]
        tokens = int(config["max_tokens" if training else "max_tokens_valid"])
        self.batches = batch_by_size(sizes, order, tokens,
                                     int(setting(config, "required_batch_size_multiple", 1)))
        self.seed = seed

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        import soundfile

        items = self.batches[index]
        length = int(min(self.sizes[i] for i in items))
        # Training crops from numpy's global generator (the trainer seeds it, the DataLoader
        # each worker), so that a run repeats; validation's from the batch's own seed.
        rng = np.random if self.training else np.random.RandomState((self.seed, index))
        sources = []
        for i in items:
            audio, _ = soundfile.read(str(self.root / self.paths[i]), dtype="float32")
            start = int(rng.randint(0, len(audio) - length + 1))
            sources.append(torch.from_numpy(audio[start:start + length]))
        return {"id": torch.tensor(items), "source": torch.stack(sources)}


class Masking:
    """Collates batches of :class:`AudioBatches` into one forward pass: ``{"id": [N] all
    utterances, "source": [sub-batches] of [n, samples], "mask": [sub-batches] of [n, frames]
    bool, "negatives": [sub-batches] of [n, frames, K] int}``, masks and distractors drawn as
    transformers' ``run_wav2vec2_pretraining_no_trainer`` example draws them
    (``_compute_mask_indices``, ``_sample_negative_indices``: K distractors from the masked frames
    of the same utterance). ``seed`` None draws from numpy's global generator (seeded by the
    trainer); a number makes every call draw the same (validation)."""

    def __init__(self, config: Mapping[str, Any], seed: int | None = None) -> None:
        self.hf = model_config(config)
        self.seed = seed

    def __call__(self, items: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        state = None
        if self.seed is not None:
            state = np.random.get_state()
            np.random.seed(self.seed + int(items[0]["id"][0]))
        try:
            masks, negatives = [], []
            for item in items:
                shape = (item["source"].shape[0],
                         feature_frames(self.hf, item["source"].shape[1]))
                mask = _compute_mask_indices(shape, self.hf.mask_time_prob,
                                             self.hf.mask_time_length,
                                             min_masks=self.hf.mask_time_min_masks)
                masks.append(torch.from_numpy(mask))
                negatives.append(torch.from_numpy(_sample_negative_indices(
                    shape, self.hf.num_negatives, mask)))
        finally:
            if state is not None:
                np.random.set_state(state)
        return {"id": torch.cat([item["id"] for item in items]),
                "source": [item["source"] for item in items], "mask": masks,
                "negatives": negatives}


def masked_frames(batch: Mapping[str, Any]) -> int:
    """FlagPerf's ``ntokens`` of a forward pass: its masked frames."""
    return int(sum(int(mask.sum()) for mask in batch["mask"]))


def contrastive_logits(model, out, negatives: torch.Tensor) -> torch.Tensor:
    """Logits [frames of the batch, 1 + K] of ``model``'s output ``out`` (target first), as
    transformers' ``Wav2Vec2ForPreTraining.forward`` computes them: cosine similarity of the
    projected context with the projected quantized target and its K distractors over the
    temperature, a distractor equal to the target at -inf."""
    quantized, predicted = out.projected_quantized_states, out.projected_states
    batch, frames, width = quantized.shape
    distractors = quantized.reshape(-1, width)[negatives.long().reshape(-1)]
    distractors = distractors.view(batch, frames, -1, width).permute(2, 0, 1, 3)
    logits = model.compute_contrastive_logits(quantized[None], distractors, predicted,
                                              model.config.contrastive_logits_temperature)
    same = (quantized == distractors).all(-1)
    if same.any():
        logits[1:][same] = float("-inf")
    return logits.permute(1, 2, 0).reshape(batch * frames, -1)


def accuracy_counts(logits: torch.Tensor) -> tuple[int, int]:
    """fairseq ``Wav2vecCriterion``'s ``(correct, count)`` of InfoNCE logits [frames, 1 + K]
    (target at 0): argmax 0 and not also argmin 0 (all logits equal)."""
    if logits.numel() == 0:
        return 0, 0
    best, worst = logits.argmax(-1) == 0, logits.argmin(-1) == 0
    return int(best.sum()) - int((best & worst).sum()), int(best.numel())


def gumbel_temperature(update: int, schedule) -> float:
    """fairseq ``latent_temp`` ``(start, end, decay)``: ``max(start x decay^update, end)``."""
    start, end, decay = (float(v) for v in schedule)
    return max(start * decay ** update, end)


def poly_lr_factor(step: int, warmup: int, total: int, power: float = 1.0) -> float:
    """DeepLearningExamples' ``poly`` policy with initial and final scales 0: ``step / warmup``
    during the warmup, then ``(1 - (step - warmup) / (total - warmup)) ^ power``, 0 at ``total``
    (``step`` counts updates done)."""
    if warmup and step < warmup:
        return step / warmup
    if total <= warmup:
        return 1.0
    return max(0.0, 1.0 - (step - warmup) / (total - warmup)) ** power


def wav2vec2_case(config: Mapping[str, Any], data_dir: Path,
                  builder=build_model) -> TrainingCase:
    """The case for the shared trainer.

    Raises:
        ManifestError: see :class:`AudioBatches`.
        ValueError: see :func:`model.model_config`.
    """
    train_set = AudioBatches(data_dir / f"{config['train_subset']}.tsv", config, training=True)
    val_set = AudioBatches(data_dir / f"{config['valid_subset']}.tsv", config, training=False)
    weights = [float(w) for w in setting(config, "loss_weights", [0.1, 10.0])]
    temps = setting(config, "latent_temp", [2.0, 0.5, 0.999995])
    accumulation = max(1, int(setting(config, "gradient_accumulation_steps", 1)))
    passes = {"n": 0}

    def train_loss(model, batch):
        net = getattr(model, "module", model)
        net.set_gumbel_temperature(gumbel_temperature(passes["n"] // accumulation, temps))
        passes["n"] += 1
        total, tokens = 0.0, 0
        for source, mask, negatives in zip(batch["source"], batch["mask"], batch["negatives"]):
            out = model(source, mask_time_indices=mask, sampled_negative_indices=negatives)
            n = mask.sum()
            # transformers' loss is the contrastive sum + loss_weights[0] x diversity x n.
            total = total + out.loss + weights[1] * net.features_pen * n
            tokens += int(n)
        return total / max(tokens, 1)

    def eval_sums(model, batch):
        correct = count = 0
        for source, mask, negatives in zip(batch["source"], batch["mask"], batch["negatives"]):
            out = model(source, mask_time_indices=mask)
            logits = contrastive_logits(model, out, negatives)[mask.reshape(-1)]
            c, n = accuracy_counts(logits.float())
            correct, count = correct + c, count + n
        return {"correct": correct, "count": count}

    def create_scheduler(optimizer, plan: TrainingPlan):
        warmup, power = int(config["warmup_updates"]), float(setting(config, "lr_poly_power", 1))
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: poly_lr_factor(step, warmup, plan.total_steps, power))

    hf = model_config(config)
    return TrainingCase(
        train_set=train_set, val_set=val_set, build_model=lambda: builder(config),
        create_optimizer=lambda model, ctx: make_optimizer(model, config),
        train_loss=train_loss, eval_sum_names=("correct", "count"), eval_sums=eval_sums,
        eval_metric=lambda s: s["correct"] / s["count"] if s["count"] else math.nan,
        target=Target("acc", float(config["target_acc"])),
        create_scheduler=create_scheduler,
        model_info={"train_batches": len(train_set), "valid_batches": len(val_set),
                    "num_negatives": hf.num_negatives,
                    "chance_acc": round(1 / (hf.num_negatives + 1), 4)},
        collate_fn=Masking(config), eval_collate_fn=Masking(config, seed=int(
            setting(config, "seed", 0))),
        units=("tokens", masked_frames),
        # The distractors are other masked frames of the same utterance, drawn as the true
        # target is: a choice that does not read the audio is right 1 time in K + 1.
        input_blind=lambda model: 1 / (hf.num_negatives + 1))


def run(case) -> int:
    """The case's driver (case.yml ``driver: wav2vec2.pytorch.training``; ``driver.run.Case``):
    the trainer from the command line, then :func:`wav2vec2_case`; a manifest or configuration
    that cannot be read stops the rank with one line."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    try:
        training = wav2vec2_case(trainer.config, trainer.data_dir, builder=case.build_model)
    except (ValueError, KeyError) as err:
        raise SystemExit(f"wav2vec2: {err}") from None
    return trainer.fit(training)
