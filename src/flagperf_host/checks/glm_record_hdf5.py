"""GLM's ReCoRD hdf5: the two files FlagPerf's glm case reads."""

import os

from flagperf_host.checks.common import need
from flagperf_host.readers.hdf5 import is_hdf5


# FlagPerf glm's train_data and eval_data (training/benchmarks/glm/pytorch/config/_base.py).
GLM_RECORD_FILES = ("ReCoRD/glm_train_eval_hdf5_sparse/train_hdf5/train_sparse.hdf5",
                    "ReCoRD/glm_train_eval_hdf5_sparse/eval_hdf5/eval_sparse.hdf5")


def check(root):
    """SuperGLUE ReCoRD as FlagPerf's glm case reads it (BAAI's ``glm_train_dataset.zip``):
    ``ReCoRD/glm_train_eval_hdf5_sparse/train_hdf5/train_sparse.hdf5`` and
    ``.../eval_hdf5/eval_sparse.hdf5``, HDF5 files (their signature is read). What is inside,
    CSR groups written by h5sparse, is the case loader's to check: its members are groups,
    which this index reader does not describe. The initial checkpoint beside them is the
    case's ``checkpoint``, checked apart.
    """
    problems = []
    for relative in GLM_RECORD_FILES:
        if need(root, relative, problems) and not is_hdf5(os.path.join(root, relative)):
            problems.append("%s: not an HDF5 file (no signature)" % relative)
    return problems
