"""Format ``bert_eval_text``: the text and the BERT FlagPerf's bertLarge inference case reads.

Real layout (under data_dir; FlagPerf ``inference/benchmarks/bertLarge/README.md``):

* ``eval.txt``: MLPerf BERT's evaluation text (``results_text.tar.gz`` of MLPerf's BERT data
  folder, checked by ``bert_reference_results_text_md5.txt``): Wikipedia articles, one sentence
  a line, articles separated by blank lines, as create_pretraining_data.py reads text. The case
  tokenises it whole, masks tokens at ``mask_ratio`` and cuts it into ``seq_length`` chunks;
* ``weights/`` (the case's ``weight_dir``): ``BertForMaskedLM.from_pretrained(
  "bert-large-uncased")`` saved with ``save_pretrained``: ``config.json``, the weights
  (``model.safetensors`` or, from transformers before 4.35, ``pytorch_model.bin``; a sharded
  index for large models) and the tokenizer's ``vocab.txt`` (the case's ``BertTokenizer`` reads
  it from the same folder, so the tokenizer must be saved there too).

What the checker accepts: ``flagperf_host.checks.bert_eval_text.check``.

Tiny data (:func:`generate`), from Debian's licence texts as ``mlperf_bert_hdf5`` makes them
(its :func:`~flagperf_ansible.datasets.mlperf_bert_hdf5.documents`, vocabulary and weights):

* ``eval.txt``: the two licences that format holds out for evaluation (GPL-2 and MPL-1.1), one
  sentence a line, a blank line between them (8705 WordPiece tokens);
* ``cpu_weights/``: the cpu profile's stand-in for bert-large, NOT its weights: a BERT of
  :data:`TINY_MODEL` (2 layers of width 64, 2 heads, FFN 256, 128 positions) over the
  4096-id WordPiece vocabulary that ``mlperf_bert_hdf5`` trains (BERT-uncased's special ids:
  ``[MASK]`` is 103 as in bert-large-uncased), with random weights (numpy seed
  :data:`TINY_SEED`, BERT's initialisation), saved by ``BertForMaskedLM.save_pretrained`` and
  ``BertTokenizer.save_pretrained``, with a ``README.md`` and a ``flagperf_note`` in
  ``config.json`` saying what it is. Its ``model.safetensors`` is pinned by SHA-256 in the
  case's cpu profile.
"""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path

from flagperf_ansible.datasets import mlperf_bert_hdf5
from flagperf_ansible.datasets.registry import Format
from flagperf_host import data_check

NAME = "bert_eval_text"
EVAL_FILE = "eval.txt"
TINY_WEIGHT_DIR = "cpu_weights"
TINY_SEED = 0
#: The stand-in's ``BertConfig`` (bert-large-uncased: 1024 wide, 24 layers, 16 heads, FFN 4096,
#: 512 positions, 30522 ids).
TINY_MODEL = {"vocab_size": mlperf_bert_hdf5.VOCAB, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 256, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "max_position_embeddings": 128, "type_vocab_size": 2, "initializer_range": 0.02,
              "layer_norm_eps": 1e-12, "pad_token_id": mlperf_bert_hdf5.PAD}
NOTE = ("cpu-profile stand-in, NOT bert-large-uncased: a 2-layer BERT of width 64 with random "
        "weights (numpy seed %d) over a 4096-id WordPiece vocabulary trained on Debian's licence "
        "texts; written by `flagperf-ansible data prepare %s`" % (TINY_SEED, NAME))


def eval_text(docs: dict[str, list[str]]) -> str:
    """``eval.txt`` from ``{document: sentences}``: the held-out documents
    (``mlperf_bert_hdf5.EVAL_DOCUMENTS``) one sentence a line, a blank line between them."""
    return "\n".join("\n".join(docs[name]) + "\n" for name in mlperf_bert_hdf5.EVAL_DOCUMENTS)


def tiny_state_dict(model_keys, seed: int = TINY_SEED) -> dict:
    """The stand-in's weights, ``{state-dict key: float32 tensor}`` for the keys ``model_keys``
    of a ``BertForMaskedLM``: ``mlperf_bert_hdf5.checkpoint_arrays`` of :data:`TINY_MODEL` (the
    same names; its pooler and next-sentence head dropped), the decoder's bias the prediction
    bias (transformers ties them)."""
    import numpy as np
    import torch

    arrays = mlperf_bert_hdf5.checkpoint_arrays(TINY_MODEL, seed)
    arrays["cls.predictions.decoder.bias"] = arrays["cls.predictions.bias"]
    return {key: torch.from_numpy(np.ascontiguousarray(arrays[key])) for key in model_keys}


@contextlib.contextmanager
def _quiet_transformers():
    """transformers without its progress bars (they would fill `data prepare`'s output)."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()


def write_tiny_weights(folder: Path, vocab: list[str], seed: int = TINY_SEED) -> None:
    """The stand-in (module docstring) as a ``save_pretrained`` folder: ``config.json``,
    ``model.safetensors``, ``vocab.txt`` with the tokenizer's files, ``README.md``; byte for
    byte the same on every run of the same transformers.

    Raises:
        ImportError: torch or transformers is not installed (the ``local`` extra).
        OSError: ``folder`` cannot be written.
    """
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    with _quiet_transformers():
        model = BertForMaskedLM(BertConfig(**TINY_MODEL, flagperf_note=NOTE))
        model.load_state_dict(tiny_state_dict(model.state_dict(), seed), strict=True)
        model.save_pretrained(folder)
        (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        BertTokenizer.from_pretrained(folder).save_pretrained(folder)
    (folder / "README.md").write_text(f"# {TINY_WEIGHT_DIR}\n\n{NOTE}.\n", encoding="utf-8")
    # safetensors writes its file owner-only (0600); give it the mode the folder's other files
    # have (the umask's), so that a container running as another user reads it as they are.
    (folder / "model.safetensors").chmod((folder / "config.json").stat().st_mode & 0o777)


def generate(target: Path) -> dict[str, int]:
    """Write the tiny data under ``target`` (module docstring); returns what was written per
    part.

    Raises:
        FileNotFoundError: no licence texts under ``mlperf_bert_hdf5.LICENSES``.
        ImportError: tokenizers, torch or transformers is not installed (the ``local`` extra).
        OSError: ``target`` cannot be written.
    """
    docs = mlperf_bert_hdf5.documents()
    vocab = mlperf_bert_hdf5.train_vocabulary([" ".join(s) for s in docs.values()])
    text = eval_text(docs)
    (target / EVAL_FILE).write_text(text, encoding="utf-8")
    write_tiny_weights(target / TINY_WEIGHT_DIR, vocab)
    return {f"{EVAL_FILE} sentences": sum(1 for line in text.splitlines() if line),
            f"{TINY_WEIGHT_DIR}/vocab.txt": len(vocab), "cpu stand-in model": 1}


FORMAT = Format(
    name=NAME,
    description="MLPerf BERT's eval.txt + a transformers BERT folder (config.json, weights,"
                " vocab.txt; FlagPerf's weights/) (tiny: two of Debian's licence texts, a"
                " random 2-layer BERT stand-in in cpu_weights/)",
    check=partial(data_check.check, NAME),
    generate=generate,
)
