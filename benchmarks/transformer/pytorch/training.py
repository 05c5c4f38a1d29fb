"""Transformer big trained from scratch on WMT14 en-de to a BLEU target (FlagPerf transformer).

The model is ``model.py``, the data ``wmt.py`` (fairseq's binarized layout, token batches);
the loop is ``driver/torch/trainer.py``. What the case adds, after upstream's fairseq fork:

* loss: label-smoothed cross entropy over the target tokens (fairseq's
  ``label_smoothed_cross_entropy``: (1 - eps) NLL + eps/V x the sum of -log p over the
  vocabulary, ``<pad>`` ignored), averaged over the batch's target tokens; torch's
  ``cross_entropy(label_smoothing=eps)`` is that formula. fairseq sums over tokens and divides
  the gradient by all ranks' tokens; the mean per rank weights ranks equally instead;
* schedule: ``inverse_sqrt`` (fairseq/optim/lr_scheduler/inverse_square_root_schedule.py):
  after n updates lr = warmup_init_lr + n (lr - warmup_init_lr) / warmup_updates until
  warmup_updates, then lr x sqrt(warmup_updates / n);
* evaluation (upstream train/evaluator.py, every epoch): the test set translated with beam
  search (``beam``, ``lenpen``, at most ``max_len_a`` x source + ``max_len_b`` tokens), BPE
  removed, detokenized, and scored with sacrebleu's corpus BLEU against ``test.raw.de``
  (lowercased unless ``test_cased_bleu``);
* ``num_threads``, when set: torch's CPU threads per process (the cpu profile: 1);
* throughput in target tokens (fairseq's ``ntokens``, ``</s>`` included): FINISHED's
  ``num_trained_tokens`` and ``p_*`` in tokens/s, as upstream's ``training_tokens_per_second``.
"""

from pathlib import Path


import torch
import torch.nn.functional as F

from driver.case_io import setting
from driver.convergence import Target
from driver.torch.optimizers import make_optimizer
from driver.torch.trainer import Trainer, TrainingCase

from . import wmt
from .model import build_model


def inverse_sqrt_factor(updates: int, warmup_updates: int, warmup_init_ratio: float = 0.0
                        ) -> float:
    """The learning rate over its peak after ``updates`` updates (fairseq's inverse_sqrt:
    linear from ``warmup_init_ratio`` to 1 over ``warmup_updates``, then
    sqrt(warmup_updates / updates))."""
    if warmup_updates and updates < warmup_updates:
        return warmup_init_ratio + updates * (1.0 - warmup_init_ratio) / warmup_updates
    return (max(warmup_updates, 1) / max(updates, 1)) ** 0.5


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float
                        ) -> torch.Tensor:
    """Mean over non-pad target tokens of fairseq's label-smoothed cross entropy;
    ``logits`` [B, T, V], ``target`` [B, T]."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                           ignore_index=wmt.PAD, label_smoothing=epsilon)


def transformer_case(config, data_dir: Path, builder=build_model) -> TrainingCase:
    """The case over ``data_dir`` (fairseq's binarized WMT14 en-de and ``test.raw.de``).

    Raises:
        ValueError: ``train_batch_size`` is not 1 (a batch is ``max_tokens`` tokens), or bad
            data (naming the file).
        OSError: a data file cannot be read.
    """
    if int(config["train_batch_size"]) != 1:
        raise ValueError("config train_batch_size: must be 1 (one batch of max_tokens tokens "
                         "per step; set max_tokens)")
    dictionary = wmt.Dictionary(data_dir / "dict.de.txt")
    src = wmt.IndexedSentences(data_dir / "train.en-de.en")
    tgt = wmt.IndexedSentences(data_dir / "train.en-de.de")
    if len(src) != len(tgt):
        raise ValueError(f"{data_dir}/train.en-de: {len(src)} en sentences, {len(tgt)} de")
    batches = wmt.batch_by_size(src.sizes, tgt.sizes, int(config["max_tokens"]),
                                int(setting(config, "max_sentences", 0)),
                                int(config["max_source_positions"]))
    test_src = wmt.IndexedSentences(data_dir / "test.en-de.en")
    references = (data_dir / "test.raw.de").read_text(encoding="utf-8").splitlines()
    if len(references) != len(test_src):
        raise ValueError(f"{data_dir}/test.raw.de: {len(references)} lines, the test set "
                         f"{len(test_src)} sentences")
    lowercase = not bool(setting(config, "test_cased_bleu", False))
    remove_bpe = setting(config, "remove_bpe", "@@ ") or None
    epsilon = float(config["label_smoothing"])

    def train_loss(model, batch):
        source, prev, target, _ = batch
        logits = model(input_ids=source, attention_mask=source.ne(wmt.PAD),
                       decoder_input_ids=prev, use_cache=False).logits
        return label_smoothed_loss(logits, target, epsilon)

    def eval_sums(model, batch):
        source, indices = batch
        generator = getattr(model, "module", model)  # DDP's
        mask = source.ne(wmt.PAD)
        longest = int(mask.sum(1).max())
        out = generator.generate(
            input_ids=source, attention_mask=mask, do_sample=False,
            num_beams=int(config["beam"]), length_penalty=float(config["lenpen"]),
            early_stopping=not bool(setting(config, "no_early_stop", False)),
            max_new_tokens=int(float(config["max_len_a"]) * longest + int(config["max_len_b"])),
            decoder_start_token_id=wmt.EOS, eos_token_id=wmt.EOS, pad_token_id=wmt.PAD,
            bos_token_id=0)
        hypotheses = [wmt.detokenize(dictionary.string(row[1:].tolist(), remove_bpe))
                      for row in out.cpu()]  # row[0] is the start symbol </s>
        return wmt.bleu_statistics(hypotheses, [references[i] for i in indices.tolist()],
                                   lowercase)

    def create_scheduler(optimizer, plan):
        warmup = int(config["warmup_updates"])
        ratio = float(setting(config, "warmup_init_lr", 0.0)) / float(config["learning_rate"])
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda updates: inverse_sqrt_factor(updates, warmup, ratio))

    def build():
        model = builder(config, data_dir)
        info["parameters"] = sum(p.numel() for p in model.parameters())
        return model

    info = {"dictionary_size": len(dictionary), "train_sentences": len(src),
            "train_batches": len(batches), "test_sentences": len(test_src)}
    return TrainingCase(
        train_set=wmt.TokenBatches(src, tgt, batches,
                                   bool(setting(config, "left_pad_source", True))),
        val_set=wmt.Sentences(test_src),
        build_model=build,
        create_optimizer=lambda model, ctx: make_optimizer(model, config),
        train_loss=train_loss,
        eval_sum_names=wmt.BLEU_STATISTICS,
        eval_sums=eval_sums,
        eval_metric=lambda sums: wmt.bleu_score(sums, lowercase),
        target=Target("bleu", float(config["target_bleu"])),
        create_scheduler=create_scheduler,
        model_info=info,
        collate_fn=wmt.first,
        eval_collate_fn=wmt.collate_sentences,
        units=("tokens", lambda batch: batch[3]),
        input_blind=lambda model: wmt.constant_translation_bleu(
            tgt, dictionary, references, lowercase, remove_bpe),
    )


def run(case) -> int:
    """The case's driver (case.yml ``driver: transformer.pytorch.training``; ``driver.run.Case``)."""
    trainer = Trainer.from_command_line(case.description, model=case.name)
    if setting(trainer.config, "num_threads", None):
        # A small model on a shared CPU: one thread per process avoids OpenMP's spinning
        # threads waiting for each other (20 x slower steps on 2 busy cores here).
        torch.set_num_threads(int(trainer.config["num_threads"]))
    return trainer.fit(transformer_case(trainer.config, trainer.data_dir,
                                        builder=case.build_model))
