"""wav2vec 2.0 BASE self-supervised pretraining on LibriSpeech to a contrastive accuracy target
(FlagPerf wav2vec2).

The model is ``model.py``; data, loss and accuracy are ``pretraining.py``; the loop is
``driver/torch/trainer.py``.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # this case, then benchmarks/ (driver)

from driver.dist import exit_rank  # noqa: E402
from pretraining import run_case  # noqa: E402


def main() -> int:
    return run_case(__doc__.splitlines()[0])


if __name__ == "__main__":
    exit_rank(main())
