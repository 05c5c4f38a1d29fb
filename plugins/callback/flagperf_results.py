"""Writes run.json, each round's round.json and the summaries as the playbooks hand them over.

The playbooks hand data over with ``ansible.builtin.set_stats``: ``flagperf_run`` (preflight),
``flagperf_round`` (after each round's collect) and ``flagperf_report`` (report). The work is
done by the flagperf_ansible package; this adapter only routes.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import flagperf_ansible  # noqa: F401
except ImportError:  # running from a checkout without `pip install`: src/ beside plugins/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from ansible.plugins.callback import CallbackBase

from flagperf_ansible import results

DOCUMENTATION = """
name: flagperf_results
type: aggregate
short_description: write flagperf-ansible results files
description: Turns the run, round and report records handed over with set_stats into
  run.json, round.json and summary.json/summary.md under the run's results dir.
requirements:
  - enable in ansible.cfg (callbacks_enabled = flagperf_results)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "flagperf_results"
    CALLBACK_NEEDS_ENABLED = True

    def v2_runner_on_ok(self, result):
        payload = getattr(result, "result", None)
        if payload is None:
            payload = getattr(result, "_result", {})
        data = ((payload or {}).get("ansible_stats") or {}).get("data") or {}
        try:
            if "flagperf_run" in data:
                record = data["flagperf_run"]
                results.write_run(Path(record["run_dir"]), record["plan"], record.get("extra", {}),
                                  Path(__file__).resolve().parents[2])
            if "flagperf_round" in data:
                document = results.finalize_round(data["flagperf_round"])
                self._display.display(
                    f"flagperf: {document['case_id']} round {document['round']}: "
                    f"{document['status']} {document['reason']}".rstrip())
            if "flagperf_report" in data:
                summary = results.write_summary(Path(data["flagperf_report"]["run_dir"]))
                self._display.display(f"flagperf: run {summary['run_id']}: {summary['status']}")
        except (OSError, ValueError, KeyError) as err:
            # Never lose the run over a results-writing problem: say it, keep going.
            self._display.warning(f"flagperf_results: could not write results: {err}")
