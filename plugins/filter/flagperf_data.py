"""Filters for the data-set checks of preflight."""

from __future__ import annotations

DOCUMENTATION = """
name: flagperf_data
short_description: the flagperf_host.data_check requests of a host's rounds
"""


def flagperf_data_requests(rounds):
    """``[{"format", "path", "case_id"[, "checkpoint"][, "onnx"]}]`` for the plan's rounds that
    read a data folder (``data_dir`` and ``data_format`` set), one per case: what
    ``flagperf_host.data_check`` (``src/flagperf_host/data_check.py``) takes as its JSON argument.
    ``onnx`` is an inference case's ``exist_onnx_path`` (the file the round loads instead of
    exporting one)."""
    seen, requests = set(), []
    for round_ in rounds:
        if not round_.get("data_dir") or not round_.get("data_format"):
            continue
        request = {"format": str(round_["data_format"]), "path": str(round_["data_dir"]),
                   "case_id": str(round_["case_id"])}
        if round_.get("checkpoint"):
            request["checkpoint"] = {"path": str(round_["checkpoint"]["path"]),
                                     "sha256": round_["checkpoint"].get("sha256")}
        onnx = (round_.get("config") or {}).get("exist_onnx_path")
        if onnx and isinstance(onnx, str):
            request["onnx"] = onnx
        if (request["format"], request["path"], request["case_id"]) not in seen:
            seen.add((request["format"], request["path"], request["case_id"]))
            requests.append(request)
    return requests


class FilterModule:
    def filters(self):
        return {"flagperf_data_requests": flagperf_data_requests}
