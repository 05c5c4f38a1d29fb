"""MLPerf's BERT hdf5 shards as numpy arrays (format ``mlperf_bert_hdf5``): what the paddle
case reads, the same samples, order rules and masked-LM labels as the pytorch case
(``benchmarks/bert/pytorch/run_pretraining.py``). No framework is imported here.

Layout under data_dir: every ``part*`` file of ``2048_shards_uncompressed/`` for training and of
``eval_set_uncompressed/`` for evaluation, each with ``input_ids``, ``input_mask``,
``segment_ids`` [samples, max_seq_length], ``masked_lm_positions``, ``masked_lm_ids``
[samples, max_predictions_per_seq] (zero-padded) and ``next_sentence_labels`` [samples]
(MLCommons training, language_model/tensorflow/bert; NVIDIA's create_pretraining_data.py).
"""

from __future__ import annotations

import bisect
import queue
import threading
from pathlib import Path
from typing import Iterable, Iterator

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


def train_batches(samples: int, batch_size: int, rank: int, world_size: int, seed: int,
                  epoch: int) -> list[list[int]]:
    """This rank's training batches of an epoch (1, 2, ...): a permutation of ``samples``
    drawn from ``seed + epoch - 1`` (the same on every rank), cut to a multiple of the world
    size, every ``world_size``-th index from ``rank`` on, in whole batches only, as
    ``torch.utils.data.DistributedSampler(shuffle=True, drop_last=True)`` deals them.

    Raises:
        ValueError: this rank's share holds no whole batch.
    """
    order = np.random.default_rng(seed + epoch - 1).permutation(samples)
    total = samples // world_size * world_size
    mine = order[rank:total:world_size]
    whole = len(mine) // batch_size
    if whole == 0:
        raise ValueError(f"the train set ({samples} samples over {world_size} ranks) holds no "
                         f"whole batch of {batch_size}")
    return [mine[i * batch_size:(i + 1) * batch_size].tolist() for i in range(whole)]


def eval_batches(samples: int, batch_size: int, rank: int, world_size: int) -> list[list[int]]:
    """This rank's evaluation batches: every ``world_size``-th sample from ``rank`` on, in
    order, the last batch possibly short (every sample is evaluated once over the ranks)."""
    mine = list(range(rank, samples, world_size))
    return [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]


def batches(dataset: BertShards, index_batches: Iterable[list[int]],
            prefetch: int = 2) -> Iterator[dict[str, np.ndarray]]:
    """The collated batches of ``index_batches``, read ahead by ``prefetch`` batches in a
    background thread (h5py serialises its own calls; the device computes meanwhile). An error
    while reading is raised here, in the consumer; a consumer that stops early leaves the
    (daemon) reader blocked, which process exit ends."""
    if prefetch <= 0:
        for indices in index_batches:
            yield collate([dataset[i] for i in indices])
        return
    ready: queue.Queue = queue.Queue(maxsize=prefetch)
    done = object()

    def read() -> None:
        try:
            for indices in index_batches:
                ready.put(collate([dataset[i] for i in indices]))
        except BaseException as err:  # handed to the consumer, raised there
            ready.put(err)
        ready.put(done)

    threading.Thread(target=read, name="bert-shards", daemon=True).start()
    while (item := ready.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item
