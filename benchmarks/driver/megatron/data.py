"""Training samples of an LLM case from Megatron's indexed data set (``<prefix>.bin/.idx``,
the ``megatron_indexed`` format).

As megatron-core's ``GPTDataset`` samples them: the documents (each ending with its EOD
token) are read as one stream of tokens, cut into windows of ``seq_length + 1`` tokens that
overlap by one (a window's last token is the next one's first), and each window gives the
inputs (its first ``seq_length`` tokens) and the labels (its last ``seq_length``). The
windows are shuffled once per epoch with the case's seed. Step ``s`` trains on global-batch
``s``: the same windows whatever the parallel layout, so loss curves of different layouts
compare step by step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


class TokenWindows:
    """The windows of one indexed data set.

    Args:
        prefix: the data set's path without ``.bin``/``.idx``.
        seq_length: tokens per sample.
        seed: the shuffling seed (epoch ``e`` uses ``seed + e``).

    Raises:
        ValueError: the data set holds fewer than ``seq_length + 1`` tokens.
        FileNotFoundError: no such data set.
    """

    def __init__(self, prefix: str | Path, seq_length: int, seed: int) -> None:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        self.dataset = IndexedDataset(str(prefix))
        self.seq_length = seq_length
        self.seed = seed
        lengths = np.asarray(self.dataset.sequence_lengths, dtype=np.int64)
        #: Where each document starts in the token stream.
        self.starts = np.concatenate(([0], np.cumsum(lengths)))
        self.tokens = int(self.starts[-1])
        self.count = (self.tokens - 1) // seq_length
        if self.count < 1:
            raise ValueError(f"{prefix}: {self.tokens} tokens, fewer than one sample of "
                             f"{seq_length + 1}")
        self._orders: dict[int, np.ndarray] = {}

    def max_token(self, documents: int = 1000) -> int:
        """The largest token id of the first ``documents`` documents (to check the data set's
        vocabulary against the model's without reading a large data set whole)."""
        return max(int(self.dataset[i].max()) for i in range(min(documents, len(self.dataset))))

    def window(self, index: int) -> np.ndarray:
        """Window ``index``: ``seq_length + 1`` token ids (int64), across documents."""
        begin, end = index * self.seq_length, index * self.seq_length + self.seq_length + 1
        first = int(np.searchsorted(self.starts, begin, side="right")) - 1
        parts = []
        while begin < end:
            offset = begin - int(self.starts[first])
            take = min(end - begin, int(self.starts[first + 1]) - begin)
            parts.append(self.dataset.get(first, offset=offset, length=take))
            begin += take
            first += 1
        return np.concatenate(parts).astype(np.int64)

    def sample_index(self, position: int) -> int:
        """The window at ``position`` of the shuffled stream of epochs."""
        epoch, within = divmod(position, self.count)
        if epoch not in self._orders:
            self._orders = {epoch: np.random.RandomState(self.seed + epoch).permutation(self.count)}
        return int(self._orders[epoch][within])

    def micro_batches(self, step: int, global_batch: int, micro_batch: int, dp_rank: int,
                      dp_size: int) -> list[torch.Tensor]:
        """This data-parallel rank's micro-batches of step ``step`` (from 1), each a
        ``[micro_batch, seq_length + 1]`` int64 tensor. As Megatron's pretraining sampler,
        each micro-batch round takes ``micro_batch * dp_size`` consecutive samples of the
        global batch and rank ``r`` the ``r``-th ``micro_batch`` of them."""
        first = (step - 1) * global_batch
        rounds = global_batch // (micro_batch * dp_size)
        batches = []
        for k in range(rounds):
            base = first + k * micro_batch * dp_size + dp_rank * micro_batch
            rows = [self.window(self.sample_index(base + i)) for i in range(micro_batch)]
            batches.append(torch.from_numpy(np.stack(rows)))
        return batches
