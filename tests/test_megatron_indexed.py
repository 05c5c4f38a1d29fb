"""The ``megatron_indexed`` data format (the Megatron GPT cases' tokens): its tiny data read back
by megatron-core's own ``IndexedDataset`` and tokenized as GPT-2's tokenizer reads its files,
the host checker's index layout against megatron-core's writer, what the checker catches, and
the same bytes from another process."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flagperf_ansible import datasets
from flagperf_ansible.datasets import megatron_indexed
from flagperf_host.readers.megatron_index import MEGATRON_DTYPE_SIZES, megatron_index

ROOT = Path(__file__).resolve().parents[1]
FILES = ["gpt2-merges.txt", "gpt2-vocab.json", "gpt_text_document.bin", "gpt_text_document.idx"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("megatron_indexed")
    return root, datasets.prepare("megatron_indexed", root)


@pytest.fixture
def broken(tiny, tmp_path) -> Path:
    """A writable copy of the tiny data."""
    return Path(shutil.copytree(tiny[0], tmp_path / "data"))


def test_tiny_data_passes_its_checker(tiny):
    root, counts = tiny
    assert datasets.check("megatron_indexed", root) == []
    assert sorted(p.name for p in root.iterdir()) == FILES
    texts = megatron_indexed.documents()
    assert counts["documents"] == len(texts) > 1000  # paragraphs, not the 79 topics
    assert counts["vocab"] == megatron_indexed.VOCAB_SIZE
    # uint16 tokens, as megatron-core picks for a vocabulary under 65500.
    assert (root / "gpt_text_document.bin").stat().st_size == 2 * counts["tokens"]


def test_megatron_core_reads_back_gpt2_tokens(tiny):
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from transformers import GPT2Tokenizer

    root, counts = tiny
    # GPT-2's own tokenizer (transformers' port of OpenAI's encoder.py) on the saved files.
    gpt2 = GPT2Tokenizer(str(root / "gpt2-vocab.json"), str(root / "gpt2-merges.txt"))
    assert len(gpt2) == megatron_indexed.VOCAB_SIZE
    eod = gpt2.convert_tokens_to_ids("<|endoftext|>")
    expected = [gpt2.encode(text) + [eod] for text in megatron_indexed.documents()]
    dataset = IndexedDataset(str(root / "gpt_text_document"))
    assert dataset.index.dtype is np.uint16
    assert dataset.document_indices.tolist() == list(range(len(expected) + 1))
    assert [dataset[i].tolist() for i in range(len(dataset))] == expected
    assert int(dataset.sequence_lengths.sum()) == counts["tokens"]


def test_the_checker_reads_the_index_as_megatron_core_writes_it(tmp_path):
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

    assert MEGATRON_DTYPE_SIZES == {code.value: DType.size(code.value) for code in DType}
    for code in DType:
        prefix = str(tmp_path / code.name)
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=DType.dtype_from_code(code.value))
        # Documents of several sequences (preprocess_data.py --split-sentences), one empty.
        for document, lengths in (([1, 2, 3, 4, 5], [2, 3]), ([], [0]), ([7], [1])):
            builder.add_document(document, lengths)
        builder.finalize(prefix + ".idx")
        dataset = IndexedDataset(prefix)
        read = (dataset.index.dtype_size, dataset.index.sequence_count,
                len(dataset.document_indices) - 1, int(dataset.sequence_lengths.sum()))
        assert megatron_index(prefix + ".idx") == read == (DType.size(code.value), 4, 3, 6)
        assert megatron_indexed_problems(tmp_path, code.name) == []


def megatron_indexed_problems(folder: Path, prefix: str) -> list[str]:
    """The checker's problems of ``folder/prefix.{bin,idx}`` copied under the format's names,
    less those of the BPE files (not there)."""
    from flagperf_host.checks import megatron_indexed as checker

    scratch = folder / (prefix + "_check")
    scratch.mkdir()
    for suffix in (".bin", ".idx"):
        shutil.copy(folder / (prefix + suffix), scratch / (checker.MEGATRON_PREFIX + suffix))
    return [line for line in checker.check(str(scratch)) if "gpt2-" not in line]


# Each breakage of a copy of the tiny data and the one line the checker gives for it.

def _truncated_bin(root: Path, documents: int) -> str:
    data = root / "gpt_text_document.bin"
    size = data.stat().st_size
    data.write_bytes(data.read_bytes()[:-2])
    return (f"gpt_text_document.bin: {size - 2} bytes, the index's {documents} sequences hold "
            f"{size // 2} tokens of 2 bytes ({size})")


def _wrong_magic(root: Path, documents: int) -> str:
    idx = root / "gpt_text_document.idx"
    idx.write_bytes(b"TNTIDX\x00\x00\x00" + idx.read_bytes()[9:])
    return "gpt_text_document.idx: not a Megatron index (starts with b'TNTIDX\\x00\\x00\\x00')"


def _truncated_idx(root: Path, documents: int) -> str:
    idx = root / "gpt_text_document.idx"
    size = idx.stat().st_size
    idx.write_bytes(idx.read_bytes()[:-8])
    return (f"gpt_text_document.idx: index is {size - 8} bytes, its counts ({documents} "
            f"sequences, {documents + 1} document indices) say {size}")


def _no_merges(root: Path, documents: int) -> str:
    (root / "gpt2-merges.txt").unlink()
    return "gpt2-merges.txt: missing file"


def _no_eod(root: Path, documents: int) -> str:
    (root / "gpt2-vocab.json").write_text('{"a": 0}', encoding="utf-8")
    return "gpt2-vocab.json: no <|endoftext|> token (the end-of-document id)"


@pytest.mark.parametrize("breakage", [_truncated_bin, _wrong_magic, _truncated_idx, _no_merges,
                                      _no_eod], ids=lambda f: f.__name__.lstrip("_"))
def test_checker_catches_breakage(tiny, broken, breakage):
    expected = breakage(broken, tiny[1]["documents"])
    assert datasets.check("megatron_indexed", broken) == [expected]


def test_another_process_writes_the_same_bytes(tiny, tmp_path):
    root, _ = tiny
    paths = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    # Another hash seed too: nothing may hang on the order of a set or dict.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONHASHSEED": "1234"}
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "data", "prepare",
                           "megatron_indexed", str(tmp_path / "again")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    _, mismatch, errors = filecmp.cmpfiles(root, tmp_path / "again", FILES, shallow=False)
    assert (mismatch, errors) == ([], [])


def test_without_megatron_core_prepare_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "megatron.core.datasets.indexed_dataset", None)
    with pytest.raises(ImportError, match=r"megatron_indexed: .*\(pip install megatron-core\)"):
        datasets.prepare("megatron_indexed", tmp_path)


def test_a_host_checks_it_on_a_bare_python(tiny, broken):
    """As preflight runs the check: from the host archive, a python3 without site packages."""
    import host_side

    python, *rest = host_side.command("data_check", "megatron_indexed", str(tiny[0]))
    done = subprocess.run([python, "-S", *rest], env=host_side.env(), capture_output=True,
                          text=True, timeout=60, check=False, cwd="/")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    (broken / "gpt2-merges.txt").write_text("")
    python, *rest = host_side.command("data_check", "megatron_indexed", str(broken))
    done = subprocess.run([python, "-S", *rest], env=host_side.env(), capture_output=True,
                          text=True, timeout=60, check=False, cwd="/")
    assert (done.returncode, done.stdout) == (1, "gpt2-merges.txt: empty first line\n")
