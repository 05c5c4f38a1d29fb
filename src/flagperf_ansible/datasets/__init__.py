"""Data-set formats: checkers for preflight and generators of tiny data for CI.

    >>> from flagperf_ansible import datasets
    >>> [f.name for f in datasets.formats()]          # what a case.yml may name
    >>> datasets.check("coco2017", "/data/coco")       # [] when the layout is right
    >>> datasets.prepare("coco2017", "/tmp/coco")      # tiny data in that layout

The checkers live in the host package, ``flagperf_host.checks`` (one module per format,
standard library only; ``flagperf_host.data_check`` runs them on hosts at preflight); each
generator in its format's module here.
"""

from __future__ import annotations

from pathlib import Path

from flagperf_ansible.datasets import (coco2017, imagenet, ljspeech, librispeech, mlperf_bert_hdf5,
                                       wmt14_en_de_fairseq, wmt14_en_de_text)
from flagperf_ansible.datasets import cpm_text
from flagperf_ansible.datasets import glm_record_hdf5
from flagperf_ansible.datasets import bert_eval_text
from flagperf_ansible.datasets import imagenet_tfrecord
from flagperf_ansible.datasets import megatron_indexed
from flagperf_ansible.datasets.registry import (Format, UnknownFormat, formats, get, names,
                                                register, unregister)

__all__ = ["Format", "UnknownFormat", "check", "formats", "get", "names", "prepare", "register",
           "unregister"]

for _module in (imagenet, coco2017, ljspeech, librispeech, mlperf_bert_hdf5, wmt14_en_de_text,
                wmt14_en_de_fairseq):
    register(_module.FORMAT, replace=True)
register(cpm_text.FORMAT, replace=True)
register(glm_record_hdf5.FORMAT, replace=True)
register(bert_eval_text.FORMAT, replace=True)
register(imagenet_tfrecord.FORMAT, replace=True)
register(megatron_indexed.FORMAT, replace=True)


def check(format_name: str, path: str | Path) -> list[str]:
    """Problems of the data set at ``path`` in format ``format_name`` (one line each, naming
    the file or folder); an empty list when its layout is right.

    Raises:
        UnknownFormat: no such format.
    """
    return get(format_name).check(Path(path))


def prepare(format_name: str, target: str | Path) -> dict[str, int]:
    """Write tiny data in format ``format_name`` (or an alias, e.g. ``digits``) under
    ``target``; returns what was written per part.

    Raises:
        UnknownFormat: no such format.
        OSError: ``target`` cannot be written.
    """
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    return get(format_name).generate(target)
