"""Filters for the data-set checks of preflight."""

from __future__ import annotations

DOCUMENTATION = """
name: flagperf_data
short_description: the layout_check.py requests of a host's rounds
"""


def flagperf_data_requests(rounds):
    """``[{"format", "path", "case_id"[, "checkpoint"]}]`` for the plan's rounds that read a data folder
    (``data_dir`` and ``data_format`` set), one per case: what
    ``src/flagperf_ansible/datasets/layout_check.py`` takes as its JSON argument."""
    seen, requests = set(), []
    for round_ in rounds:
        if not round_.get("data_dir") or not round_.get("data_format"):
            continue
        request = {"format": str(round_["data_format"]), "path": str(round_["data_dir"]),
                   "case_id": str(round_["case_id"])}
        if round_.get("checkpoint"):
            request["checkpoint"] = {"path": str(round_["checkpoint"]["path"]),
                                     "sha256": round_["checkpoint"].get("sha256")}
        if (request["format"], request["path"], request["case_id"]) not in seen:
            seen.add((request["format"], request["path"], request["case_id"]))
            requests.append(request)
    return requests


class FilterModule:
    def filters(self):
        return {"flagperf_data_requests": flagperf_data_requests}
