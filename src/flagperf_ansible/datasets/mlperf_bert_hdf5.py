"""Format ``mlperf_bert_hdf5``: MLPerf BERT pre-training shards, as FlagPerf's bert case reads them.

Real layout (under data_dir): ``2048_shards_uncompressed/part_*.hdf5`` (Wikipedia, 2048
shards) and ``eval_set_uncompressed/part_eval_10k.hdf5``, each with the datasets
``input_ids`` [samples, 512] int32, ``input_mask`` and ``segment_ids`` [samples, 512] int8,
``masked_lm_positions`` and ``masked_lm_ids`` [samples, 76] int32 (zero-padded),
``next_sentence_labels`` [samples] int8 (MLCommons training, language_model/tensorflow/bert;
NVIDIA's ``create_pretraining_data.py``); what the checker accepts:
``layout_check.check_mlperf_bert_hdf5``.

Tiny data: two training shards of 16 samples and an evaluation file of 16, written by h5py.
Samples are random but built as create_pretraining_data builds them: ``[CLS] A [SEP] B [SEP]``
over BERT-uncased WordPiece ids, 15 % of the tokens chosen for prediction (80 % replaced by
``[MASK]``, 10 % by a random token, 10 % kept), a seeded generator per file.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from flagperf_ansible.datasets import layout_check
from flagperf_ansible.datasets.registry import Format

NAME = "mlperf_bert_hdf5"
SEQ_LEN, MAX_PREDICTIONS, SAMPLES_PER_FILE, TRAIN_SHARDS = 512, 76, 16, 2
# BERT uncased vocabulary (30522): [CLS] 101, [SEP] 102, [MASK] 103; WordPieces from 1996 on.
CLS, SEP, MASK, FIRST_WORD, VOCAB = 101, 102, 103, 1996, 30522


def samples(count: int, seed: int) -> dict:
    """``count`` samples as the six arrays of a shard (names of ``layout_check.BERT_DATASETS``)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    arrays = {"input_ids": np.zeros((count, SEQ_LEN), "i4"),
              "input_mask": np.zeros((count, SEQ_LEN), "i1"),
              "segment_ids": np.zeros((count, SEQ_LEN), "i1"),
              "masked_lm_positions": np.zeros((count, MAX_PREDICTIONS), "i4"),
              "masked_lm_ids": np.zeros((count, MAX_PREDICTIONS), "i4"),
              "next_sentence_labels": rng.integers(0, 2, count).astype("i1")}
    for row in range(count):
        length = int(rng.integers(64, SEQ_LEN + 1))
        first = int(rng.integers(8, length - 8))  # [CLS] + A + [SEP]: first .. length - 1 is B
        tokens = rng.integers(FIRST_WORD, VOCAB, length)
        tokens[0], tokens[first - 1], tokens[length - 1] = CLS, SEP, SEP
        words = np.setdiff1d(np.arange(1, length - 1), [first - 1])
        chosen = np.sort(rng.choice(words, min(MAX_PREDICTIONS, max(1, round(0.15 * len(words)))),
                                    replace=False))
        arrays["masked_lm_positions"][row, :len(chosen)] = chosen
        arrays["masked_lm_ids"][row, :len(chosen)] = tokens[chosen]
        fate = rng.random(len(chosen))
        tokens[chosen[fate < 0.8]] = MASK
        randomised = chosen[(fate >= 0.8) & (fate < 0.9)]
        tokens[randomised] = rng.integers(FIRST_WORD, VOCAB, len(randomised))
        arrays["input_ids"][row, :length] = tokens
        arrays["input_mask"][row, :length] = 1
        arrays["segment_ids"][row, first:length] = 1
    return arrays


def write_shard(path: Path, arrays: dict) -> None:
    """``arrays`` as one uncompressed HDF5 shard."""
    import h5py

    with h5py.File(path, "w") as shard:
        for name in layout_check.BERT_DATASETS:
            shard.create_dataset(name, data=arrays[name])


def generate(target: Path) -> dict[str, int]:
    """Write the tiny shards under ``target``; returns sample counts per folder.

    Raises:
        OSError: ``target`` cannot be written.
    """
    train, evaluation = target / layout_check.BERT_TRAIN_DIR, target / layout_check.BERT_EVAL_DIR
    train.mkdir(parents=True, exist_ok=True)
    evaluation.mkdir(parents=True, exist_ok=True)
    for shard in range(TRAIN_SHARDS):
        write_shard(train / f"part_{shard:05d}_of_{TRAIN_SHARDS:05d}.hdf5",
                    samples(SAMPLES_PER_FILE, seed=shard))
    write_shard(evaluation / "part_eval_10k.hdf5", samples(SAMPLES_PER_FILE, seed=10_000))
    return {layout_check.BERT_TRAIN_DIR: TRAIN_SHARDS * SAMPLES_PER_FILE,
            layout_check.BERT_EVAL_DIR: SAMPLES_PER_FILE}


FORMAT = Format(
    name=NAME,
    description="MLPerf BERT hdf5: 2048_shards_uncompressed/part_*.hdf5 + eval_set_uncompressed/"
                " (input_ids ... next_sentence_labels; tiny: 48 samples)",
    check=partial(layout_check.check, NAME),
    generate=generate,
)
