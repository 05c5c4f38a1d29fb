"""FlagPerf's own results folders, read in memory.

FlagPerf writes ``<case>/round<k>/<ip>_noderank<i>/rank<R>.out.log`` and no run.json. Its
rounds are read into the round documents of ``flagperf_ansible.results.rounds`` without writing a file
into the folder (``summarize`` writes only the summaries there, ``compare`` nothing). FlagPerf's
published table is training, so its rounds are judged as training rounds by the case's own
``converged`` claim; they carry no case contract, and the directions of their figures come
from their names (``figure_direction``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flagperf_ansible.results.layout import NODE_DIR, RUN_FILE
from flagperf_ansible.results.rounds import parse_round
from flagperf_ansible.config.suites import suite

_ROUND = re.compile(r"^round(\d+)$")

#: Which way is better by name, for figures with no case contract (FlagPerf's logs), after the
#: training suite's own figures: first match wins; +1 higher is better, -1 lower, 0 not judged.
NAME_DIRECTIONS: tuple[tuple[str, int], ...] = (
    (r"^target_", 0),                  # the case's goal, not a measurement
    (r"^num_", 0),                     # counts (samples trained): not a quality
    (r"_per_second$", +1),             # FlagPerf's throughput names
    (r"^p_", +1),                      # throughput
    (r"_time$", -1),                   # seconds
    (r"latency", -1),
    # error-like quality metrics: loss, word/character error rate, perplexity, error
    (r"^final_.*(loss|wer|cer|perplexity|ppl|error|err|mse|mae|rmse)", -1),
    # accuracy-like ones: accuracy, mAP, BLEU, F1, AUC, IoU, exact match, ROUGE
    (r"^final_.*(acc|map|bleu|f1|auc|iou|exact_match|rouge|score)", +1),
)


def figure_direction(figure: str) -> int:
    """+1 when higher is better, -1 when lower is better, 0 when not judged: the training
    suite's figure list (``suites``), then ``NAME_DIRECTIONS``. A ``final_*`` that names
    neither an error nor an accuracy is not judged."""
    known = {f.key: f.direction for f in suite("training").figures}
    if figure in known:
        return known[figure]
    for pattern, sign in NAME_DIRECTIONS:
        if re.search(pattern, figure):
            return sign
    return 0


def is_flagperf_layout(run_dir: Path) -> bool:
    """A FlagPerf results folder: no run.json, and
    ``<case>/round<k>/<ip>_noderank<i>/rank<R>.out.log`` files."""
    if (run_dir / RUN_FILE).is_file():
        return False
    return any(_ROUND.match(p.parent.parent.name) and NODE_DIR.match(p.parent.name)
               for p in run_dir.glob("*/round*/*_noderank*/rank*.out.log"))


def import_flagperf(run_dir: Path) -> list[dict[str, Any]]:
    """The round documents of a FlagPerf results folder, read in memory (nothing is written).

    FlagPerf keeps no exit codes, so a round's status comes from rank 0's FINISHED alone; the
    case id is the case folder's name (e.g. ``bert:pytorch_1.8:A100:1:8:1``); the suite is
    training, with no contract or profile; the metric is guessed from ``final_<metric>`` keys
    (``rounds.guess_metric``).

    Returns:
        The round documents (as ``rounds.parse_round``), in path order.
    """
    documents = []
    for round_dir in sorted(p for p in run_dir.glob("*/round*") if p.is_dir()):
        match = _ROUND.match(round_dir.name)
        if not match:
            continue
        hosts = []
        for node in sorted(round_dir.iterdir()):
            found = NODE_DIR.match(node.name)
            if node.is_dir() and found:
                hosts.append({"host": found["host"], "noderank": int(found["noderank"]),
                              "rc": None, "timed_out": False})
        if not hosts:
            continue
        hosts.sort(key=lambda h: h["noderank"])
        documents.append(parse_round({
            "run_dir": str(run_dir), "key": f"{round_dir.parent.name}/{round_dir.name}",
            "case_id": round_dir.parent.name, "round": int(match.group(1)), "hosts": hosts,
            "exit_codes_known": False, "metric": None, "suite": "training",
            "contract": None, "profile": None,
        }))
    return documents
