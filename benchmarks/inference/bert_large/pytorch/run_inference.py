"""BERT-large masked-LM inference: the vendor's compiler against PyTorch (FlagPerf bertLarge).

The case's functions are ``case.py``; the seven steps are ``driver/torch/inference.py``.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[2])]  # this case, then benchmarks/ (driver)

from driver.dist import exit_rank  # noqa: E402
from driver.torch.inference import main  # noqa: E402
import case  # noqa: E402

if __name__ == "__main__":
    exit_rank(main(case, __doc__.splitlines()[0]))
