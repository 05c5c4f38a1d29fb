"""The results layout on the controller (DESIGN.md "Results layout"): file names and their I/O.

::

    <results_dir>/<run_id>/
      run.json  plan.json  summary.json  summary.md  summary.html
      <case_id>/round<k>/
        round_start.json  round_record.json  round.json
        attempts/<n>/        earlier attempts of the round (--retries, --resume)
        <host>_noderank<i>/  rank<R>.out.log, monitor files, launcher.log, config.yaml,
                             sys_info.json

Every JSON and text file is written atomically (temporary file, then rename), so a reader never
sees half a file and an interrupted run keeps what it had. JSON Schemas of round.json and
summary.json are in ``schemas/``. What goes into round.json is ``flagperf_ansible.results.rounds``; into
the summaries, ``flagperf_ansible.results.summary``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from flagperf_ansible.results.provenance import Masker, controller_provenance

RUN_FILE = "run.json"               # what was asked, and by what (write_run)
PLAN_FILE = "plan.json"             # the run's plan (build_plan), for later phases and the wrapper
ROUND_FILE = "round.json"           # a round's parsed result (rounds.finalize_round)
ROUND_START = "round_start.json"    # written when a round begins: key, started_ms
ROUND_RECORD = "round_record.json"  # what the playbook handed over: round.json's raw input
ATTEMPTS = "attempts"               # earlier attempts of a round: attempts/<n>/
INTERRUPTED = "interrupted.json"    # Ctrl-C or SIGTERM stopped the run: in which phase, when
SYS_INFO = "sys_info.json"          # a node folder's description of its host (sys_info.py)
#: Set by the wrapper for its steps: after an interrupt its report step writes the summary, so
#: the results callback of an earlier step only marks the run interrupted.
REPORT_STEP_FOLLOWS_ENV = "FLAGPERF_REPORT_STEP_FOLLOWS"
SUMMARY_JSON, SUMMARY_MD, SUMMARY_HTML = "summary.json", "summary.md", "summary.html"
#: A node's folder in a round: ``<host>_noderank<i>`` (ours and FlagPerf's).
NODE_DIR = re.compile(r"^(?P<host>.+)_noderank(?P<noderank>\d+)$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: Path, data: Any, private: bool = False) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically (parents created), with the mode
    a plain new file gets (summary.json as summary.md), or 0600 when ``private``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if not private:
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=False, default=str)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The JSON document at ``path``.

    Raises:
        OSError: unreadable; ValueError: not JSON.
    """
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def read_optional(path: Path) -> Any:
    """The JSON document at ``path``, or None when it is missing or not JSON."""
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def read_plan(run_dir: Path) -> dict[str, Any]:
    """The run's plan.json as preflight wrote it (``plan.build_plan``); ``{}`` when the run has
    none (a FlagPerf folder, a round written by hand)."""
    plan = read_optional(Path(run_dir) / PLAN_FILE)
    return plan if isinstance(plan, dict) else {}


def planned_round(plan: dict[str, Any], key: str) -> dict[str, Any]:
    """The plan's round ``key`` (``<case_id>/round<k>``): its ``suite``, ``contract``,
    ``profile`` and the rest of ``build_plan``'s round; ``{}`` when the plan has none."""
    return next((r for r in plan.get("rounds") or () if isinstance(r, dict) and r.get("key") == key),
                {})


def mark_round_start(run_dir: Path, key: str) -> None:
    """Note that round ``key`` (``<case_id>/round<k>``) began: ``round_start.json`` with the
    time (epoch ms). A round with this file and no ``round.json`` was in flight."""
    write_json(Path(run_dir) / key / ROUND_START,
               {"key": key, "started_ms": int(time.time() * 1000)})


def keep_attempt(run_dir: Path, key: str) -> int | None:
    """Move a round's files (a failed, timed-out or interrupted attempt) to ``attempts/<n>/``
    under its folder, so that the round can run again without counting twice; returns ``n``,
    or None when there was nothing to keep."""
    round_dir = Path(run_dir) / key
    entries = [p for p in round_dir.iterdir() if p.name != ATTEMPTS] if round_dir.is_dir() else []
    if not entries:
        return None
    attempts = round_dir / ATTEMPTS
    number = 1 + max((int(p.name) for p in attempts.iterdir() if p.name.isdigit()), default=0) \
        if attempts.is_dir() else 1
    target = attempts / str(number)
    target.mkdir(parents=True)
    for entry in entries:
        os.replace(entry, target / entry.name)
    return number


def earlier_attempts(round_dir: Path) -> list[dict[str, Any]]:
    """round.json's ``attempts``: each earlier attempt's status, reason, hosts and times,
    oldest first."""
    found = []
    for path in sorted((round_dir / ATTEMPTS).glob(f"*/{ROUND_FILE}"),
                       key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0):
        earlier = read_optional(path) or {}
        found.append({
            "attempt": int(path.parent.name),
            "status": earlier.get("status", "failed"),
            "reason": earlier.get("reason", ""),
            "failed_hosts": earlier.get("failed_hosts", []),
            "hosts": [n.get("host") for n in earlier.get("nodes", [])],
            "started_ms": earlier.get("started_ms"),
            "ended_ms": earlier.get("ended_ms"),
        })
    return found


def round_status_of(run_dir: Path, key: str) -> str | None:
    """The status in a round's round.json, or None when it has none (not run, or in flight)."""
    document = read_optional(Path(run_dir) / key / ROUND_FILE)
    return document.get("status") if isinstance(document, dict) else None


def write_run(run_dir: Path, plan: dict[str, Any], extra: dict[str, Any],
              project: Path | None = None) -> dict[str, Any]:
    """Write ``run.json``: what was asked (cases and rounds planned, each case with its suite,
    contract and profile), how, and by what; and ``plan.json``: the plan itself
    (``flagperf_ansible.run.plan.build_plan``), read by later phases.

    ``extra`` may carry ``inventory`` (its name) and ``ansible_version``; the provenance block
    (git commit, command, hosts, versions, image) comes from ``controller_provenance``.
    Host names and addresses are masked when the plan says ``mask_hosts``.
    """
    from flagperf_ansible.paths import project_dir

    extra = dict(extra)
    provenance = controller_provenance(project or project_dir(), plan,
                                       str(extra.pop("inventory", "")),
                                       extra.pop("ansible_version", None))
    extra.pop("hosts", None)  # in provenance.inventory.hosts, with addresses and labels
    document = {
        "run_id": run_dir.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vendor": plan["vendor"],
        "container_runtime": plan["runtime"],
        "mask_hosts": bool(plan.get("mask_hosts")),
        "provenance": provenance,
        "cases": plan["cases"],
        **extra,
    }
    document = Masker(plan.get("hosts") or [], bool(plan.get("mask_hosts")))(document)
    write_json(run_dir / RUN_FILE, document)
    # What will run where, for the later phases and the wrapper (as the inventory names the
    # hosts, also with mask_hosts: the playbooks reach them by those names): the user's alone.
    write_json(run_dir / PLAN_FILE, plan, private=True)
    return document


def mark_interrupted(run_dir: Path, phase: str) -> None:
    """Record in ``run_dir`` that Ctrl-C or SIGTERM stopped the run during ``phase``
    (preflight, prepare, a round's key, between rounds, report): the summary then calls the
    run, and each case that did not finish, interrupted rather than failed. The first mark
    stays."""
    path = run_dir / INTERRUPTED
    if run_dir.is_dir() and not path.is_file():
        write_json(path, {"phase": phase, "at_ms": int(time.time() * 1000)})
