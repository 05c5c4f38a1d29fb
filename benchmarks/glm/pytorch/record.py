"""ReCoRD as FlagPerf's glm case reads it: the hdf5 files of BAAI's ``glm_train_dataset.zip``
(``flagperf_ansible.datasets.glm_record_hdf5`` describes the layout), read with h5py.

FlagPerf reads them with ``h5sparse.File`` (``training/benchmarks/glm/pytorch/dataloaders/
dataloader.py``): each key is a scipy CSR matrix stored as a group with ``data``, ``indices``
and ``indptr`` and the attribute ``h5sparse_shape``. The same arrays are read here with h5py and
a row is made dense when a sample is taken, as FlagPerf's ``getrow(i).toarray()`` does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: Keys of a sample, each a CSR matrix; the last two only in the evaluation file.
MATRICES = ("text", "position", "mask", "target", "logit_mask", "choice_start_end")
EVAL_MATRICES = ("answer_start_end", "answer_idx")


class CsrRows:
    """One h5sparse CSR matrix in memory: ``row(i)`` -> dense int64 ``[columns]``."""

    def __init__(self, group, where: str) -> None:
        try:
            self.shape = tuple(int(n) for n in group.attrs["h5sparse_shape"])
            self.data = group["data"][()]
            self.indices = group["indices"][()]
            self.indptr = group["indptr"][()]
        except KeyError as missing:
            raise ValueError(f"{where}: not an h5sparse CSR group ({missing})") from None
        if len(self.shape) != 2 or len(self.indptr) != self.shape[0] + 1:
            raise ValueError(f"{where}: indptr has {len(self.indptr)} entries for shape "
                             f"{list(self.shape)}")

    def row(self, index: int) -> np.ndarray:
        start, end = self.indptr[index], self.indptr[index + 1]
        dense = np.zeros(self.shape[1], dtype=np.int64)
        dense[self.indices[start:end]] = self.data[start:end]
        return dense

    def dense(self) -> np.ndarray:
        """The whole matrix, ``[rows, columns]`` int64 (for the small index matrices)."""
        dense = np.zeros(self.shape, dtype=np.int64)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        dense[rows, self.indices] = self.data
        return dense


class RecordSet(torch.utils.data.Dataset):
    """The samples of one ReCoRD hdf5 file: ``{"text": [C, T], "position": [C, 2, T],
    "sep": [C], "target": [C, T], "logit_mask": [C, T]}`` (int64; C the sample's candidates,
    T the file's sequence length) and, in evaluation, ``"answers"``: the indices of its correct
    candidates. Training samples have their correct candidate first.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a key is missing or not a CSR group, or the sequence length is not
            ``seq_length`` (``max_seq_length``: the model's positions and the FLOPs count).
    """

    def __init__(self, path: Path, evaluation: bool, seq_length: int) -> None:
        import h5py

        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such ReCoRD hdf5 file")
        self.evaluation = evaluation
        keys = MATRICES + (EVAL_MATRICES if evaluation else ())
        with h5py.File(path, "r") as handle:
            missing = [key for key in keys if key not in handle]
            if missing:
                raise ValueError(f"{path}: no {', '.join(missing)} (GLM's ReCoRD hdf5 keys: "
                                 f"{', '.join(MATRICES + EVAL_MATRICES)})")
            matrices = {key: CsrRows(handle[key], f"{path}: {key}") for key in keys}
        self.text, self.position = matrices["text"], matrices["position"]
        self.target, self.logit_mask = matrices["target"], matrices["logit_mask"]
        self.sep = matrices["mask"].dense().reshape(-1)
        self.choices = matrices["choice_start_end"].dense()
        if self.text.shape[1] != seq_length:
            raise ValueError(f"{path}: text: sequences of {self.text.shape[1]} tokens, the "
                             f"configuration's max_seq_length is {seq_length}")
        rows = self.text.shape[0]
        for key, matrix, expected in (("position", self.position, 2 * rows),
                                      ("target", self.target, rows),
                                      ("logit_mask", self.logit_mask, rows)):
            if matrix.shape != (expected, seq_length):
                raise ValueError(f"{path}: {key}: shape {list(matrix.shape)}, expected "
                                 f"{[expected, seq_length]} for {rows} candidates")
        if len(self.sep) != rows or self.choices.size and (
                self.choices.shape[1] != 2 or self.choices.max() > rows):
            raise ValueError(f"{path}: mask or choice_start_end do not match the {rows} "
                             "candidates of text")
        if evaluation:
            self.answer_spans = matrices["answer_start_end"].dense()
            self.answers = matrices["answer_idx"].dense().reshape(-1)

    def __len__(self) -> int:
        return len(self.choices)

    def candidate_tokens(self, index: int) -> list[tuple[int, ...]]:
        """Sample ``index``'s candidates, each as the tuple of its token ids (its ``target``
        where ``logit_mask`` is 1), in the file's order."""
        start, end = (int(n) for n in self.choices[index])
        return [tuple(int(t) for t in self.target.row(i)[self.logit_mask.row(i) == 1])
                for i in range(start, end)]

    def __getitem__(self, index: int) -> dict[str, Any]:
        start, end = (int(n) for n in self.choices[index])
        rows = range(start, end)
        sample = {
            "text": np.stack([self.text.row(i) for i in rows]),
            "position": np.stack([np.stack([self.position.row(2 * i),
                                            self.position.row(2 * i + 1)]) for i in rows]),
            "sep": self.sep[start:end],
            "target": np.stack([self.target.row(i) for i in rows]),
            "logit_mask": np.stack([self.logit_mask.row(i) for i in rows]),
        }
        if self.evaluation:
            first, last = (int(n) for n in self.answer_spans[index])
            sample["answers"] = [int(n) for n in self.answers[first:last]]
        return sample


def answer_prior(train_set: RecordSet, val_set: RecordSet) -> float:
    """The accuracy (0..1) on ``val_set`` of the better of two priors over candidates, learnt
    from ``train_set``'s answers (a training sample's first candidate) and blind to passage and
    query: the candidate most often the answer, and the one most often the answer of the times
    it was offered (add-one smoothed, (answers + 1) / (offers + 2)); ties go to the candidate
    that comes first. The best input-blind predictor of the cpu profile's baselines
    (``driver.convergence``); 0.0 for an empty ``val_set``.

    Raises:
        ValueError: ``train_set`` has no samples.
    """
    answers: Counter = Counter()
    offers: Counter = Counter()
    for index in range(len(train_set)):
        candidates = train_set.candidate_tokens(index)
        answers[candidates[0]] += 1
        offers.update(candidates)
    if not offers:
        raise ValueError("no training samples to learn an answer prior from")
    priors = (lambda c: answers[c], lambda c: (answers[c] + 1) / (offers[c] + 2))
    correct = [0] * len(priors)
    for index in range(len(val_set)):
        candidates = val_set.candidate_tokens(index)
        first, last = (int(n) for n in val_set.answer_spans[index])
        right = {int(n) for n in val_set.answers[first:last]}
        for number, prior in enumerate(priors):
            best = max(range(len(candidates)), key=lambda i: (prior(candidates[i]), -i))
            correct[number] += best in right
    return max(correct) / len(val_set) if len(val_set) else 0.0


def collate(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """A batch as FlagPerf's ``my_collate`` makes it: every sample's candidates padded to the
    batch's largest number C by repeating its first one, ``candidate_mask`` ``[B, C]`` (1 for a
    real candidate: FlagPerf's ``loss_mask``), ``label`` ``[B]`` (0: the correct candidate comes
    first in training) and, in evaluation, ``answer_mask`` ``[B, C]`` (True for a correct
    candidate). ``text`` comes first: the trainer counts samples by its first dimension."""
    choices = max(len(sample["text"]) for sample in samples)

    def padded(value: np.ndarray) -> np.ndarray:
        return np.concatenate([value] + [value[:1]] * (choices - len(value)))

    batch = {key: torch.from_numpy(np.stack([padded(sample[key]) for sample in samples]))
             for key in ("text", "position", "sep", "target", "logit_mask")}
    mask = torch.zeros(len(samples), choices)
    for row, sample in enumerate(samples):
        mask[row, :len(sample["text"])] = 1.0
    batch["candidate_mask"] = mask
    batch["label"] = torch.zeros(len(samples), dtype=torch.long)
    if "answers" in samples[0]:
        answers = torch.zeros(len(samples), choices, dtype=torch.bool)
        for row, sample in enumerate(samples):
            answers[row, sample["answers"]] = True
        batch["answer_mask"] = answers
    return batch
