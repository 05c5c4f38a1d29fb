"""What the bert cases share, whatever their framework (pytorch, paddle): MLPerf's BERT hdf5
shards as numpy arrays (format ``mlperf_bert_hdf5``: the same samples, order of files and
masked-LM labels for both), the masked-LM labels of a batch, and the check of the case's
configuration against ``bert_config.json``. Imports no framework (numpy, h5py, json).

Layout under data_dir: every ``part*`` file of ``2048_shards_uncompressed/`` for training and of
``eval_set_uncompressed/`` for evaluation, each with ``input_ids``, ``input_mask``,
``segment_ids`` [samples, max_seq_length], ``masked_lm_positions``, ``masked_lm_ids``
[samples, max_predictions_per_seq] (zero-padded) and ``next_sentence_labels`` [samples]
(MLCommons training, language_model/tensorflow/bert; NVIDIA's create_pretraining_data.py).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

TRAIN_DIR, EVAL_DIR = "2048_shards_uncompressed", "eval_set_uncompressed"
KEYS = ("input_ids", "segment_ids", "input_mask", "masked_lm_positions", "masked_lm_ids",
        "next_sentence_labels")
#: The label of a masked-LM slot that holds no prediction (cross entropy ignores it).
IGNORE = -100


class BertShards:
    """The samples of every ``part*`` hdf5 file in ``folder``, in file-name order; an item is a
    dict of int64 arrays: ``input_ids``, ``segment_ids``, ``input_mask`` [seq_len],
    ``masked_lm_positions``, ``masked_lm_ids`` [max_predictions] (0 where unused) and
    ``next_sentence_labels`` [] (1: B is a random span). Files are opened on first use, in each
    process (h5py handles do not cross fork), and read one row at a time.

    Raises:
        FileNotFoundError: no ``part*`` file in ``folder``.
        ValueError: a file's sequences are not ``seq_len`` long or its predictions not
            ``max_predictions`` wide, or a dataset is missing (the message names the file).
    """

    def __init__(self, folder: Path, seq_len: int, max_predictions: int) -> None:
        import h5py

        self.files = sorted(p for p in Path(folder).glob("*part*") if p.is_file())
        if not self.files:
            raise FileNotFoundError(f"{folder}: no shard files (names with 'part')")
        self.ends, total = [], 0
        for path in self.files:
            with h5py.File(path, "r") as shard:
                missing = [key for key in KEYS if key not in shard]
                if missing:
                    raise ValueError(f"{path}: no dataset {', '.join(missing)}")
                shapes = (shard["input_ids"].shape, shard["masked_lm_positions"].shape)
            if shapes[0][1] != seq_len or shapes[1][1] != max_predictions:
                raise ValueError(f"{path}: input_ids {list(shapes[0])}, masked_lm_positions "
                                 f"{list(shapes[1])}; max_seq_length {seq_len}, "
                                 f"max_predictions_per_seq {max_predictions} configured")
            total += shapes[0][0]
            self.ends.append(total)
        self._open: dict[int, object] = {}

    def __len__(self) -> int:
        return self.ends[-1]

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        import h5py

        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} of {len(self)}")
        number = bisect.bisect_right(self.ends, index)
        row = index - (self.ends[number - 1] if number else 0)
        if number not in self._open:
            self._open[number] = h5py.File(self.files[number], "r")
        shard = self._open[number]
        return {key: np.asarray(shard[key][row], dtype=np.int64) for key in KEYS}

    def __getstate__(self):  # loader workers open their own handles
        return {**self.__dict__, "_open": {}}

    def masked_lm_labels(self) -> np.ndarray:
        """The labels of every used masked-LM slot (position not 0) of every file, in order
        (int64)."""
        import h5py

        labels = []
        for path in self.files:
            with h5py.File(path, "r") as shard:
                labels.append(shard["masked_lm_ids"][()][shard["masked_lm_positions"][()] != 0])
        return np.concatenate(labels).astype(np.int64)


def collate(items: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack ``items`` ([batch, ...] int64) and cut the sequences to the batch's longest (its
    padding carries no attention and no prediction: exact, as NVIDIA's unpadding is)."""
    batch = {key: np.stack([item[key] for item in items]) for key in KEYS}
    length = max(1, int(batch["input_mask"].sum(1).max()))
    for key in ("input_ids", "segment_ids", "input_mask"):
        batch[key] = batch[key][:, :length]
    return batch


def masked_labels(masked_lm_ids: np.ndarray, masked_lm_positions: np.ndarray) -> np.ndarray:
    """``masked_lm_ids`` with :data:`IGNORE` where unused (position 0 is [CLS], never masked:
    create_pretraining_data zero-pads the positions)."""
    return np.where(masked_lm_positions == 0, IGNORE, masked_lm_ids)


#: bert_config.json keys that must agree with the case's configuration.
ARCHITECTURE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size", "hidden_act")


def padded_vocab(size: int) -> int:
    """``size`` rounded up to a multiple of 8 (NVIDIA modeling.py BertPreTrainedModel)."""
    return size + (-size) % 8


def check_bert_config(config: Mapping[str, Any], path: Path) -> None:
    """Raise ValueError naming ``path`` and the key where bert_config.json disagrees with the
    case's configuration (its ``vocab_size`` padded with :func:`padded_vocab`).

    Raises:
        FileNotFoundError: no such file; ValueError: not JSON, or a key disagrees.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (bert_config_path)")
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    wanted = {key: config[key] for key in ARCHITECTURE}
    wanted["vocab_size"] = config["vocab_size"]
    for key, value in wanted.items():
        got = found.get(key)
        if key == "vocab_size" and isinstance(got, int):
            got = padded_vocab(got)
        if got != value:
            raise ValueError(f"{path}: {key} is {found.get(key)!r}, the configuration says "
                             f"{value!r}" + (" (padded to a multiple of 8)"
                                             if key == "vocab_size" else ""))


def poly_warmup_factor(step: int, warmup_steps: int, total_steps: int,
                       start_warmup_step: int = 0) -> float:
    """FlagPerf's LinearWarmupPolyDecayScheduler (degree 1, end 0) as a factor of the base
    learning rate after ``step`` updates: ``(step - start) / warmup`` during the warmup, then
    ``1 - min(step / total_steps, 1)``. Both cases' schedule (torch's ``LambdaLR``, paddle's
    ``LambdaDecay``)."""
    since = step - start_warmup_step
    if since < warmup_steps:
        return max(0.0, since / warmup_steps)
    return 1.0 - min(step / max(1, total_steps), 1.0)
