"""BERT pre-training on PaddlePaddle continued from MLPerf's checkpoint to a masked-LM accuracy
target (FlagPerf bert-paddle: training/benchmarks/bert/paddle).

Launched as paddle launches (``python -m paddle.distributed.launch``, one process per device;
ranks from ``PADDLE_TRAINER_ID``/``PADDLE_TRAINERS_NUM``), or alone. Data: MLPerf's hdf5 shards
under data_dir (format ``mlperf_bert_hdf5``, ``shards.py``), read as the pytorch case reads
them. Model: ``model.py`` (BERT in paddle.nn, bert_config.json checked, the converted
``init_checkpoint`` loaded without torch). Loss: MLPerf's, masked-LM cross entropy over the
masked positions plus next-sentence cross entropy, the prediction head on the gathered masked
positions only. Metric: masked-LM accuracy, correct predictions over the masked positions of
the whole evaluation set (MLPerf's ``eval_mlm_accuracy``), a fraction, summed over ranks.
Optimizer: upstream's, AdamW (``paddle.optimizer.AdamW``: FlagPerf's trainer_adapter creates
``adamw`` although its keys are named ``opt_lamb_*``) with the no-decay group for biases and
LayerNorm and the LinearWarmupPolyDecay schedule over ``max_steps``, no gradient clipping.
The loop, events and FINISHED figures are the framework-free ``driver.training_loop``.

Case keys besides the loop's and model.py's: ``max_seq_length``, ``max_predictions_per_seq``,
``learning_rate``, ``weight_decay_rate``, ``opt_lamb_beta_1``, ``opt_lamb_beta_2``,
``opt_lamb_epsilon``, ``warmup_proportion``, ``warmup_steps``, ``start_warmup_step``,
``gradient_accumulation_steps``, ``precision`` (fp32 | amp | bf16 | fp16), ``num_workers``,
``target_mlm_accuracy``.
"""

import contextlib
import itertools


import numpy as np
import paddle
import paddle.distributed as dist

from driver import perflog
from driver.case_io import setting
from driver.convergence import Target, majority_share
from driver.training_loop import LoopSettings, TrainingLoop, start_case

from ..common import (EVAL_DIR, IGNORE, TRAIN_DIR, BertShards, masked_labels,
                      poly_warmup_factor)
from .model import parameter_count, pretraining_loss
from .shards import batches, eval_batches, train_batches

#: ``precision`` -> the dtype paddle.amp.auto_cast runs in (None: none), as the torch trainer.
AUTOCAST_DTYPES = {"fp32": None, "amp": "bfloat16", "bf16": "bfloat16", "fp16": "float16"}
#: FlagPerf's no-decay names (bert-paddle trainer_adapter.create_optimizer).
NO_DECAY = ("bias", "gamma", "beta", "LayerNorm", "norm")


def run(case) -> int:
    """The case's driver (case.yml ``driver: bert.paddle.training``; ``driver.run.Case``)."""
    # The clock starts here, after the framework's import, as the pytorch case's and upstream's
    # (its e2e_time counts from __main__, paddle imported).
    start = start_case(case.description)
    config, data_dir, log = start.config, start.data_dir, start.log
    settings = LoopSettings.from_config(config)
    precision = str(setting(config, "precision", "fp32"))
    if precision not in AUTOCAST_DTYPES:
        raise SystemExit(f"config precision: {precision!r}, expected one of "
                         + ", ".join(AUTOCAST_DTYPES))
    amp_dtype = AUTOCAST_DTYPES[precision]
    accumulation = settings.gradient_accumulation_steps
    rank, world = start.rank, start.world_size
    if world > 1:
        dist.init_parallel_env()
        if (dist.get_rank(), dist.get_world_size()) != (rank, world):
            raise SystemExit(f"paddle reports rank {dist.get_rank()} of "
                             f"{dist.get_world_size()}, the launcher's variables {rank} of {world}")
    if paddle.device.get_device().startswith("gpu"):
        start.clock.sync = paddle.device.synchronize
    np.random.seed((settings.seed + rank) % 2**32)
    paddle.seed(settings.seed)  # the same initial weights on every rank

    seq_len = int(config["max_seq_length"])
    max_predictions = int(config["max_predictions_per_seq"])
    train_set = BertShards(data_dir / TRAIN_DIR, seq_len, max_predictions)
    val_set = BertShards(data_dir / EVAL_DIR, seq_len, max_predictions)

    model = case.build_model(config, data_dir)
    log.log(perflog.CONVERT_MODEL, {
        "model": "bert", "framework": f"paddle {paddle.__version__}",
        "parameters": parameter_count(model), "hidden_size": int(config["hidden_size"]),
        "num_hidden_layers": int(config["num_hidden_layers"]),
        "vocab_size": int(config["vocab_size"]), "max_seq_length": seq_len,
        "train_samples": len(train_set), "eval_samples": len(val_set)})

    def epoch_plan(epoch):
        return train_batches(len(train_set), settings.train_batch_size, rank, world,
                             settings.seed, epoch)

    batches_per_epoch = len(epoch_plan(1))
    if batches_per_epoch < accumulation:
        raise SystemExit(f"the train set holds fewer than gradient_accumulation_steps "
                         f"({accumulation}) batches per rank")
    total = int(setting(config, "max_steps", 0)) or settings.total_steps(
        batches_per_epoch, world)
    proportion = float(setting(config, "warmup_proportion", 0.0))
    if proportion:
        warmup, warmup_start = int(total * proportion), 0
    else:
        warmup = int(setting(config, "warmup_steps", 0))
        warmup_start = int(setting(config, "start_warmup_step", 0))
    learning_rate = float(config["learning_rate"])
    scheduler = paddle.optimizer.lr.LambdaDecay(
        learning_rate, lambda step: poly_warmup_factor(step, warmup, total, warmup_start))
    named = list(model.named_parameters())
    decay = float(config["weight_decay_rate"])
    optimizer = paddle.optimizer.AdamW(
        learning_rate=scheduler,
        parameters=[{"params": [p for n, p in named if not any(k in n for k in NO_DECAY)],
                     "weight_decay": decay},
                    {"params": [p for n, p in named if any(k in n for k in NO_DECAY)],
                     "weight_decay": 0.0}],
        beta1=float(config["opt_lamb_beta_1"]), beta2=float(config["opt_lamb_beta_2"]),
        epsilon=float(setting(config, "opt_lamb_epsilon", 1e-6)), weight_decay=decay)
    log.log(perflog.CREATE_OPTIMIZER, {"optimizer": type(optimizer).__name__,
                                       "learning_rate": learning_rate})
    scaler = paddle.amp.GradScaler(init_loss_scaling=2.0**16) if precision == "fp16" else None
    if world > 1:
        model = paddle.DataParallel(model)
        log.log(perflog.MODEL_TO_DDP, {"world_size": world})

    def autocast():
        return paddle.amp.auto_cast(enable=amp_dtype is not None,
                                    dtype=amp_dtype or "bfloat16", level="O1")

    def on_device(batch):
        """A collated numpy batch as int64 tensors on the current device."""
        return {key: paddle.to_tensor(value) for key, value in batch.items()}

    def heads(batch):
        return model(batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                     batch["masked_lm_positions"])

    def loss_of(batch):
        with autocast():
            mlm, nsp = heads(batch)
        return pretraining_loss(mlm, nsp, batch["masked_lm_labels"],
                                batch["next_sentence_labels"], IGNORE)

    def train_step(group):
        """One update from ``accumulation`` micro-batches (the loss of each divided by their
        number, DataParallel's gradient reduction on the last one only)."""
        total_loss = 0.0
        for number, batch in enumerate(group, 1):
            sync = world == 1 or number == len(group)
            with contextlib.nullcontext() if sync else model.no_sync():
                loss = loss_of(on_device(batch)) / len(group)
                (scaler.scale(loss) if scaler is not None else loss).backward()
            total_loss += float(loss)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.clear_grad()
        scheduler.step()
        return total_loss

    def with_labels(reader):
        for batch in reader:
            batch["masked_lm_labels"] = masked_labels(batch["masked_lm_ids"],
                                                      batch["masked_lm_positions"])
            yield batch

    def epoch_batches(epoch):
        plan = epoch_plan(epoch)
        plan = plan[:len(plan) // accumulation * accumulation]
        reader = with_labels(batches(train_set, plan))
        while group := list(itertools.islice(reader, accumulation)):
            yield group

    val_plan = eval_batches(len(val_set), settings.eval_batch_size, rank, world)

    def evaluate():
        """Masked-LM accuracy over the whole evaluation set: this rank's share, summed."""
        model.eval()
        correct = masked = 0
        with paddle.no_grad():
            for batch in with_labels(batches(val_set, val_plan)):
                with autocast():
                    mlm, _ = heads(on_device(batch))
                wanted = batch["masked_lm_labels"]
                used = wanted != IGNORE
                correct += int(((mlm.argmax(-1).numpy() == wanted) & used).sum())
                masked += int(used.sum())
        model.train()
        correct, masked = all_reduce_sum([correct, masked])
        return correct / masked if masked else 0.0

    def all_reduce_sum(values):
        if world == 1:
            return [float(v) for v in values]
        summed = paddle.to_tensor(np.asarray(values, dtype=np.float64))
        dist.all_reduce(summed)
        return summed.numpy().tolist()

    loop = TrainingLoop(settings, Target("mlm_accuracy", float(config["target_mlm_accuracy"])),
                        start, all_reduce_sum=all_reduce_sum)
    loop.init_done()
    model.train()
    progress = loop.run(epoch_batches=epoch_batches, train_step=train_step,
                        batch_samples=lambda group: sum(len(b["input_ids"]) for b in group),
                        evaluate=evaluate, learning_rate=scheduler.get_lr)
    # Always the most frequent masked-LM label of the training shards.
    loop.finish(progress, input_blind=lambda: majority_share(
        train_set.masked_lm_labels().tolist(), val_set.masked_lm_labels().tolist()))
    return 0

