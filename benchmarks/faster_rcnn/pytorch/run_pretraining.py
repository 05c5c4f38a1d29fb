"""Faster R-CNN trained on COCO 2017 to a bbox mAP target (FlagPerf faster_rcnn).

The model is ``model.py``; the rest is ``driver/torch/detection.py`` (``run_case``).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # this case, then benchmarks/ (driver)

from driver.dist import exit_rank  # noqa: E402
from driver.torch.detection import run_case  # noqa: E402
from model import build_model  # noqa: E402


def main() -> int:
    return run_case(__doc__.splitlines()[0], "faster_rcnn", "mAP", "target_mAP", build_model)


if __name__ == "__main__":
    exit_rank(main())
