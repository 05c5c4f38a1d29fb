"""The paddle case's batches of MLPerf's BERT shards (``bert.common.BertShards``, shared with
the pytorch case): each rank's share of an epoch, as ``DistributedSampler`` deals it, read
ahead in a thread. No framework is imported here."""

from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator

import numpy as np

from ..common import BertShards, collate


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
