"""MLPerf BERT pre-training data: HDF5 shards, as FlagPerf's bert case reads them."""

import os

from flagperf_host.checks.common import entries, need, spread
from flagperf_host.readers.hdf5 import Hdf5NotCovered, hdf5_datasets


BERT_TRAIN_DIR, BERT_EVAL_DIR = "2048_shards_uncompressed", "eval_set_uncompressed"
# Per sample: [seq_len] for the first three, [max_predictions] for the next two, a scalar last.
BERT_DATASETS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "next_sentence_labels")


def bert_shard_problems(path):
    """Problems of one MLPerf BERT shard (an HDF5 file), as phrases. An HDF5 file whose index
    this reader does not cover passes: its signature is right, and h5py will say more."""
    try:
        found = hdf5_datasets(path)
    except Hdf5NotCovered:
        return []
    except (OSError, ValueError) as err:
        return [str(err)]
    missing = [name for name in BERT_DATASETS if name not in found]
    if missing:
        return ["no dataset %s" % ", ".join(missing)]
    shapes = dict((name, found[name][0]) for name in BERT_DATASETS)
    problems = []
    ranks = [len(shapes[n]) for n in BERT_DATASETS]
    if ranks != [2, 2, 2, 2, 2, 1]:
        return ["shapes %s, expected [samples, seq_len] x 3, [samples, max_predictions] x 2, "
                "[samples]" % ", ".join("%s %s" % (n, list(shapes[n])) for n in BERT_DATASETS)]
    if len(set(shapes[n][0] for n in BERT_DATASETS)) != 1:
        problems.append("sample counts differ (%s)" % ", ".join(
            "%s %d" % (n, shapes[n][0]) for n in BERT_DATASETS))
    if len(set(shapes[n] for n in BERT_DATASETS[:3])) != 1:
        problems.append("input_ids, input_mask, segment_ids shapes differ")
    if shapes["masked_lm_positions"] != shapes["masked_lm_ids"]:
        problems.append("masked_lm_positions and masked_lm_ids shapes differ")
    not_int = [n for n in BERT_DATASETS if found[n][1] != "integer"]
    if not_int:
        problems.append("not integer: %s" % ", ".join(not_int))
    return problems


def check(root):
    """MLPerf BERT pre-training data as FlagPerf's bert case reads it:
    ``2048_shards_uncompressed/`` (training shards) and ``eval_set_uncompressed/`` (the 10k
    evaluation samples, ``part_eval_10k.hdf5``), files with ``part`` in their name (what the
    loader lists). Each is HDF5 with the root datasets ``input_ids``, ``input_mask``,
    ``segment_ids`` [samples, seq_len] (512 in MLPerf), ``masked_lm_positions``,
    ``masked_lm_ids`` [samples, max_predictions] (76), ``next_sentence_labels`` [samples], all
    integers. Reads the HDF5 index (not the data) of every evaluation file and a sample of
    HEADER_SAMPLE training shards. The checkpoint and ``bert_config.json`` that the case also
    reads from data_dir are model files, not checked here.
    """
    problems = []
    for folder, sample in ((BERT_TRAIN_DIR, spread), (BERT_EVAL_DIR, list)):
        if not need(root, folder, problems, folder=True):
            continue
        where = os.path.join(root, folder)
        shards = [n for n in entries(where)
                  if "part" in n and os.path.isfile(os.path.join(where, n))]
        if not shards:
            problems.append("%s/: no shard files (names with 'part')" % folder)
        for name in sample(shards):
            problems.extend("%s/%s: %s" % (folder, name, p)
                            for p in bert_shard_problems(os.path.join(where, name)))
    return problems
